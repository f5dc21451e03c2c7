"""Locating and validating the evidence of one stored run before any engine touches it.

A run directory holds ``test.json``, ``history.jsonl`` and/or ``history.parquet``,
``replicas.parquet`` (+ ``replica_partitions.parquet``) or the raw ``nodes/<node>/dump.jsonl``,
and for the bundled broker ``events.parquet`` or the raw event logs (whose evidence rules are
:mod:`checker.invariant_evidence`'s).  :func:`load_run` validates ``test.json`` and reads only
footers and small files, so that a batch of thousands of runs starts quickly.  The checker only
reads: making the tables is the record's job (:mod:`testbed.record.finish`), done by the runner as
a run ends; for a run directory whose tables are missing or stale (stored by an older Tidemark, or
written by another producer) :func:`load_run` asks the record to finish it first, and on a
finished run directory nothing is written.  Bad input raises :class:`InputError` naming the file
(and line or field).

What is merely *incomplete* is not an error: it is recorded in :attr:`RunInput.incomplete`
and keeps the verdict from being ``valid``.  That covers history lines skipped under
``skip_bad_lines`` (only when some were: a clean history skips none) and every replica dump
that is missing, failed, empty or *damaged*.  A damaged dump is a node whose evidence is
lost -- the same as a dump that never came (``docs/history.md`` section 4) -- not a bad
argument: it is always counted as that node's dump missing, with the file:line and reason.

What does not apply is neither: ``test.json``'s ``replica_evidence``
(:func:`testbed.record.replicas.replica_evidence`) says when the target keeps one replica
(tansu's PostgreSQL) or cannot be dumped at all (an external cluster); the replica checks are
then named in :attr:`RunInput.not_applicable` and the verdict rests on the client history and
the drain.  A dump the target *should* have given and did not is still incomplete.

Which history file is read: ``history.jsonl`` is the record, ``history.parquet`` derived
from it (:func:`testbed.record.finish.finish_history` says when it is rewritten); the Parquet
file is what is read, and ``history.jsonl`` may be absent.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from checker.definitions import REPLICA_CHECKS
from checker.invariant_evidence import event_evidence
from testbed.record.finish import finish_history, finish_replicas
from testbed.record.history import HistoryFormatError, holds_only, read_footer
from testbed.record.packed import RowSlice
from testbed.record.replicas import EVIDENCE_NONE, EVIDENCE_SINGLE_STORE, replica_evidence
from testbed.record.rundir import SPEC_SCHEMA_VERSION, RunDir, SpecFileError


class InputError(Exception):
    """A run's evidence is unusable: the message names the file and what is wrong."""


@dataclasses.dataclass(slots=True)
class RunInput:
    """One run, ready for an engine: paths, ids and what the checker knows up front."""

    run_dir: Path
    spec: dict[str, Any]
    topic: str
    partitions: int
    history_path: Path
    history_run_id: int
    skipped_lines: int
    replicas_path: Path | None
    replicas_run_id: int | None
    replica_nodes: list[str]
    missing_nodes: dict[str, str]
    incomplete: list[str] = dataclasses.field(default_factory=list)
    high_watermarks: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)
    """node -> partition -> the HW of that replica's dump, for the run's topic (divergence)."""
    not_applicable: dict[str, str] = dataclasses.field(default_factory=dict)
    """check -> why it does not apply to the run's target (one replica, or none can be dumped):
    named in the results, and -- unlike :attr:`incomplete` -- no reason for an unknown verdict."""
    events_path: Path | None = None
    """``events.parquet`` (the brokers' event logs), None where the white-box checks do not apply
    (:mod:`checker.invariant_evidence`)."""
    events_run_id: int | None = None
    history_rows: int = 0
    """Rows of the history file (its footer)."""
    replica_rows: int = 0
    """Rows of the replica file (its footer), 0 without one."""
    history_holds_one_run: bool = False
    """The history file's footer proves it holds this run's rows alone (``run_id`` min = max); for
    a packed store, its slice does (verified when packed)."""
    replicas_hold_one_run: bool = False
    """Likewise for the replica file (:mod:`checker.spark.inputs` may then bucket the pass by run)."""
    replicas_hold_one_topic: bool = False
    """The replica file's footer proves every row is of the run's topic (no topic filter needed)."""
    replica_log_sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    """node -> records of the run's topic in that replica (LEO - log start, summed over partitions)."""
    history_slice: RowSlice | None = None
    """Where the run's rows are in ``history_path`` when that is a packed file
    (:mod:`testbed.record.packed`); None: the file is the run's own."""
    replicas_slice: RowSlice | None = None
    """Likewise for ``replicas_path``."""
    events_slice: RowSlice | None = None
    """Likewise for ``events_path``."""

    @property
    def name(self) -> str:
        return str(self.run_dir)


