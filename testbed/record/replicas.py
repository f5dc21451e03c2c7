"""Turn each node's offline log dump into ``replicas.parquet`` and ``replica_partitions.parquet``.

The harness stores the output of ``python -m broker_impl.dump DATA_DIR`` for every node as
``nodes/<node>/dump.jsonl`` (format: :func:`testbed.record.history.parse_dump_line`) and then calls
:func:`build_replicas`.  It writes, in the run directory:

* ``replicas.parquet`` -- one row per record per replica: ``run_id, node, topic, partition,
  offset, leader_epoch, key, value`` (key and value exactly as dumped: UTF-8 text or
  ``"base64:..."``) plus ``value_int``, the value parsed as an integer when it is one, and
  ``record_id``, a 64-bit identity of (key, value) (:func:`record_identity`), so that the
  divergence check compares integers instead of strings; ``node_index`` is the node's
  position in the metadata's node list, so a grouped aggregation can keep one identity
  column per replica.
* ``replica_partitions.parquet`` -- one row per (node, topic, partition): high watermark,
  log end offset, log start offset and the leader-epoch cache (JSON ``[[epoch, start], ...]``).

Why the completeness bookkeeping: the divergence check can only say "the replicas agree"
if it saw every replica.  The nodes expected are ``test.json``'s ``nodes`` (or every
``nodes/<node>/`` directory); a node with no dump, an empty dump, a ``dump.error`` file
(the harness's record of a failed dump) or a damaged dump is listed in the metadata key
``tidemark.missing_nodes`` with the reason, and the checker's verdict is then at best
``unknown``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from testbed.record.history_lines import HistoryFormatError, is_json_int
from testbed.record.op_fields import INT64_MAX, INT64_MIN
from testbed.record.parquet_files import new_run_id, parquet_metadata, write_parquet
from testbed.record.rundir import DUMP_FILE, RunDir, SpecFileError

DUMP_ERROR_FILE = "dump.error"

EVIDENCE_DUMPS = "dumps"
"""``test.json``'s ``replica_evidence``: every node in ``nodes`` holds a replica and is dumped (the
bundled broker).  A missing field means the same (runs stored before the field existed)."""
EVIDENCE_SINGLE_STORE = "single-store"
"""One node (``nodes``) holds the only copy of the log and is dumped (tansu: PostgreSQL); with no
second replica, the replica checks do not apply."""
EVIDENCE_NONE = "none"
"""The target cannot be dumped at all (an external cluster): the replica checks do not apply and
the verdict rests on the client history and the drain."""
EVIDENCE_KINDS = (EVIDENCE_DUMPS, EVIDENCE_SINGLE_STORE, EVIDENCE_NONE)


def replica_evidence(spec: Mapping[str, Any]) -> tuple[str, str]:
    """``(kind, why)`` of a run's ``replica_evidence`` (``"KIND"`` or ``"KIND: why"``).

    Kind is one of :data:`EVIDENCE_KINDS`; a missing field is :data:`EVIDENCE_DUMPS`, and any
    other text (``"unavailable (external cluster)"``, written before the kinds existed) is
    :data:`EVIDENCE_NONE` with that text as the reason.
    """
    value = spec.get("replica_evidence")
    if value is None:
        return EVIDENCE_DUMPS, ""
    text = str(value)
    kind, _, why = text.partition(":")
    if kind.strip() in EVIDENCE_KINDS:
        return kind.strip(), why.strip()
    return EVIDENCE_NONE, text.strip()


REPLICAS_SCHEMA = pa.schema(
    [
        ("run_id", pa.int64()),
        ("node", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("key", pa.string()),
        ("value", pa.string()),
        ("value_int", pa.int64()),
        ("record_id", pa.int64()),
        ("node_index", pa.int16()),
    ]
)

REPLICA_PARTITIONS_SCHEMA = pa.schema(
    [
        ("run_id", pa.int64()),
        ("node", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("high_watermark", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("epochs", pa.string()),
    ]
)


@dataclasses.dataclass(frozen=True, slots=True)
class DumpRecord:
    """One record of one replica's log, as the offline dump prints it."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    key: str | None
    value: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class DumpPartition:
    """One replica's partition state: high watermark, log end/start offsets, epoch cache."""

    topic: str
    partition: int
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    epochs: tuple[tuple[int, int], ...]


