"""The ``txn`` op: a transaction of micro-ops, validated and spread over ``history.parquet`` rows.

A ``txn`` op (``docs/history.md``, "The transactional workload's values") carries a list of
micro-ops: ``{"f": "send", "partition", "key", "value"[, "offset"]}``, ``{"f": "poll"[,
"records": [...]]}`` and (consume-transform-produce) ``{"f": "send-offsets", "group"[, "offsets":
[{"partition", "offset"}, ...]]}``, and in a completion at most one end micro-op, last: ``{"f":
"commit" | "abort", "time": ns}``, when the client called ``commit_transaction()`` /
``abort_transaction()``.
The op's type is the transaction's outcome: ``ok`` committed, ``fail`` certainly not committed,
``info`` unknown.

In ``history.parquet`` every ``txn`` op is a *head* row (``f`` = :data:`F_TXN`, its whole value as
JSON in ``payload``: :func:`testbed.record.history.table_to_ops` restores the op from it alone) and
every completion also gives *item* rows (shape :data:`SHAPE_TXN_ITEM`), with the completion's
type, so that the checker aggregates transactions with the same integer columns as plain sends
and reads:

* :data:`F_TXN_SEND` -- one per send micro-op: ``item`` its position, ``partition``, ``key``,
  ``value``, ``offset`` (null when the client did not learn it), ``inherited`` when the
  completion carried no value and the send was taken from the invoke;
* :data:`F_TXN_POLL` -- one per record a poll micro-op read: ``item`` the micro-op's position,
  ``partition``, ``offset``, ``key``, ``value`` / ``value_text``;
* :data:`F_TXN_OFFSETS` -- one per partition a send-offsets micro-op sent
  (``send_offsets_to_transaction``): ``item`` its position, ``partition``, ``offset`` (the
  group's next offset to read, as Kafka commits it), ``key`` the consumer group, ``value``
  :func:`group_code` of it (the checks group by integers);
* :data:`F_TXN_END` -- the end micro-op: ``item`` its position, ``value`` the time (ns) it was
  called, ``complete`` true for a commit, false for an abort.

Why validate so much: the completion must be the invoke's transaction (same micro-ops, same sends
in the same order), or the checker would join reads and offsets onto sends that were never part
of it; and an ``ok`` transaction that says it aborted is a contradiction no check could read.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

from testbed.record.history_lines import is_json_int
from testbed.record.op_fields import record_fields, send_fields

F_TXN: Final = 5
"""The ``txn`` op's head row."""
F_TXN_SEND: Final = 6
F_TXN_POLL: Final = 7
F_TXN_END: Final = 8
F_TXN_OFFSETS: Final = 9
SHAPE_TXN_ITEM: Final = 5
"""A row derived from one micro-op of a ``txn`` completion (the op itself is its head row)."""

MAX_MICRO_OPS: Final = 64
"""More micro-ops than any workload draws: a longer list is a broken history, not a transaction."""
END_FS: Final = ("commit", "abort")
SEND_OFFSETS: Final = "send-offsets"

Row = tuple[int, dict[str, Any]]
"""A derived row: its ``f`` code and its column values."""


def _micro_f(micro: Any, where: str) -> str:
    if not isinstance(micro, dict) or not isinstance(micro.get("f"), str):
        raise ValueError(f"{where} must be an object with a string 'f', got {micro!r}")
    f: str = micro["f"]
    if f not in ("send", "poll", SEND_OFFSETS, *END_FS):
        raise ValueError(f"{where} has unknown f {f!r} (send, poll, {SEND_OFFSETS}, commit or abort)")
    return f


def group_code(group: str) -> int:
    """The integer a consumer group's offset rows carry in ``value``: the CRC-32 of its name
    (two groups of one run colliding is a 1 in 4 billion chance; the name is in ``key``)."""
    return zlib.crc32(group.encode())


def _group(micro: dict[str, Any], where: str) -> str:
    group = micro.get("group")
    if not isinstance(group, str) or not group:
        raise ValueError(
            f"{where}: a {SEND_OFFSETS} micro-op needs a non-empty string 'group', got {micro!r}"
        )
    return group