def _spec_error(path: Path, message: str) -> InputError:
    return InputError(f"{path}: {message}")


def read_spec(run_dir: Path) -> dict[str, Any]:
    """Read and validate ``test.json`` (only the fields the checker uses)."""
    directory = RunDir(run_dir)
    path = directory.spec_file
    try:
        spec = directory.read_spec()
    except SpecFileError as error:
        raise InputError(str(error)) from None
    if spec.get("schema_version") != SPEC_SCHEMA_VERSION:
        raise _spec_error(
            path,
            f"schema_version {spec.get('schema_version')!r} is not supported (expected {SPEC_SCHEMA_VERSION})",
        )
    if not isinstance(spec.get("topic"), str) or not spec["topic"]:
        raise _spec_error(path, "field 'topic' must be a non-empty string")
    workload = spec.get("workload")
    if not isinstance(workload, dict):
        raise _spec_error(path, "field 'workload' must be an object")
    partitions = workload.get("partitions")
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise _spec_error(path, f"field 'workload.partitions' must be a positive integer, got {partitions!r}")
    if str(workload.get("acks", "all")) not in ("all", "-1", "1", "0"):
        raise _spec_error(path, f"field 'workload.acks' must be all, 1 or 0, got {workload.get('acks')!r}")
    for field in ("broker_config", "nemesis"):
        if spec.get(field) is not None and not isinstance(spec[field], dict):
            raise _spec_error(path, f"field {field!r} must be an object")
    for field, faults in (
        ("nemesis.faults", (spec.get("nemesis") or {}).get("faults")),
        ("scenario_faults", spec.get("scenario_faults")),
    ):
        if faults is not None and not (isinstance(faults, list) and all(isinstance(f, str) for f in faults)):
            raise _spec_error(path, f"field {field!r} must be a list of strings")
    return spec


def _history(run_dir: Path, skip_bad_lines: bool) -> tuple[Path, dict[str, str], pq.FileMetaData]:
    """The history Parquet file (the record finishes it when missing or stale) and its footer."""
    parquet = finish_history(run_dir, skip_bad_lines=skip_bad_lines)
    return parquet, *read_footer(parquet, "history")


def _replicas(run_dir: Path) -> tuple[Path | None, dict[str, str], pq.FileMetaData | None]:
    """The replica Parquet file (the record builds it from the dumps when missing) and its footer.

    A damaged dump makes its node missing, whatever ``--skip-bad-lines`` says: its reason
    names the file and line, and the verdict is at best unknown.
    """
    replicas = finish_replicas(run_dir)
    if replicas is None:
        return None, {}, None
    return replicas, *read_footer(replicas, "replicas")


_PARTITION_COLUMNS = ["node", "topic", "partition", "high_watermark", "log_end_offset", "log_start_offset"]


def _replica_partitions(run_dir: Path, topic: str) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    """From ``replica_partitions.parquet`` (one row per partition line of each dump), for the run's
    topic: node -> partition -> HW (a partition a dump has no line for is absent), and node ->
    records (LEO - log start, summed over partitions).

    Read with a bare ``ParquetFile`` (``pq.read_table`` costs ten times as much on a small file,
    which thousands of small runs pay once each).
    """
    path = RunDir(run_dir).replica_partitions
    try:
        rows = pq.ParquetFile(path).read(columns=_PARTITION_COLUMNS).to_pylist()
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable replica partitions file ({error})") from None
    marks: dict[str, dict[int, int]] = {}
    sizes: dict[str, int] = {}
    for row in rows:
        if row["topic"] != topic:
            continue
        if row["high_watermark"] is not None:
            marks.setdefault(row["node"], {})[int(row["partition"])] = int(row["high_watermark"])
        sizes[row["node"]] = sizes.get(row["node"], 0) + row["log_end_offset"] - row["log_start_offset"]
    return marks, dict(sorted(sizes.items()))