def parse_dump_line(obj: Any) -> DumpRecord | DumpPartition:
    """Validate one decoded dump line (``{"type": "record"|"partition", ...}``); ``ValueError`` if bad."""
    if not isinstance(obj, dict):
        raise ValueError("a dump line must be a JSON object")
    kind = obj.get("type")
    if kind == "record":
        fields = ("topic", "partition", "offset", "leader_epoch", "key", "value")
        if set(obj) != {"type", *fields}:
            raise ValueError(f"a record line must have exactly the fields {['type', *fields]}")
        if not isinstance(obj["topic"], str) or not all(
            is_json_int(obj[n]) for n in ("partition", "offset", "leader_epoch")
        ):
            raise ValueError("a record needs a string topic and integer partition/offset/leader_epoch")
        for name in ("key", "value"):
            if obj[name] is not None and not isinstance(obj[name], str):
                raise ValueError(f"record {name} must be a string or null")
        return DumpRecord(
            obj["topic"], obj["partition"], obj["offset"], obj["leader_epoch"], obj["key"], obj["value"]
        )
    if kind == "partition":
        fields = ("topic", "partition", "high_watermark", "log_end_offset", "log_start_offset", "epochs")
        optional = {"torn_bytes"}  # bytes of a torn tail the dump skipped (informational)
        if not {"type", *fields} <= set(obj) <= {"type", *fields, *optional}:
            raise ValueError(
                f"a partition line must have exactly the fields {['type', *fields]}"
                f" (optionally {sorted(optional)})"
            )
        if "torn_bytes" in obj and not is_json_int(obj["torn_bytes"]):
            raise ValueError("torn_bytes must be an integer")
        numbers = ("partition", "high_watermark", "log_end_offset", "log_start_offset")
        if not isinstance(obj["topic"], str) or not all(is_json_int(obj[n]) for n in numbers):
            raise ValueError("a partition line needs a string topic and integer offsets")
        epochs = obj["epochs"]
        if not isinstance(epochs, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and all(is_json_int(x) for x in pair) for pair in epochs
        ):
            raise ValueError("epochs must be a list of [epoch, start_offset] pairs")
        return DumpPartition(
            obj["topic"],
            obj["partition"],
            obj["high_watermark"],
            obj["log_end_offset"],
            obj["log_start_offset"],
            tuple((e, s) for e, s in epochs),
        )
    raise ValueError(f"dump line type must be 'record' or 'partition', got {kind!r}")


_INTEGER = re.compile(r"-?[0-9]{1,19}")


