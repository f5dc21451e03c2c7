"""The history format: JSON lines while a test runs, Parquet for analysis.

One place owns the serialisation of :class:`testbed.record.ops.Op`, so that workloads, nemesis,
harness and checker can never disagree about it (the full description with examples is
``docs/history.md``).  Its public names are all importable from here; the format is three jobs,
three modules:

* :mod:`testbed.record.history_lines` -- **during a run** the history is ``history.jsonl``: a
  header line ``{"format": "tidemark-history", "schema_version": 1}`` followed by one
  ``Op.to_dict()`` JSON object per line, appended and flushed as each op happens, so a killed run
  still has every op it completed (:class:`HistoryWriter`, :func:`iter_history`);
* this module -- **for analysis** the history is ``history.parquet`` (:func:`convert_history`):
  one row per op, except that an op carrying records (a ``poll`` or ``drain`` completion) becomes
  one row per record, a ``txn`` completion also one row per micro-op and record
  (:mod:`testbed.record.txn_rows`), and :func:`table_to_ops` restores every op exactly;
* :mod:`testbed.record.parquet_files` -- how every table of the record is written
  (:func:`write_parquet`) and its footer read (:func:`read_footer`), shared with the replica and
  event tables.

Everything the checker aggregates is an integer column -- ``f`` and ``type`` are small integer
codes, ``process`` is an int (``-1`` = nemesis), ``value`` is the integer message value --
because grouping on integers is what makes the Spark checker fast (see ``bench/checker.py``).
``shape`` records how the op's ``value`` is spread over the columns.  The file's key-value
metadata carries the schema version, a random 63-bit ``run_id`` (also a constant column, so one
Spark job can group thousands of runs by an integer) and the lines skipped as bad.

The replica-dump row format (one JSON object per record or partition, as printed by
``python -m broker_impl.dump``) lives in :mod:`testbed.record.replicas`, which turns the dumps of a
run into ``replicas.parquet``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from testbed.record.history_lines import HISTORY_FORMAT as HISTORY_FORMAT
from testbed.record.history_lines import HISTORY_SCHEMA_VERSION as HISTORY_SCHEMA_VERSION
from testbed.record.history_lines import HistoryFormatError as HistoryFormatError
from testbed.record.history_lines import HistoryWriter as HistoryWriter
from testbed.record.history_lines import SkippedLine as SkippedLine
from testbed.record.history_lines import is_json_int as is_json_int
from testbed.record.history_lines import iter_history as iter_history
from testbed.record.history_lines import op_from_dict as op_from_dict
from testbed.record.history_lines import read_history as read_history
from testbed.record.op_fields import record_fields, send_fields
from testbed.record.ops import NEMESIS_PROCESS, OP_TYPES, Op
from testbed.record.parquet_files import DELTA_COLUMNS as DELTA_COLUMNS
from testbed.record.parquet_files import METADATA_PREFIX as METADATA_PREFIX
from testbed.record.parquet_files import PARQUET_LAYOUT as PARQUET_LAYOUT
from testbed.record.parquet_files import PLAIN_COLUMNS as PLAIN_COLUMNS
from testbed.record.parquet_files import ROW_GROUP_ROWS as ROW_GROUP_ROWS
from testbed.record.parquet_files import holds_only as holds_only
from testbed.record.parquet_files import new_run_id as new_run_id
from testbed.record.parquet_files import parquet_metadata as parquet_metadata
from testbed.record.parquet_files import parquet_options as parquet_options
from testbed.record.parquet_files import read_footer as read_footer
from testbed.record.parquet_files import read_metadata as read_metadata
from testbed.record.parquet_files import write_parquet as write_parquet
from testbed.record.txn_rows import F_TXN as F_TXN
from testbed.record.txn_rows import F_TXN_END as F_TXN_END
from testbed.record.txn_rows import F_TXN_OFFSETS as F_TXN_OFFSETS
from testbed.record.txn_rows import F_TXN_POLL as F_TXN_POLL
from testbed.record.txn_rows import F_TXN_SEND as F_TXN_SEND
from testbed.record.txn_rows import SHAPE_TXN_ITEM as SHAPE_TXN_ITEM
from testbed.record.txn_rows import check_invoke, completion_rows

NEMESIS_PROCESS_CODE = -1
TYPE_CODES: dict[str, int] = {name: code for code, name in enumerate(OP_TYPES)}
F_SEND, F_POLL, F_DRAIN, F_OTHER, F_NEMESIS = 0, 1, 2, 3, 4
F_CODES: dict[str, int] = {"send": F_SEND, "poll": F_POLL, "drain": F_DRAIN, "txn": F_TXN}
"""The ``f`` codes of the client ops the checker reads; any other client op is ``F_OTHER``, a
nemesis op ``F_NEMESIS``.  A ``txn`` op's micro-ops have codes of their own (``F_TXN_SEND``,
``F_TXN_POLL``, ``F_TXN_OFFSETS``, ``F_TXN_END``: :mod:`testbed.record.txn_rows`)."""
SEND_CODES: tuple[int, ...] = (F_SEND, F_TXN_SEND)
"""The rows that are one send: a ``send`` op's, and a ``txn`` op's send micro-op's (with the
transaction's outcome as type).  The value and offset checks read both alike."""
POLL_CODES: tuple[int, ...] = (F_POLL, F_TXN_POLL)
"""The rows that are one record a consumer polled: a ``poll`` op's, and a ``txn`` poll micro-op's."""