def load_run(run_dir: Path | str, *, skip_bad_lines: bool = False) -> RunInput:
    """Validate one run directory and read what an engine needs to know up front.

    The run's tables are read, not made: a run directory the runner finished is only read; one
    whose tables are missing or stale is finished first by the record
    (:mod:`testbed.record.finish`), in the order its errors have always been reported (spec,
    history, replicas, events).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    spec = read_spec(run_dir)
    try:
        history_path, history_meta, history_footer = _history(run_dir, skip_bad_lines)
        replicas_path, replica_meta, replica_footer = _replicas(run_dir)
    except HistoryFormatError as error:
        raise InputError(str(error)) from None
    skipped = int(history_meta.get("skipped_line_count", "0"))
    incomplete: list[str] = []
    if skipped:
        incomplete.append(f"{skipped} bad history line(s) skipped")
    missing: dict[str, str] = json.loads(replica_meta.get("missing_nodes", "{}")) if replica_meta else {}
    nodes: list[str] = json.loads(replica_meta.get("nodes", "[]")) if replica_meta else []
    evidence, why = replica_evidence(spec)
    not_applicable: dict[str, str] = {}
    if evidence in (EVIDENCE_SINGLE_STORE, EVIDENCE_NONE):
        reason = "one replica only" if evidence == EVIDENCE_SINGLE_STORE else "no replica dumps"
        not_applicable = dict.fromkeys(REPLICA_CHECKS, f"{reason}: {why}" if why else reason)
    if replicas_path is None and evidence != EVIDENCE_NONE:
        incomplete.append("no replica dumps (replicas.parquet or nodes/<node>/dump.jsonl)")
    for node, reason in sorted(missing.items()):
        incomplete.append(f"replica dump of node {node} missing: {reason}")
    try:
        events = event_evidence(run_dir, spec)
    except HistoryFormatError as error:
        raise InputError(str(error)) from None
    incomplete.extend(events.incomplete)
    not_applicable.update(events.not_applicable)
    history_run_id = int(history_meta["run_id"])
    replicas_run_id = int(replica_meta["run_id"]) if replica_meta else None
    marks, sizes = ({}, {}) if replicas_path is None else _replica_partitions(run_dir, spec["topic"])
    return RunInput(
        run_dir=run_dir,
        spec=spec,
        topic=spec["topic"],
        partitions=spec["workload"]["partitions"],
        history_path=history_path,
        history_run_id=history_run_id,
        skipped_lines=skipped,
        replicas_path=replicas_path,
        replicas_run_id=replicas_run_id,
        replica_nodes=nodes,
        missing_nodes=missing,
        incomplete=incomplete,
        high_watermarks=marks,
        not_applicable=not_applicable,
        events_path=events.path,
        events_run_id=events.run_id,
        history_rows=history_footer.num_rows,
        replica_rows=0 if replica_footer is None else replica_footer.num_rows,
        history_holds_one_run=holds_only(history_footer, "run_id", history_run_id),
        replicas_hold_one_run=replica_footer is not None
        and holds_only(replica_footer, "run_id", replicas_run_id),
        replicas_hold_one_topic=replica_footer is not None
        and holds_only(replica_footer, "topic", spec["topic"]),
        replica_log_sizes=sizes,
    )


def split_passes(runs: list[RunInput]) -> list[list[RunInput]]:
    """Group runs so that run ids are unique within each group.

    Engines group rows of many runs by the ``run_id`` column stored in the files.  Ids are
    random 63-bit numbers, so they only repeat when a run directory was copied; the copy
    then goes to a later pass instead of being silently merged with its original.
    """
    passes: list[list[RunInput]] = []
    used: list[tuple[set[int], set[int], set[int]]] = []
    for run in runs:
        fits = [
            number
            for number, (history_ids, replica_ids, event_ids) in enumerate(used)
            if run.history_run_id not in history_ids
            and (run.replicas_run_id is None or run.replicas_run_id not in replica_ids)
            and (run.events_run_id is None or run.events_run_id not in event_ids)
        ]
        index = fits[0] if fits else len(passes)
        if not fits:
            passes.append([])
            used.append((set(), set(), set()))
        passes[index].append(run)
        used[index][0].add(run.history_run_id)
        if run.replicas_run_id is not None:
            used[index][1].add(run.replicas_run_id)
        if run.events_run_id is not None:
            used[index][2].add(run.events_run_id)
    return passes
