"""Turn a run's collected event logs into ``events.parquet``: one table, one row per event.

The brokers' and the controller's event logs (``docs/events.md``; read by
:mod:`testbed.record.events`) sit in the run directory as ``nodes/<node>/broker-events.jsonl``
and ``nodes/<node>/controller-events.jsonl``.  :func:`build_events` reads them all and writes
``events.parquet``, so that a checker -- over one run or thousands, pandas or Spark -- reads one
columnar table per run, as it reads ``history.parquet`` and ``replicas.parquet``.

**Rows.**  One per event, in (``node_name``, ``seq``) order, with the header (``node_name``: the
run directory's node, ``process``: ``broker`` or ``controller``, ``node``, ``seq``, ``ts``,
``kind``), ``line`` (the event as JSON, for examples) and a flat projection of the fields the
white-box checks read (:data:`EVENTS_SCHEMA`): ``topic``, ``partition``, ``role``, ``epoch`` (a
leader epoch), ``leader``, ``leo``, ``hw``, ``old_leo``, ``old_hw``, ``reason``, ``queried_epoch``,
``min_isr``, ``isr`` and ``lineage_epoch``.  Where a kind names a value differently, the
projection says which field it takes: an ``hw`` event's ``hw`` is its ``new_hw``; a ``truncate``'s
``leo``/``hw`` are its ``new_leo``/``new_hw``; an ``election``'s ``leader``/``epoch``/``isr`` its
``new_leader``/``new_epoch``/``new_isr``; an ``isr-change``'s ``isr`` its ``new_isr``; a
``become-follower``'s ``role`` is ``follower`` (``none`` without a leader); a
``replica-opened``'s ``lineage_epoch`` is the epoch of the last entry of its leader-epoch cache
(the epoch of its newest record; null when the cache is empty).  Events that describe several
partitions (``topic-created``, a broker's ``shutdown``) give one row per partition (a
``shutdown`` without partitions one row without).  A field of the wrong type is null: the
projection never rejects an event the reader accepted.

**Completeness.**  The logs expected are one ``broker-events.jsonl`` per node of ``test.json``'s
``nodes`` (else every node directory that holds no controller log) and one
``controller-events.jsonl`` in some node directory.  A log that is absent, unreadable or damaged
(:class:`testbed.record.events.EventFormatError`) is *missing* -- its events are not in the table
-- and the metadata key ``tidemark.missing_logs`` names it with the reason; ``tidemark.torn_lines``
and ``tidemark.seq_gaps`` name the lines a crash tore and the events lost to failed writes of the
logs that were read.  What that means for a verdict is the checker's business
(``checker/invariant_evidence.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from testbed.record.events import EventFormatError, read_event_file
from testbed.record.history_lines import HistoryFormatError
from testbed.record.parquet_files import new_run_id, parquet_metadata, write_parquet
from testbed.record.rundir import BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE, RunDir, SpecFileError

BROKER, CONTROLLER = "broker", "controller"
"""The two values of ``process``: which kind of event log a row came from."""

EVENTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.int64()),
        ("node_name", pa.string()),
        ("process", pa.string()),
        ("node", pa.int32()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("kind", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("role", pa.string()),
        ("epoch", pa.int32()),
        ("leader", pa.int32()),
        ("leo", pa.int64()),
        ("hw", pa.int64()),
        ("old_leo", pa.int64()),
        ("old_hw", pa.int64()),
        ("reason", pa.string()),
        ("queried_epoch", pa.int32()),
        ("min_isr", pa.int32()),
        ("isr", pa.list_(pa.int32())),
        ("lineage_epoch", pa.int32()),
        ("line", pa.string()),
    ]
)
_PROJECTED_INTS = ("epoch", "leader", "leo", "hw", "old_leo", "old_hw", "queried_epoch", "min_isr")
_RENAMED: dict[str, dict[str, str]] = {
    "hw": {"hw": "new_hw"},
    "truncate": {"leo": "new_leo", "hw": "new_hw"},
    "election": {"leader": "new_leader", "epoch": "new_epoch", "isr": "new_isr"},
    "isr-change": {"isr": "new_isr"},
}
"""Per kind: table column -> the event field it is taken from (the default is the same name)."""
_PER_PARTITION = ("topic-created", "shutdown")
"""Kinds whose event lists several partitions (``partitions``): one row each."""


@dataclasses.dataclass(frozen=True, slots=True)
class EventTableSummary:
    run_id: int
    rows: int
    logs: dict[str, str]
    """node name -> ``broker`` or ``controller``: the logs read."""
    missing_logs: dict[str, str]
    """node name -> why its event log is not in the table (absent, unreadable, damaged)."""
    torn_lines: dict[str, list[int]]
    seq_gaps: dict[str, list[tuple[int, int]]]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ints(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(_int(item) is not None for item in value):
        return None
    return list(value)


def _lineage_epoch(epochs: Any) -> int | None:
    """The epoch of the last ``[epoch, start]`` entry of a leader-epoch cache (None: empty or bad)."""
    if not isinstance(epochs, list) or not epochs or not isinstance(epochs[-1], list) or not epochs[-1]:
        return None
    return _int(epochs[-1][0])


def project(event: dict[str, Any], node_name: str, process: str) -> list[dict[str, Any]]:
    """The table rows of one event (see the module docstring), without ``run_id``."""
    kind = event["kind"]
    renamed = _RENAMED.get(kind, {})
    row: dict[str, Any] = {
        "node_name": node_name,
        "process": process,
        "node": event["node"],
        "seq": event["seq"],
        "ts": event["ts"],
        "kind": kind,
        "topic": event.get("topic") if isinstance(event.get("topic"), str) else None,
        "partition": _int(event.get("partition")),
        "role": event.get("role") if isinstance(event.get("role"), str) else None,
        **{column: _int(event.get(renamed.get(column, column))) for column in _PROJECTED_INTS},
        "reason": event.get("reason") if isinstance(event.get("reason"), str) else None,
        "isr": _ints(event.get(renamed.get("isr", "isr"))),
        "lineage_epoch": _lineage_epoch(event.get("epochs")) if kind == "replica-opened" else None,
        "line": json.dumps(event, separators=(",", ":"), ensure_ascii=False),
    }
    if kind == "become-leader":
        row["role"] = "leader"
    elif kind == "become-follower":
        row["role"] = "follower" if (row["leader"] if row["leader"] is not None else -1) >= 0 else "none"
    if kind not in _PER_PARTITION or not isinstance(event.get("partitions"), list):
        return [row]
    rows = []
    for entry in event["partitions"]:
        if not isinstance(entry, dict):
            continue
        rows.append(
            {
                **row,
                "topic": entry.get("topic") if isinstance(entry.get("topic"), str) else row["topic"],
                "partition": _int(entry.get("partition")),
                "role": entry.get("role") if isinstance(entry.get("role"), str) else None,
                **{column: _int(entry.get(column)) for column in ("epoch", "leader", "leo", "hw")},
                "isr": _ints(entry.get("isr")),
            }
        )
    return rows or [row]


def expected_logs(run_dir: Path | str) -> dict[str, str]:
    """node name -> ``broker`` or ``controller``: the event logs a run of the bundled broker has.

    Brokers: ``test.json``'s ``nodes`` (else every node directory without a controller log);
    the controller: every node directory holding a controller log, else ``controller`` (where the
    harness keeps it; its absence is then reported under that name).
    """
    directory = RunDir(Path(run_dir))
    controllers = [path.parent.name for path in directory.controller_events()]
    brokers: list[str] | None = None
    if directory.is_run():
        try:
            nodes = directory.read_spec().get("nodes")
        except SpecFileError as error:
            raise HistoryFormatError(directory.spec_file, None, str(error)) from None
        if isinstance(nodes, list) and nodes and all(isinstance(node, str) for node in nodes):
            brokers = list(nodes)
    if brokers is None:
        found = directory.nodes.iterdir() if directory.nodes.is_dir() else iter(())
        brokers = sorted(path.name for path in found if path.is_dir() and path.name not in controllers)
    return {**dict.fromkeys(brokers, BROKER), **dict.fromkeys(controllers or [CONTROLLER], CONTROLLER)}


def build_events(run_dir: Path | str, logs: dict[str, str] | None = None) -> EventTableSummary:
    """Read every expected event log (``logs``: node name -> process, default
    :func:`expected_logs`) and write ``events.parquet``; missing and damaged logs are recorded
    in its metadata, never raised."""
    directory = RunDir(Path(run_dir))
    logs = expected_logs(run_dir) if logs is None else dict(logs)
    rows: list[dict[str, Any]] = []
    read: dict[str, str] = {}
    missing: dict[str, str] = {}
    torn: dict[str, list[int]] = {}
    gaps: dict[str, list[tuple[int, int]]] = {}
    for node_name, process in sorted(logs.items()):
        name = BROKER_EVENTS_FILE if process == BROKER else CONTROLLER_EVENTS_FILE
        path = directory.node_dir(node_name) / name
        if not path.is_file():
            missing[node_name] = f"no {name}"
            continue
        try:
            found = read_event_file(path)
        except EventFormatError as error:
            missing[node_name] = f"damaged event log: {error}"
            continue
        except OSError as error:
            missing[node_name] = f"unreadable event log {path}: {error.strerror or error}"
            continue
        if not found.events:
            missing[node_name] = f"{name} holds no event"
            continue
        read[node_name] = process
        if found.torn:
            torn[node_name] = [line.line for line in found.torn]
        if found.gaps:
            gaps[node_name] = list(found.gaps)
        for event in found.events:
            rows.extend(project(event, node_name, process))
    run_id = new_run_id()
    columns = {field.name: [row.get(field.name) for row in rows] for field in EVENTS_SCHEMA}
    columns["run_id"] = [run_id] * len(rows)
    meta = {
        "logs": json.dumps(read, sort_keys=True),
        "missing_logs": json.dumps(missing, sort_keys=True),
        "torn_lines": json.dumps(torn, sort_keys=True),
        "seq_gaps": json.dumps({node: [list(gap) for gap in found] for node, found in gaps.items()}),
    }
    table = pa.table(columns, schema=EVENTS_SCHEMA).replace_schema_metadata(
        parquet_metadata(run_id, "events", meta)
    )
    write_parquet(table, directory.events)
    return EventTableSummary(run_id, len(rows), read, missing, torn, gaps)


def event_logs_present(run_dir: Path | str) -> list[Path]:
    """Every event log file in the run directory's node directories, sorted."""
    directory = RunDir(Path(run_dir))
    if not directory.nodes.is_dir():
        return []
    return sorted(
        path
        for name in (BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE)
        for path in directory.nodes.glob(f"*/{name}")
    )


def events_table_stale(run_dir: Path | str, sources: Sequence[Path] | None = None) -> bool:
    """Whether ``events.parquet`` must be (re)built: absent, or older than an event log."""
    target = RunDir(Path(run_dir)).events
    if not target.is_file():
        return True
    built = target.stat().st_mtime_ns
    return any(path.stat().st_mtime_ns > built for path in (sources or event_logs_present(run_dir)))
