"""Transactional runs on disk for the engine and parity tests: a few :class:`History` cases, each
planting one family of anomalies (or none), written as run directories the engines load.

:data:`CASES` maps a case's name to its history builder and the totals its run must report
(:func:`answers` asks an engine for them the way the driver does).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from checker.definitions import DEFAULT_EXAMPLE_LIMIT, TXN_CHECKS
from checker.evidence import RunInput, load_run
from testbed.record.history import HistoryWriter
from tests.checker.txn.histories import History, offsets, poll, send

PARTITIONS = 3


def _g0() -> History:
    history = History()
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [send(1, 3, 0), send(0, 4, 1)])
    history.complete(0)
    history.complete(1)
    history.drain(0, [(0, 1), (1, 4)])
    history.drain(1, [(0, 3), (1, 2)])
    history.drain(2, [])
    return history


def _g1c_and_process() -> History:
    history = History()
    # T1 read a write of T2, which read a write of process 0's later T3: G1c-process and -realtime.
    history.txn(5, [poll((9, 0, 20))])
    history.txn(5, [send(8, 21, 0)])
    history.txn(6, [poll((8, 0, 21)), send(9, 20, 0)])
    # Two interleaved transactions, one reading the other after its own send landed below the
    # other's: Kafka by design, no G1c (checker.txn.event_graph).
    history.invoke(2, [send(2, 7, 0), send(0, 8, 2)])
    history.invoke(3, [send(0, 9, 1), poll((2, 0, 7))])
    history.complete(2)
    history.complete(3)
    # Each of two transactions read the other's write: G1c by wr edges alone.
    history.invoke(4, [send(3, 10, 0), poll((4, 0, 11))])
    history.invoke(5, [send(4, 11, 0), poll((3, 0, 10))])
    history.complete(4)
    history.complete(5)
    return history


def _single() -> History:
    """precommitted-read (twice), int-send-skip, int-nonmonotonic-send and a torn transaction."""
    history = History()
    history.invoke(1, [send(0, 7, 3)])
    history.txn(0, [poll((0, 3, 7))])
    history.complete(1, end_time=900)
    history.txn(2, [send(1, 8, 0), poll((1, 0, 8))])
    history.txn(3, [send(2, 10, 4), send(2, 11, 7), send(2, 12, 6)])
    history.txn(4, [send(0, 20, 9), send(1, 21, 1)])
    history.drain(0, [(3, 7), (9, 20)])
    history.drain(1, [(0, 8)])
    return history


def _clean() -> History:
    history = History()
    history.txn(0, [send(0, 1, 0), send(1, 2, 0)])
    history.txn(1, [poll((0, 0, 1)), send(0, 3, 1)])
    history.txn(0, [send(2, 4, 0)], kind="fail", end="abort")
    history.drain(0, [(0, 1), (1, 3)])
    history.drain(1, [(0, 2)])
    return history


def _offsets() -> History:
    """Consume-transform-produce: a record processed by two committed transactions of a group,
    two below the group's offset that only an aborted one read."""
    history = History()
    history.txn(0, [send(0, value, value) for value in range(5)])
    history.txn(1, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))])
    history.txn(1, [poll((0, 1, 1)), offsets((0, 2))])
    history.txn(1, [poll((0, 2, 2), (0, 3, 3)), offsets((0, 4))], kind="fail", end="abort")
    history.txn(1, [poll((0, 4, 4)), offsets((0, 5))])
    history.drain(0, [(value, value) for value in range(5)])
    return history


CASES: dict[str, tuple[Callable[[], History], dict[str, int]]] = {
    "g0": (_g0, {"G0": 1}),
    "g1c-process": (
        _g1c_and_process,
        {"G1c": 1, "G1c-process": 1, "G1c-realtime": 1, "precommitted-read": 2},
    ),
    "single": (
        _single,
        {"precommitted-read": 2, "int-send-skip": 1, "int-nonmonotonic-send": 1, "torn-transaction": 1},
    ),
    "clean": (_clean, {}),
    "offsets": (_offsets, {"consumed-twice": 1, "consumed-skipped": 2}),
}


def write_run(run_dir: Path, history: History, isolation: str = "read_committed") -> RunInput:
    """``history`` as a run directory (``test.json``, ``history.jsonl``), loaded."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for op in history.ops:
            writer.append(op)
    spec: dict[str, Any] = {
        "schema_version": 1,
        "name": run_dir.name,
        "topic": "queue",
        "workload": {"name": "queue", "partitions": PARTITIONS, "acks": "all", "isolation": isolation},
        "broker_config": {"acks": "all"},
        "nemesis": {"faults": ["kill"]},
        "scenario": None,
        "scenario_faults": [],
        "nodes": [],
    }
    (run_dir / "test.json").write_text(json.dumps(spec))
    return load_run(run_dir)


def write_cases(root: Path) -> list[RunInput]:
    """Every case of :data:`CASES` under ``root``, in order."""
    return [write_run(root / name, build()) for name, (build, _) in CASES.items()]


def answers(engine: Any, runs: list[RunInput]) -> pd.DataFrame:
    """The engine's transactional answer for ``runs``, asked as the driver asks (drain status first)."""
    drains = engine.drain_status(runs)
    complete = pd.DataFrame(
        [(run.history_run_id, p) for run in runs for p in range(run.partitions)],
        columns=["run_id", "partition"],
    )
    status = drains[["run_id", "partition", "complete"]].astype({"partition": "int64"})
    complete = complete.merge(status, on=["run_id", "partition"], how="left")
    complete["complete"] = complete["complete"].fillna(False).astype(bool)
    found: pd.DataFrame = engine.txn_anomalies(runs, complete, frozenset(TXN_CHECKS), DEFAULT_EXAMPLE_LIMIT)
    return found


def totals(answer: pd.DataFrame, run: RunInput) -> dict[str, int]:
    mine = answer[answer["run_id"] == run.history_run_id]
    return {str(kind): int(total) for kind, total in zip(mine["kind"], mine["total"], strict=True)}
