"""The run directory: the one owner of every file name in it, and the one reader of ``test.json``.

A run directory is ``store/<test name>/<UTC timestamp>/`` (or ``<campaign>/runs/<key>/``)::

    test.json                    the whole spec, effective settings, resolved scenario, versions
    history.jsonl                every op, appended and flushed as it completes (a killed run keeps it)
    history.parquet              the same ops, columnar (written as the run is finished: testbed.record.finish)
    replicas.parquet             every replica's records, from the dumps
    replica_partitions.parquet   every replica's HW, LEO and leader-epoch cache
    nodes/<node>/                node logs, dump.jsonl (the offline dump of that node's log), and
                                 broker-events.jsonl / controller-events.jsonl (the event logs)
    events.parquet               every event of those event logs, one table (testbed.record.event_table)
    run.json                     written when the runner finished: the problems it met
    results.json                 the checker's verdict
    anomaly_records.parquet      every lost and divergent record the checker found (checker.records)
    report.html                  the run page

Everything that names one of these files imports the name from here, so a rename is one
edit.  :meth:`RunDir.read_spec` is the only place that parses ``test.json``; the typed
reading (:class:`harness.run.spec.TestSpec`) and the checker's validation
(:func:`checker.evidence.read_spec`) both start from its dictionary.  :func:`find_run_dirs`
is the only place that discovers run directories below a path or a glob.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

SPEC_FILE: Final = "test.json"
SPEC_SCHEMA_VERSION: Final = 1
"""The version of ``test.json``'s schema: the one constant both its writer
(:class:`harness.run.spec.TestSpec`) and the checker's validation (:func:`checker.evidence.read_spec`)
import."""
HISTORY_JSONL: Final = "history.jsonl"
HISTORY_PARQUET: Final = "history.parquet"
REPLICAS_FILE: Final = "replicas.parquet"
REPLICA_PARTITIONS_FILE: Final = "replica_partitions.parquet"
RESULTS_FILE: Final = "results.json"
ANOMALY_RECORDS_FILE: Final = "anomaly_records.parquet"
REPORT_FILE: Final = "report.html"
RUN_FILE: Final = "run.json"
NODES_DIR: Final = "nodes"
DUMP_FILE: Final = "dump.jsonl"
BROKER_EVENTS_FILE: Final = "broker-events.jsonl"
"""A broker's event log as collected into ``nodes/<node>/`` (the broker writes it under this name:
``broker_impl.events``; the harness copies the node's log directory as it is)."""
CONTROLLER_EVENTS_FILE: Final = "controller-events.jsonl"
"""The controller's event log as collected into its ``nodes/<node>/``."""
EVENTS_FILE: Final = "events.parquet"
CLUSTER_WORK_DIR: Final = ".cluster"
"""Scratch space of the cluster set-up (SSH keys and the like); never evidence."""


class SpecFileError(ValueError):
    """``test.json`` is missing, unreadable, not JSON or not an object; the message names the file."""


class RunDirectoryError(ValueError):
    """A path that should name run directories names none; the message names the path."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunDir:
    """Paths of one run directory (nothing is read or created by constructing one)."""

    path: Path

    @property
    def spec_file(self) -> Path:
        return self.path / SPEC_FILE

    @property
    def history_jsonl(self) -> Path:
        return self.path / HISTORY_JSONL

    @property
    def history_parquet(self) -> Path:
        return self.path / HISTORY_PARQUET

    @property
    def replicas(self) -> Path:
        return self.path / REPLICAS_FILE

    @property
    def replica_partitions(self) -> Path:
        return self.path / REPLICA_PARTITIONS_FILE

    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def anomaly_records(self) -> Path:
        return self.path / ANOMALY_RECORDS_FILE

    @property
    def report(self) -> Path:
        return self.path / REPORT_FILE

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def nodes(self) -> Path:
        return self.path / NODES_DIR

    @property
    def cluster_work(self) -> Path:
        return self.path / CLUSTER_WORK_DIR

    def node_dir(self, node: str) -> Path:
        return self.nodes / node

    def dump(self, node: str) -> Path:
        return self.node_dir(node) / DUMP_FILE

    @property
    def events(self) -> Path:
        return self.path / EVENTS_FILE

    def broker_events(self, node: str) -> Path:
        return self.node_dir(node) / BROKER_EVENTS_FILE

    def controller_events(self) -> list[Path]:
        """The controller event logs present (any node directory: the controller's node name is
        the cluster's choice), sorted."""
        return sorted(self.nodes.glob(f"*/{CONTROLLER_EVENTS_FILE}")) if self.nodes.is_dir() else []

    def dumps(self) -> list[Path]:
        """The offline dumps present, sorted by node name."""
        return sorted(self.nodes.glob(f"*/{DUMP_FILE}")) if self.nodes.is_dir() else []

    def is_run(self) -> bool:
        return self.spec_file.is_file()

    def finished(self) -> bool:
        """The runner got to the end (a run killed mid-way has no ``run.json``)."""
        return self.run_file.exists()

    def read_spec(self) -> dict[str, Any]:
        """``test.json`` as a dictionary; :class:`SpecFileError` names the file and the fault."""
        path = self.spec_file
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecFileError(f"{path}: missing (every run directory needs its {SPEC_FILE})") from None
        except OSError as error:
            raise SpecFileError(f"{path}: unreadable ({error.strerror or error})") from None
        except UnicodeDecodeError as error:
            raise SpecFileError(f"{path}: not valid JSON ({error})") from None
        try:
            spec = json.loads(text)
        except ValueError as error:
            raise SpecFileError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(spec, dict):
            raise SpecFileError(f"{path}: must be a JSON object")
        return spec


def find_run_directories(directory: Path | str) -> list[Path]:
    """Every run directory (one holding ``test.json``) at or below ``directory``, sorted.

    Symbolic links are not followed (the store's ``latest`` links would list runs twice),
    hidden directories are skipped, and a run directory's own subdirectories are not searched.
    """
    root = Path(directory)
    if not root.is_dir():
        raise RunDirectoryError(f"{root}: not a directory")
    return sorted(_walk_runs(root))


def _walk_runs(root: Path) -> Iterator[Path]:
    for current, subdirectories, files in os.walk(root, followlinks=False):
        if SPEC_FILE in files:
            subdirectories.clear()
            yield Path(current)
            continue
        subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]


def find_run_dirs(arguments: Sequence[str]) -> list[Path]:
    """Run directories named by ``arguments``, each once, resolved (``store/latest`` counts once).

    Each argument is a run directory, a directory searched for runs at any depth (a
    campaign, the whole store), or a glob of either.  An argument that names no run
    raises :class:`RunDirectoryError` naming it: a typo must not shrink a batch silently.
    """
    found: dict[Path, None] = {}
    for argument in arguments:
        matches = [Path(match) for match in sorted(glob.glob(argument, recursive=True))] or [Path(argument)]
        hit = False
        for match in matches:
            if RunDir(match).is_run():
                found[match.resolve()] = None
                hit = True
            elif match.is_dir():
                for run_dir in find_run_directories(match):
                    found[run_dir.resolve()] = None
                    hit = True
        if not hit:
            raise RunDirectoryError(
                f"{argument}: no run directory (a directory holding {SPEC_FILE}) found there"
            )
    return list(found)
