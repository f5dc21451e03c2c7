"""Finishing a run's record: the tables made from the files a run writes as it goes.

While a run goes, its evidence is written in the forms that survive a crash: ``history.jsonl``
(flushed op by op), each node's ``nodes/<node>/dump.jsonl`` and the brokers' and the controller's
event logs.  Finishing turns them into the columnar tables every reader reads -- the checker's
engines, the reports, a packed store:

* ``history.parquet`` (:func:`finish_history`, :func:`testbed.record.history.convert_history`);
* ``replicas.parquet`` and ``replica_partitions.parquet`` (:func:`finish_replicas`,
  :func:`testbed.record.replicas.build_replicas`);
* ``events.parquet`` (:func:`finish_events`, :func:`testbed.record.event_table.build_events`).

Who finishes: the runner, for every run it stored (a failed run too: whatever evidence there is
gets its tables), through :func:`finish_record`.  The checker only reads; it calls these same
functions for a run directory whose tables are missing or older than their sources -- one stored
by an older Tidemark, or written by hand or by another producer that only follows the op contract
(``docs/history.md``) -- and on a finished run directory they write nothing.

When a table is (re)written -- the rules the checker's loader has always applied:

* ``history.parquet`` when it is missing or ``history.jsonl`` was modified after it (a strictly
  newer mtime); otherwise it is the record and ``history.jsonl`` may be absent;
* the replica tables when either is missing and some node has a dump; a damaged dump makes its
  node missing (recorded in the table's metadata), never an error -- a node whose dump is damaged
  lost its evidence, the same as a node whose dump never came (``docs/history.md`` section 4);
* ``events.parquet`` when the run should have event logs (:func:`event_logs_absent` is None) and
  the table is missing or older than a log.

Errors name the file (and line): :class:`testbed.record.history.HistoryFormatError` for a history
that breaks the format (or no history at all), :class:`testbed.record.rundir.SpecFileError` for an
unreadable ``test.json`` when no spec is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from testbed.record.event_table import build_events, events_table_stale
from testbed.record.history import convert_history
from testbed.record.history_lines import HistoryFormatError
from testbed.record.replicas import EVIDENCE_DUMPS, build_replicas, replica_evidence
from testbed.record.rundir import RunDir

EVENT_LOG_SETTING: Final = "event.log.enable"
"""The broker setting that turns the event logs on (``test.json``'s ``broker_config``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class FinishedRecord:
    """The tables of one finished run directory."""

    history: Path
    replicas: Path | None
    """None: no node has a dump (and no replica table was made before)."""
    events: Path | None
    """None: the run has no event logs to table (:func:`event_logs_absent` says why)."""


def event_logs_absent(spec: Mapping[str, Any]) -> str | None:
    """Why the run has no event logs (None: it should have them).

    A target whose replicas are not the bundled broker's (``replica_evidence`` ``single-store``
    or ``none``), a bundled run with ``event.log.enable=false``, or a run that recorded no
    ``event.log.enable`` at all (stored before the brokers kept event logs, or a hand-made
    record): what a user chose not to record cannot be missing.
    """
    kind, why = replica_evidence(spec)
    if kind != EVIDENCE_DUMPS:
        target = why or f"replica evidence {kind}"
        return f"no broker event logs: {target}"
    config = spec.get("broker_config")
    setting = config.get(EVENT_LOG_SETTING) if isinstance(config, Mapping) else None
    if setting is None:
        return f"no broker event logs: the run recorded no {EVENT_LOG_SETTING} (stored before event logs)"
    text = str(setting).strip().lower()
    if text in ("false", "0", "no", "off"):
        return f"no broker event logs: {EVENT_LOG_SETTING}={text}"
    return None


def finish_history(run_dir: Path, *, skip_bad_lines: bool = False) -> Path:
    """``history.parquet``, converted from ``history.jsonl`` when missing or stale.

    Raises :class:`HistoryFormatError` naming the bad line (unless ``skip_bad_lines``: the line
    is then counted in the table's metadata) or the run directory when it holds neither file.
    """
    directory = RunDir(run_dir)
    jsonl, parquet = directory.history_jsonl, directory.history_parquet
    stale = parquet.is_file() and jsonl.is_file() and jsonl.stat().st_mtime_ns > parquet.stat().st_mtime_ns
    if not parquet.is_file() or stale:
        if not jsonl.is_file():
            raise HistoryFormatError(run_dir, None, "no history.jsonl or history.parquet")
        convert_history(jsonl, parquet, skip_bad_lines=skip_bad_lines)
    return parquet


def finish_replicas(run_dir: Path) -> Path | None:
    """``replicas.parquet`` (with ``replica_partitions.parquet``), built from the dumps when either
    is missing; None when there is neither a table nor a dump.  A damaged dump makes its node
    missing (``skip_bad_dumps``): the reason names the file and line."""
    directory = RunDir(run_dir)
    if not directory.replicas.is_file() or not directory.replica_partitions.is_file():
        if not directory.dumps():
            return None
        build_replicas(run_dir, skip_bad_dumps=True)
    return directory.replicas


def finish_events(run_dir: Path) -> Path:
    """``events.parquet``, built from the event logs when missing or older than a log (for a run
    that should have event logs: the caller asks :func:`event_logs_absent` first)."""
    if events_table_stale(run_dir):
        build_events(run_dir)
    return RunDir(run_dir).events


def finish_record(
    run_dir: Path | str, spec: Mapping[str, Any] | None = None, *, skip_bad_lines: bool = False
) -> FinishedRecord:
    """Make every table of the run directory exist and be no older than its sources.

    ``spec`` is ``test.json``'s dictionary when the caller has read it (else it is read here).
    Idempotent: a finished run directory is only read.
    """
    run_dir = Path(run_dir)
    spec = RunDir(run_dir).read_spec() if spec is None else spec
    history = finish_history(run_dir, skip_bad_lines=skip_bad_lines)
    replicas = finish_replicas(run_dir)
    events = None if event_logs_absent(spec) is not None else finish_events(run_dir)
    return FinishedRecord(history, replicas, events)