def _offset_rows(micro: dict[str, Any], position: int, where: str) -> list[Row]:
    """A completed send-offsets micro-op's rows: one per partition of its ``offsets`` (none when
    it never ran)."""
    if set(micro) - {"f", "group", "offsets"}:
        raise ValueError(f"{where}: a {SEND_OFFSETS} completion is {{f, group[, offsets]}}, got {micro!r}")
    group = _group(micro, where)
    offsets = micro.get("offsets", [])
    if not isinstance(offsets, list):
        raise ValueError(f"{where}: offsets must be a list of {{partition, offset}}, got {offsets!r}")
    rows: list[Row] = []
    seen: set[int] = set()
    for entry in offsets:
        if (
            not isinstance(entry, dict)
            or set(entry) != {"partition", "offset"}
            or not is_json_int(entry["partition"])
            or not is_json_int(entry["offset"])
            or entry["partition"] < 0
            or entry["offset"] < 0
            or entry["partition"] in seen
        ):
            raise ValueError(
                f"{where}: an offsets entry is {{partition, offset}}, non-negative integers, one per "
                f"partition; got {entry!r}"
            )
        seen.add(entry["partition"])
        rows.append(
            (
                F_TXN_OFFSETS,
                {
                    "item": position,
                    "partition": entry["partition"],
                    "offset": entry["offset"],
                    "key": group,
                    "value": group_code(group),
                },
            )
        )
    return rows


def check_invoke(value: Any) -> None:
    """An invoke's value: a non-empty list of send and poll micro-ops, without outcomes."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_MICRO_OPS:
        raise ValueError(f"a txn invoke value must be a list of 1..{MAX_MICRO_OPS} micro-ops, got {value!r}")
    for position, micro in enumerate(value):
        where = f"txn micro-op {position}"
        f = _micro_f(micro, where)
        if f == "send":
            if "offset" in micro:
                raise ValueError(f"{where}: a send invoke carries no offset, got {micro!r}")
            send_fields(micro, frozenset({"f"}))
        elif f == "poll":
            if set(micro) != {"f"}:
                raise ValueError(f"{where}: a poll invoke is {{'f': 'poll'}}, got {micro!r}")
        elif f == SEND_OFFSETS:
            if set(micro) != {"f", "group"}:
                raise ValueError(f"{where}: a {SEND_OFFSETS} invoke is {{f, group}}, got {micro!r}")
            _group(micro, where)
        else:
            raise ValueError(f"{where}: an invoke has no {f!r} micro-op (it ends a completion)")


def _end_row(micro: Any, position: int, op_type: str) -> Row:
    if set(micro) != {"f", "time"} or not is_json_int(micro["time"]):
        raise ValueError(f"txn micro-op {position}: an end micro-op is {{f, time}}, got {micro!r}")
    if op_type == "ok" and micro["f"] != "commit":
        raise ValueError(f"txn micro-op {position}: an ok (committed) txn cannot end in {micro['f']!r}")
    return F_TXN_END, {"item": position, "value": micro["time"], "complete": micro["f"] == "commit"}


def _completed_rows(micro: Any, planned: dict[str, Any], position: int) -> list[Row]:
    where = f"txn micro-op {position}"
    f = _micro_f(micro, where)
    if f != planned["f"]:
        raise ValueError(f"{where} is {f!r} but the invoke's was {planned['f']!r}")
    if f == "send":
        fields = send_fields(micro, frozenset({"f"}))
        if {k: fields[k] for k in ("partition", "key", "value")} != {
            k: planned.get(k) for k in ("partition", "key", "value")
        }:
            raise ValueError(f"{where}: the send {micro!r} is not the invoke's {planned!r}")
        return [(F_TXN_SEND, {"item": position, **fields})]
    if f == SEND_OFFSETS:
        if micro.get("group") != planned["group"]:
            raise ValueError(f"{where}: the {SEND_OFFSETS} {micro!r} is not the invoke's {planned!r}")
        return _offset_rows(micro, position, where)
    if set(micro) - {"f", "records"}:
        raise ValueError(f"{where}: a poll completion is {{f[, records]}}, got {micro!r}")
    records = micro.get("records", [])
    if not isinstance(records, list):
        raise ValueError(f"{where}: poll records must be a list, got {records!r}")
    return [(F_TXN_POLL, {"item": position, **record_fields(r, None)}) for r in records]


def completion_rows(value: Any, invoke_value: Any, op_type: str) -> list[Row]:
    """The item rows of a completion (``value`` null: the invoke's sends, inherited, no reads)."""
    if value is None:
        return [
            (F_TXN_SEND, {"item": i, **send_fields(m, frozenset({"f"})), "inherited": True})
            for i, m in enumerate(invoke_value)
            if m["f"] == "send"
        ]
    if not isinstance(value, list):
        raise ValueError(f"a txn completion value must be a list of micro-ops or null, got {value!r}")
    body, end = value, None
    if value and isinstance(value[-1], dict) and value[-1].get("f") in END_FS:
        body, end = value[:-1], value[-1]
    if len(body) != len(invoke_value):
        raise ValueError(
            f"a txn completion has {len(body)} micro-op(s) before its end, its invoke {len(invoke_value)}"
        )
    rows = [row for i, m in enumerate(body) for row in _completed_rows(m, invoke_value[i], i)]
    if end is not None:
        rows.append(_end_row(end, len(body), op_type))
    return rows