def record_identity(
    keys: Sequence[str | None] | pa.Array, values: Sequence[str | None] | pa.Array
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A 64-bit identity of each (key, value) pair: SipHash-2-4 of each string with pandas'
    fixed key, combined.  Deterministic across processes and machines; two different
    records get the same identity with probability about 2**-64.
    """
    key_objects = (
        keys.to_numpy(zero_copy_only=False)
        if isinstance(keys, pa.Array)
        else np.asarray(list(keys), dtype=object)
    )
    value_objects = (
        values.to_numpy(zero_copy_only=False)
        if isinstance(values, pa.Array)
        else np.asarray(list(values), dtype=object)
    )
    key_hash = pd.util.hash_array(key_objects, categorize=True)
    value_hash = pd.util.hash_array(value_objects, categorize=True)
    with np.errstate(over="ignore"):
        combined = key_hash * np.uint64(0x9E3779B97F4A7C15) ^ value_hash
    identity: np.ndarray[Any, np.dtype[np.int64]] = combined.view(np.int64)
    return identity


def value_as_int(value: str | None) -> int | None:
    """The dumped value as the workload's integer, or None when it is not one."""
    if value is None or not _INTEGER.fullmatch(value):
        return None
    number = int(value)
    return number if INT64_MIN <= number <= INT64_MAX else None


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaBuildSummary:
    nodes: tuple[str, ...]
    records: int
    partitions: int
    missing_nodes: dict[str, str]
    run_id: int


def expected_nodes(run_dir: Path) -> list[str]:
    """The nodes whose dumps must be present: ``test.json``'s ``nodes`` or the ``nodes/`` directories."""
    directory = RunDir(run_dir)
    if directory.is_run():
        try:
            spec = directory.read_spec()
        except SpecFileError as error:
            raise HistoryFormatError(directory.spec_file, None, str(error)) from None
        nodes = spec.get("nodes")
        if isinstance(nodes, list) and nodes and all(isinstance(n, str) for n in nodes):
            return list(nodes)
    node_root = directory.nodes
    return sorted(p.name for p in node_root.iterdir() if p.is_dir()) if node_root.is_dir() else []


def _read_dump(path: Path) -> tuple[list[DumpRecord], list[DumpPartition]]:
    records: list[DumpRecord] = []
    partitions: list[DumpPartition] = []
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = parse_dump_line(json.loads(raw))
            except ValueError as error:
                torn = "" if raw.endswith("\n") else " (the last line is incomplete)"
                raise HistoryFormatError(path, number, f"{error}{torn}") from None
            if isinstance(row, DumpRecord):
                records.append(row)
            else:
                partitions.append(row)
    return records, partitions


def _node_dump(
    directory: RunDir, node: str, skip_bad_dumps: bool
) -> tuple[list[DumpRecord], list[DumpPartition]] | str:
    """One node's dump, or why the node counts as missing (a failed, absent, empty or -- with
    ``skip_bad_dumps`` -- damaged dump; without it a damaged dump raises)."""
    error_path = directory.node_dir(node) / DUMP_ERROR_FILE
    if error_path.is_file():
        return "dump failed: " + error_path.read_text(encoding="utf-8", errors="replace").strip()[:500]
    dump_path = directory.dump(node)
    if not dump_path.is_file():
        return f"no {DUMP_FILE}"
    try:
        records, partitions = _read_dump(dump_path)
    except HistoryFormatError as error:
        if not skip_bad_dumps:
            raise
        return f"damaged dump: {error}"
    if not partitions:
        return f"{DUMP_FILE} holds no partition lines (empty or cut short)"
    return records, partitions


def build_replicas(
    run_dir: Path | str, nodes: Sequence[str] | None = None, *, skip_bad_dumps: bool = False
) -> ReplicaBuildSummary:
    """Read ``nodes/<node>/dump.jsonl`` for every node and write the two Parquet files.

    A damaged dump raises :class:`HistoryFormatError` (file:line) unless ``skip_bad_dumps``,
    in which case that node counts as missing.  Missing nodes never raise: they are the
    normal outcome of a node that could not be dumped, and make the verdict ``unknown``.
    """
    run_dir = Path(run_dir)
    node_names = list(nodes) if nodes is not None else expected_nodes(run_dir)
    record_columns: dict[str, list[Any]] = {field.name: [] for field in REPLICAS_SCHEMA}
    partition_columns: dict[str, list[Any]] = {field.name: [] for field in REPLICA_PARTITIONS_SCHEMA}
    missing: dict[str, str] = {}
    if not node_names:
        missing["*"] = "no nodes listed in test.json and no nodes/<node>/ directories"
    for node in node_names:
        dump = _node_dump(RunDir(run_dir), node, skip_bad_dumps)
        if isinstance(dump, str):
            missing[node] = dump
            continue
        records, partitions = dump
        for record in records:
            for name in ("topic", "partition", "offset", "leader_epoch", "key", "value"):
                record_columns[name].append(getattr(record, name))
            record_columns["node"].append(node)
            record_columns["node_index"].append(node_names.index(node))
            record_columns["value_int"].append(value_as_int(record.value))
        for part in partitions:
            for name in ("topic", "partition", "high_watermark", "log_end_offset", "log_start_offset"):
                partition_columns[name].append(getattr(part, name))
            partition_columns["node"].append(node)
            partition_columns["epochs"].append(json.dumps([list(pair) for pair in part.epochs]))
    run_id = new_run_id()
    record_columns["run_id"] = [run_id] * len(record_columns["node"])
    record_columns["record_id"] = list(record_identity(record_columns["key"], record_columns["value"]))
    partition_columns["run_id"] = [run_id] * len(partition_columns["node"])
    meta = parquet_metadata(
        run_id,
        "replicas",
        {"nodes": json.dumps(node_names), "missing_nodes": json.dumps(missing, sort_keys=True)},
    )
    # Sorted by position, the replicas of one offset sit together: a grouped aggregation
    # then combines them before its shuffle instead of after.
    records_table = (
        pa.table(record_columns, schema=REPLICAS_SCHEMA)
        .sort_by(
            [
                ("topic", "ascending"),
                ("partition", "ascending"),
                ("offset", "ascending"),
                ("node_index", "ascending"),
            ]
        )
        .replace_schema_metadata(meta)
    )
    partitions_table = pa.table(partition_columns, schema=REPLICA_PARTITIONS_SCHEMA).replace_schema_metadata(
        parquet_metadata(
            run_id,
            "replica-partitions",
            {"nodes": json.dumps(node_names), "missing_nodes": json.dumps(missing, sort_keys=True)},
        )
    )
    write_parquet(records_table, RunDir(run_dir).replicas)
    write_parquet(partitions_table, RunDir(run_dir).replica_partitions)
    return ReplicaBuildSummary(
        tuple(node_names), records_table.num_rows, partitions_table.num_rows, missing, run_id
    )
