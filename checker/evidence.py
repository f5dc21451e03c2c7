"""Locating and validating the evidence of one stored run before any engine touches it.

A run directory holds ``test.json``, ``history.jsonl`` and/or ``history.parquet``,
``replicas.parquet`` (+ ``replica_partitions.parquet``) or the raw ``nodes/<node>/dump.jsonl``.
:func:`load_run` converts what is missing (JSON lines -> Parquet, dumps -> replicas) and
reads only footers and small files, so that a batch of thousands of runs starts quickly.
Bad input raises :class:`InputError` naming the file (and line or field).

What is merely *incomplete* (replica dumps missing, lines skipped) is not an error: it is
recorded in :attr:`RunInput.incomplete` and keeps the verdict from being ``valid``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from harness.record.history import HistoryFormatError, convert_history, read_metadata
from harness.record.replicas import build_replicas
from harness.record.rundir import RunDir, SpecFileError

TEST_SPEC_VERSION = 1


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
    if spec.get("schema_version") != TEST_SPEC_VERSION:
        raise _spec_error(
            path,
            f"schema_version {spec.get('schema_version')!r} is not supported (expected {TEST_SPEC_VERSION})",
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
    faults = (spec.get("nemesis") or {}).get("faults")
    if faults is not None and not (isinstance(faults, list) and all(isinstance(f, str) for f in faults)):
        raise _spec_error(path, "field 'nemesis.faults' must be a list of strings")
    return spec


def _history(run_dir: Path, skip_bad_lines: bool) -> tuple[Path, dict[str, str]]:
    jsonl, parquet = RunDir(run_dir).history_jsonl, RunDir(run_dir).history_parquet
    stale = parquet.is_file() and jsonl.is_file() and jsonl.stat().st_mtime_ns > parquet.stat().st_mtime_ns
    if not parquet.is_file() or stale:
        if not jsonl.is_file():
            raise InputError(f"{run_dir}: no history.jsonl or history.parquet")
        convert_history(jsonl, parquet, skip_bad_lines=skip_bad_lines)
    return parquet, read_metadata(parquet, "history")


def _replicas(run_dir: Path, skip_bad_lines: bool) -> tuple[Path | None, dict[str, str]]:
    directory = RunDir(run_dir)
    replicas = directory.replicas
    if not replicas.is_file() or not directory.replica_partitions.is_file():
        if not directory.dumps():
            return None, {}
        build_replicas(run_dir, skip_bad_dumps=skip_bad_lines)
    return replicas, read_metadata(replicas, "replicas")


def load_run(run_dir: Path | str, *, skip_bad_lines: bool = False) -> RunInput:
    """Validate one run directory and make its Parquet evidence exist."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    spec = read_spec(run_dir)
    try:
        history_path, history_meta = _history(run_dir, skip_bad_lines)
        replicas_path, replica_meta = _replicas(run_dir, skip_bad_lines)
    except HistoryFormatError as error:
        raise InputError(str(error)) from None
    skipped = int(history_meta.get("skipped_line_count", "0"))
    incomplete: list[str] = []
    if skipped:
        incomplete.append(f"{skipped} bad history line(s) skipped")
    missing: dict[str, str] = json.loads(replica_meta.get("missing_nodes", "{}")) if replica_meta else {}
    nodes: list[str] = json.loads(replica_meta.get("nodes", "[]")) if replica_meta else []
    if replicas_path is None:
        unavailable = spec.get("replica_evidence")
        incomplete.append(
            f"no replica dumps: {unavailable}"
            if isinstance(unavailable, str) and unavailable != "dumps"
            else "no replica dumps (replicas.parquet or nodes/<node>/dump.jsonl)"
        )
    for node, reason in sorted(missing.items()):
        incomplete.append(f"replica dump of node {node} missing: {reason}")
    return RunInput(
        run_dir=run_dir,
        spec=spec,
        topic=spec["topic"],
        partitions=spec["workload"]["partitions"],
        history_path=history_path,
        history_run_id=int(history_meta["run_id"]),
        skipped_lines=skipped,
        replicas_path=replicas_path,
        replicas_run_id=int(replica_meta["run_id"]) if replica_meta else None,
        replica_nodes=nodes,
        missing_nodes=missing,
        incomplete=incomplete,
    )


def split_passes(runs: list[RunInput]) -> list[list[RunInput]]:
    """Group runs so that run ids are unique within each group.

    Engines group rows of many runs by the ``run_id`` column stored in the files.  Ids are
    random 63-bit numbers, so they only repeat when a run directory was copied; the copy
    then goes to a later pass instead of being silently merged with its original.
    """
    passes: list[list[RunInput]] = []
    used: list[tuple[set[int], set[int]]] = []
    for run in runs:
        fits = [
            number
            for number, (history_ids, replica_ids) in enumerate(used)
            if run.history_run_id not in history_ids
            and (run.replicas_run_id is None or run.replicas_run_id not in replica_ids)
        ]
        index = fits[0] if fits else len(passes)
        if not fits:
            passes.append([])
            used.append((set(), set()))
        passes[index].append(run)
        used[index][0].add(run.history_run_id)
        if run.replicas_run_id is not None:
            used[index][1].add(run.replicas_run_id)
    return passes