# How an op's ``value`` maps onto the row columns (the ``shape`` column).
SHAPE_NONE = 0  # value is None
SHAPE_PAYLOAD = 1  # value is the JSON text in ``payload`` (nemesis ops, invokes, ...)
SHAPE_SEND = 2  # {"partition", "key", "value"[, "offset"]} in their columns
SHAPE_RECORDS = 3  # a poll's list of records, one row per record (``item`` = position)
SHAPE_DRAIN = 4  # {"partition", "records", "end_offset", "complete"}, one row per record
# SHAPE_TXN_ITEM = 5: a row derived from a txn completion's micro-op (testbed.record.txn_rows)

MAX_SKIPPED_LINES_KEPT = 100

HISTORY_SCHEMA = pa.schema(
    [
        ("run_id", pa.int64()),
        ("index", pa.int64()),
        ("time", pa.int64()),
        ("process", pa.int32()),
        ("type", pa.int8()),
        ("f", pa.int8()),
        ("f_name", pa.string()),
        ("shape", pa.int8()),
        ("item", pa.int32()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("value", pa.int64()),
        ("value_text", pa.string()),
        ("end_offset", pa.int64()),
        ("complete", pa.bool_()),
        ("inherited", pa.bool_()),
        ("error", pa.string()),
        ("node", pa.string()),
        ("payload", pa.string()),
    ]
)
"""Columns of ``history.parquet``.  ``inherited`` marks a send completion that carried no
value of its own: its partition/key/value columns were copied from its invoke."""


# ---------------------------------------------------------------- ops -> Arrow rows


class _Columns:
    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {field.name: [] for field in HISTORY_SCHEMA}

    def add(self, op: Op, f_code: int, shape: int, **fields: Any) -> None:
        row = self.data
        row["index"].append(op.index)
        row["time"].append(op.time)
        row["process"].append(NEMESIS_PROCESS_CODE if op.process == NEMESIS_PROCESS else op.process)
        row["type"].append(TYPE_CODES[op.type])
        row["f"].append(f_code)
        row["f_name"].append(op.f)
        row["shape"].append(shape)
        row["error"].append(op.error)
        row["node"].append(op.node)
        for name in (
            "item",
            "partition",
            "offset",
            "key",
            "value",
            "value_text",
            "end_offset",
            "complete",
            "payload",
        ):
            row[name].append(fields.get(name))
        row["inherited"].append(fields.get("inherited", False))


class _Flattener:
    """Turns ops into rows, pairing each client completion with its invoke.

    It is the one validator of the client-op contract (``docs/history.md`` section 1): each
    process has at most one op pending, every completion has a pending invoke of its ``f``,
    and a process whose op ended ``info`` never invokes again.  The last rule is what lets
    the checker read a process id as one sequence of ops with known outcomes: a successor
    that reused the id would join its reads onto the dead process's (a false
    nonmonotonic-poll or stale-read) and its sends onto the dead producer's.
    """

    def __init__(self) -> None:
        self.columns = _Columns()
        self._pending: dict[int, Op] = {}
        self._retired: dict[int, Op] = {}
        """process -> the ``info`` completion that ended it."""

    def add(self, op: Op) -> None:
        if op.process == NEMESIS_PROCESS:
            self._payload(op, F_NEMESIS)
            return
        assert isinstance(op.process, int)
        invoke = self._pending.get(op.process)
        if op.type == "invoke":
            if invoke is not None:
                raise ValueError(
                    f"process {op.process} invokes again while op {invoke.index} ({invoke.f}) is pending"
                )
            ended = self._retired.get(op.process)
            if ended is not None:
                raise ValueError(
                    f"process {op.process} invokes {op.f!r} after its op {ended.index} ({ended.f}) ended"
                    " info: a process whose op ended info never invokes again (continue under a fresh"
                    " process id)"
                )
        elif invoke is None or invoke.f != op.f:
            raise ValueError(
                f"a {op.type} completion of {op.f!r} by process {op.process} has no pending invoke"
            )
        f_code = F_CODES.get(op.f, F_OTHER)
        if f_code == F_TXN:
            self._txn(op, invoke)
        elif f_code == F_SEND:
            self._send(op, invoke)
        elif f_code == F_POLL and op.type == "ok":
            self._records(op, F_POLL, SHAPE_RECORDS, op.value, None, {})
        elif f_code == F_DRAIN and op.type == "ok":
            self._drain(op)
        else:
            self._payload(op, f_code)
        if op.type == "invoke":
            self._pending[op.process] = op
        else:
            del self._pending[op.process]
            if op.type == "info":
                self._retired[op.process] = op

    def _txn(self, op: Op, invoke: Op | None) -> None:
        if invoke is None:
            check_invoke(op.value)
            rows = []
        else:
            rows = completion_rows(op.value, invoke.value, op.type)
        self._payload(op, F_TXN)
        for f_code, fields in rows:
            self.columns.add(op, f_code, SHAPE_TXN_ITEM, **fields)

    def finish(self) -> _Columns:
        """The rows, with a txn invoke that never completed (a history cut short) given the item
        rows of an ``info`` completion: its sends may have been written, and a read of one of them
        must find the send it came from, not be reported as a value no one sent."""
        for invoke in sorted(self._pending.values(), key=lambda op: op.index):
            if invoke.f == "txn":
                unknown = dataclasses.replace(invoke, type="info", value=None)
                for f_code, fields in completion_rows(None, invoke.value, "info"):
                    self.columns.add(unknown, f_code, SHAPE_TXN_ITEM, **fields)
        return self.columns

    def _payload(self, op: Op, f_code: int) -> None:
        if op.value is None:
            self.columns.add(op, f_code, SHAPE_NONE)
        else:
            self.columns.add(op, f_code, SHAPE_PAYLOAD, payload=json.dumps(op.value, separators=(",", ":")))

    def _send(self, op: Op, invoke: Op | None) -> None:
        if op.value is not None:
            self.columns.add(op, F_SEND, SHAPE_SEND, **send_fields(op.value))
            return
        if op.type == "invoke":
            raise ValueError("a send invoke must carry {partition, key, value}")
        assert invoke is not None
        fields = send_fields(invoke.value)
        fields["offset"] = None
        self.columns.add(op, F_SEND, SHAPE_NONE, inherited=True, **fields)

    def _records(
        self, op: Op, f_code: int, shape: int, records: Any, partition: int | None, extra: dict[str, Any]
    ) -> None:
        if not isinstance(records, list):
            raise ValueError(f"{op.f} records must be a list, got {records!r}")
        rows = [record_fields(record, partition) for record in records]
        if not rows:
            self.columns.add(op, f_code, shape, partition=partition, **extra)
        for item, fields in enumerate(rows):
            self.columns.add(op, f_code, shape, item=item, **fields, **extra)

    def _drain(self, op: Op) -> None:
        value = op.value
        if not isinstance(value, dict) or set(value) != {"partition", "records", "end_offset", "complete"}:
            raise ValueError(
                f"a drain ok value must be {{partition, records, end_offset, complete}}, got {value!r}"
            )
        if (
            not is_json_int(value["partition"])
            or not is_json_int(value["end_offset"])
            or not isinstance(value["complete"], bool)
        ):
            raise ValueError(
                f"a drain needs integer partition/end_offset and boolean complete, got {value!r}"
            )
        extra = {"end_offset": value["end_offset"], "complete": value["complete"]}
        self._records(op, F_DRAIN, SHAPE_DRAIN, value["records"], value["partition"], extra)


def ops_to_table(ops: list[Op], run_id: int, skipped: list[SkippedLine] | None = None) -> pa.Table:
    """Flatten ops into a ``HISTORY_SCHEMA`` table (raises ``ValueError`` on a malformed op)."""
    flattener = _Flattener()
    for op in ops:
        flattener.add(op)
    return _finish_table(flattener.finish(), run_id, skipped or [])


def _finish_table(columns: _Columns, run_id: int, skipped: list[SkippedLine]) -> pa.Table:
    columns.data["run_id"] = [run_id] * len(columns.data["index"])
    table = pa.table(columns.data, schema=HISTORY_SCHEMA)
    extra = {
        "skipped_line_count": str(len(skipped)),
        "skipped_lines": json.dumps([dataclasses.asdict(s) for s in skipped[:MAX_SKIPPED_LINES_KEPT]]),
    }
    return table.replace_schema_metadata(parquet_metadata(run_id, "history", extra))


@dataclasses.dataclass(frozen=True, slots=True)
class ConversionSummary:
    source: Path
    target: Path
    ops: int
    rows: int
    run_id: int
    skipped: tuple[SkippedLine, ...]


def convert_history(
    source: Path | str, target: Path | str, *, skip_bad_lines: bool = False
) -> ConversionSummary:
    """Convert ``history.jsonl`` to ``history.parquet`` (written to a temp name, then renamed).

    A line that is not JSON, not an op, or whose value breaks the workload contract (e.g. a
    send without an integer value, a completion without an invoke, an invoke by a process
    whose op ended ``info``) raises :class:`HistoryFormatError` naming the line; with
    ``skip_bad_lines`` it is skipped and recorded in the Parquet metadata, and the checker
    then never says ``valid`` -- if any line was skipped (none skipped: the normal verdict).
    """
    source, target = Path(source), Path(target)
    if not source.is_file():
        raise HistoryFormatError(source, None, "no such history file")
    skipped: list[SkippedLine] = []
    flattener = _Flattener()
    ops = 0
    for number, op in iter_history(source, skipped if skip_bad_lines else None):
        try:
            flattener.add(op)
        except ValueError as error:
            if not skip_bad_lines:
                raise HistoryFormatError(source, number, str(error)) from None
            skipped.append(SkippedLine(number, str(error)))
            continue
        ops += 1
    run_id = new_run_id()
    table = _finish_table(flattener.finish(), run_id, skipped)
    write_parquet(table, target)
    return ConversionSummary(source, target, ops, table.num_rows, run_id, tuple(skipped))


# ---------------------------------------------------------------- Parquet -> ops


def _record_dict(row: dict[str, Any], with_partition: bool) -> dict[str, Any]:
    value = row["value"] if row["value"] is not None else row["value_text"]
    record = {"offset": row["offset"], "key": row["key"], "value": value}
    return {"partition": row["partition"], **record} if with_partition else record


def _op_value(rows: list[dict[str, Any]]) -> Any:
    first = rows[0]
    shape = first["shape"]
    if shape == SHAPE_NONE:
        return None
    if shape == SHAPE_PAYLOAD:
        return json.loads(first["payload"])
    if shape == SHAPE_SEND:
        value = {"partition": first["partition"], "key": first["key"], "value": first["value"]}
        return value if first["offset"] is None else {**value, "offset": first["offset"]}
    records = [_record_dict(row, shape == SHAPE_RECORDS) for row in rows if row["item"] is not None]
    if shape == SHAPE_RECORDS:
        return records
    return {
        "partition": first["partition"],
        "records": records,
        "end_offset": first["end_offset"],
        "complete": first["complete"],
    }


def table_to_ops(table: pa.Table) -> list[Op]:
    """Restore the ops of a ``history.parquet`` table (or any subset of whole ops), in index order."""
    by_index: dict[int, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        by_index.setdefault(row["index"], []).append(row)
    ops = []
    for index in sorted(by_index):
        heads = [row for row in by_index[index] if row["shape"] != SHAPE_TXN_ITEM]
        if not heads:
            continue  # a txn's item rows without their head: derived, the op is not in the subset
        rows = sorted(heads, key=lambda r: -1 if r["item"] is None else r["item"])
        first = rows[0]
        process = NEMESIS_PROCESS if first["process"] == NEMESIS_PROCESS_CODE else first["process"]
        ops.append(
            Op(
                index,
                first["time"],
                process,
                OP_TYPES[first["type"]],
                first["f_name"],
                _op_value(rows),
                first["error"],
                first["node"],
            )
        )
    return ops


def read_op_heads(path: Path | str) -> pa.Table:
    """One row per op of a ``history.parquet`` (an op with records spans one row per record;
    this keeps its first): ``index, time, process, type`` (the type's name), ``f, error,
    node, payload``.  For readers that need every op but not the records (the timeline)."""
    read_metadata(path, "history")
    columns = ["index", "time", "process", "type", "f_name", "item", "error", "node", "payload", "shape"]
    table = pq.read_table(path, columns=columns)
    first = pc.or_kleene(pc.is_null(table["item"]), pc.equal(table["item"], 0))
    table = table.filter(pc.and_kleene(first, pc.not_equal(table["shape"], SHAPE_TXN_ITEM)))
    table = table.drop(["shape"])
    type_names = pa.array(OP_TYPES).take(table["type"].cast(pa.int32()))
    table = table.set_column(table.schema.get_field_index("type"), "type", type_names)
    return table.drop(["item"]).rename_columns(
        ["index", "time", "process", "type", "f", "error", "node", "payload"]
    )


def read_history_parquet(path: Path | str) -> list[Op]:
    """All ops of a ``history.parquet``."""
    read_metadata(path, "history")
    return table_to_ops(pq.read_table(path))
