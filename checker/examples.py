"""The examples of ``results.json``: one engine row plus the stored rows it names, as plain JSON.

The engines answer with example *rows* (:mod:`checker.engine`: which values, positions, ops
and offsets); :mod:`checker.driver` fetches the ops, observations and replica records those
rows name and hands them here through :class:`Evidence`.  Each function builds the example
of one anomaly family, with the fields its definition (:mod:`checker.definitions`) talks
about -- so an example is read the way the definition is written:

* value checks: the value, its offset(s) and its send and/or first read;
* inconsistent-offsets: the position and the first observations of it;
* order checks: the two offsets compared and the ops that returned them -- the earlier and
  the later poll (one poll for the ``int-`` variants), the earlier and the later read
  (stale-read), the earlier and the later send and, for realtime-order, the later send's
  invoke, which came after the earlier send's acknowledgement;
* group checks: the position or commit, the known committed offset it is compared with, and
  the ops of both -- the acknowledged send and the op that set the committed position
  (``committed_by``: an ``ok`` commit, or the read a fresh assignment resumed with)
  for group-skip; the re-read and ``committed_by`` for group-redelivery; both commits for
  commit-regression; the commit and the read of the highest offset (``read_offset``, null
  when nothing was read) for committed-beyond-read; both assigns and their generations
  (``prev_generation``, ``generation``) for generation-regression;
* replica-divergence: the first divergent offset of a replica pair and both records.

Example ops show only the records that matter to the example (:func:`trim`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from checker.definitions import (
    ABORTED_READ,
    COMMIT_REGRESSION,
    DUPLICATE,
    G1A,
    GENERATION_REGRESSION,
    GROUP_REDELIVERY,
    GROUP_SKIP,
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    LOST_READ,
    LOST_WRITE,
    REALTIME_ORDER,
    SEND_CHECKS,
    STALE_READ,
    UNEXPECTED,
    UNSEEN,
)
from testbed.record.history import F_DRAIN, F_POLL, F_SEND, F_TXN_POLL, F_TXN_SEND
from testbed.record.ops import OP_TYPES

MAX_OBSERVATIONS_SHOWN = 10


class Evidence(Protocol):
    """What the driver fetched for the examples of one pass."""

    observations_at: dict[Any, list[dict[str, Any]]]
    """(run_id, partition, offset) -> history rows observing that position."""
    replica_records_at: dict[Any, list[dict[str, Any]]]
    """(run_id, partition, offset) -> replica rows at that position."""

    def op(self, run_id: int, index: Any) -> dict[str, Any] | None:
        """The op (run_id, index) with the records some example needs (None: no such op)."""


def trim(
    op: dict[str, Any] | None, partition: int, keep: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """An example op with only the records that matter to this example.

    Engines already return only the records some example needs (a drain op may hold
    millions); this drops those that belong to another example of the same op.
    """
    if op is None:
        return None
    value = op.get("value")
    if op.get("f") == "txn" and isinstance(value, list):
        return {**op, "value": _trim_txn(value, partition, keep)}
    if isinstance(value, list):
        return {
            **op,
            "value": [
                r for r in value if isinstance(r, dict) and r.get("partition") == partition and keep(r)
            ],
        }
    if isinstance(value, dict) and isinstance(value.get("records"), list):
        return {**op, "value": {**value, "records": [r for r in value["records"] if keep(r)]}}
    return op


def _trim_txn(micro_ops: list[Any], partition: int, keep: Callable[[dict[str, Any]], bool]) -> list[Any]:
    """A transaction's micro-ops that matter to an example: its sends and polled records of the
    value (``keep``) in ``partition``, and its end (commit or abort, with the time it began)."""
    shown: list[Any] = []
    for micro in micro_ops:
        if not isinstance(micro, dict):
            continue
        if micro.get("f") == "poll" and isinstance(micro.get("records"), list):
            records = [r for r in micro["records"] if r.get("partition") == partition and keep(r)]
            if records:
                shown.append({**micro, "records": records})
        elif micro.get("f") == "send":
            if micro.get("partition") == partition and keep(micro):
                shown.append(micro)
        elif micro.get("f") in ("commit", "abort"):
            shown.append(micro)
    return shown


def value_example(kind: str, row: dict[str, Any], found: Evidence, run_id: int) -> dict[str, Any]:
    partition = row["partition"]
    value = row["value"] if row["value"] is not None else row["value_text"]

    def same_value(record: dict[str, Any]) -> bool:
        return bool(record.get("value") == value)

    send = found.op(run_id, row["send_index"])
    read = trim(found.op(run_id, row["read_index"]), partition, same_value)
    example: dict[str, Any] = {"partition": partition, "value": value}
    if kind == LOST_WRITE:
        example.update(offset=row["ack_offset"], send=send)
    elif kind == UNSEEN:
        example.update(send=send)
    elif kind in (ABORTED_READ, G1A):
        example.update(send=send, read=read)
    elif kind == LOST_READ:
        example.update(offset=row["poll_offset"], read=read)
    elif kind == UNEXPECTED:
        example.update(offset=row["read_min_offset"], read=read)
    elif kind == DUPLICATE:
        example.update(offsets=[row["read_min_offset"], row["read_max_offset"]], read=read)
    return example


def _nulls_first(*values: Any) -> tuple[tuple[bool, Any], ...]:
    """A sort key ordering each value ascending with missing values first (as pandas' ``na_position``)."""
    return tuple((value is not None, 0 if value is None else value) for value in values)


def offset_example(row: dict[str, Any], found: Evidence, run_id: int) -> dict[str, Any]:
    rows = found.observations_at.get((run_id, row["partition"], row["offset"]), [])
    shown = []
    for obs in sorted(rows, key=lambda obs: _nulls_first(obs["index"], obs["item"]))[:MAX_OBSERVATIONS_SHOWN]:
        f = {F_SEND: "send", F_POLL: "poll", F_DRAIN: "drain", F_TXN_SEND: "txn", F_TXN_POLL: "txn"}[obs["f"]]
        value = obs["value"] if obs["value"] is not None else obs["value_text"]
        shown.append(
            {
                "index": obs["index"],
                "process": obs["process"],
                "f": f,
                "type": OP_TYPES[obs["type"]],
                "value": value,
            }
        )
    return {
        "partition": row["partition"],
        "offset": row["offset"],
        "observations": row["observations"],
        "seen": shown,
    }


def order_example(kind: str, row: dict[str, Any], found: Evidence, run_id: int) -> dict[str, Any]:
    """Both offsets compared, and the ops that returned them (see the module docstring)."""
    partition = row["partition"]
    example: dict[str, Any] = {
        "process": row["process"],
        "partition": partition,
        "prev_offset": row["prev_offset"],
        "offset": row["offset"],
    }
    if kind in SEND_CHECKS:
        example.update(prev_send=found.op(run_id, row["prev_index"]), send=found.op(run_id, row["index"]))
        if kind == REALTIME_ORDER:
            example.update(invoke=found.op(run_id, row["invoke_index"]))
        return example
    offsets = {row["prev_offset"], row["offset"]}

    def relevant(record: dict[str, Any]) -> bool:
        return record.get("offset") in offsets

    later = trim(found.op(run_id, row["index"]), partition, relevant)
    if kind in (INT_POLL_SKIP, INT_NONMONOTONIC_POLL):
        example.update(poll=later)
    else:
        earlier = trim(found.op(run_id, row["prev_index"]), partition, relevant)
        names = ("prev_read", "read") if kind == STALE_READ else ("prev_poll", "poll")
        example.update({names[0]: earlier, names[1]: later})
    return example


def group_example(kind: str, row: dict[str, Any], found: Evidence, run_id: int) -> dict[str, Any]:
    """The position or commit, the offset it is compared with, and the ops of both (see the module docstring)."""
    partition, offset, known = row["partition"], row["offset"], row["prev_offset"]

    def shown(index: Any, at: Any) -> dict[str, Any] | None:
        return trim(found.op(run_id, index), partition, lambda record: record.get("offset") == at)

    if kind == GROUP_SKIP:
        return {
            "partition": partition,
            "offset": offset,
            "committed_offset": known,
            "send": found.op(run_id, row["index"]),
            "committed_by": shown(row["prev_index"], known),
        }
    if kind == GROUP_REDELIVERY:
        return {
            "process": row["process"],
            "partition": partition,
            "offset": offset,
            "committed_offset": known,
            "read": shown(row["index"], offset),
            "committed_by": shown(row["prev_index"], known),
        }
    if kind == GENERATION_REGRESSION:
        return {
            "process": row["process"],
            "generation": offset,
            "prev_generation": known,
            "prev_assign": found.op(run_id, row["prev_index"]),
            "assign": found.op(run_id, row["index"]),
        }
    example: dict[str, Any] = {"process": row["process"], "partition": partition, "offset": offset}
    if kind == COMMIT_REGRESSION:
        example.update(prev_offset=known, prev_commit=found.op(run_id, row["prev_index"]))
    else:  # committed-beyond-read
        example.update(read_offset=known, read=shown(row["prev_index"], known))
    example.update(commit=found.op(run_id, row["index"]))
    return example


def divergence_example(row: dict[str, Any], found: Evidence, run_id: int) -> dict[str, Any]:
    at = found.replica_records_at.get((run_id, row["partition"], row["offset"]), [])
    by_node = {r["node"]: {k: r[k] for k in ("offset", "leader_epoch", "key", "value")} for r in at}
    return {
        "partition": row["partition"],
        "offset": row["offset"],
        "positions": row["positions"],
        "replicas": {row["node_a"]: by_node.get(row["node_a"]), row["node_b"]: by_node.get(row["node_b"])},
    }
