"""The liveness definitions' tiny examples (``checker.definitions``), as stored runs with real times.

Each :class:`Case` is a history of timed ops (seconds since the start), the ``stalled`` count it
must show and the figures of partition 0 it must carry.  Both engines run them: pandas in
``tests/checker/test_liveness.py``, Spark in ``tests/checker/spark/test_liveness.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

Step = tuple[float, int | str, str, str, Any]
"""(seconds, process, type, f, value) of one op; ops are numbered in list order."""


def send(at: float, process: int, value: int, offset: int | None, type_: str = "ok") -> list[Step]:
    """A send to partition 0 invoked 0.01 s before it completes (``offset`` on an ``ok``)."""
    invoked = {"partition": 0, "key": "k0", "value": value}
    done = {**invoked, "offset": offset} if type_ == "ok" else invoked
    return [(at - 0.01, process, "invoke", "send", invoked), (at, process, type_, "send", done)]


def poll(at: float, process: int, *records: tuple[int, int]) -> list[Step]:
    """An ok poll of partition 0 records (offset, value)."""
    value = [{"partition": 0, "offset": o, "key": "k0", "value": v} for o, v in records]
    return [(at - 0.01, process, "invoke", "poll", None), (at, process, "ok", "poll", value)]


def fault(start: float, end: float, f: str, heal: str, announced: bool = True) -> list[Step]:
    """A fault of n1 from ``start`` to its heal's completion at ``end``."""
    value: dict[str, Any] = {"nodes": ["n1"], **({} if announced else {"announced": False})}
    return [
        (start, "nemesis", "invoke", f, value),
        (start + 0.01, "nemesis", "ok", f, value),
        (end - 0.01, "nemesis", "invoke", heal, value),
        (end, "nemesis", "ok", heal, value),
    ]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    steps: list[Step]
    stalled: int
    figures: dict[str, Any]
    """Expected fields of ``liveness.partitions["0"]`` (the others are not compared)."""
    last_heal_s: float | None = None


# The definitions' example: acks at 1 s and 15 s, sends until 16 s.
_ACKS = [*send(1, 0, 1, 0), *send(15, 0, 2, 1), *send(16, 0, 3, 2)]

CASES = [
    Case(
        "stalled: no progress from 1 s to 15 s", _ACKS, 1, {"longest_gap_s": 14.0, "longest_gap_from_s": 1.0}
    ),
    Case(
        "a kill from 4 s to 12 s splits the gap: not stalled",
        sorted([*_ACKS, *fault(4, 12, "kill", "start")], key=lambda step: step[0]),
        0,
        {"longest_gap_s": 3.0, "recovery_send_s": 3.0},
        last_heal_s=12.0,
    ),
    Case(
        "an unannounced pause opens no window",
        sorted([*_ACKS, *fault(4, 12, "pause", "resume", announced=False)], key=lambda step: step[0]),
        1,
        {"longest_gap_s": 14.0, "recovery_send_s": None},
    ),
    Case(
        "stuck until the end: sends time out",
        [*send(1, 0, 1, 0), *send(5, 0, 2, None, "info"), *send(20, 1, 3, None, "info")],
        1,
        {"longest_gap_s": 19.0, "longest_gap_from_s": 1.0},
    ),
    Case(
        "recovery: the first ack and the first poll above the old end",
        [
            *send(1, 0, 1, 0),
            *send(2, 0, 2, 1),
            *fault(3, 10, "kill", "start"),
            *poll(11, 5, (0, 1)),  # the consumer catches up below the end at the heal
            *send(12, 0, 3, 2),
            *poll(13, 5, (1, 2), (2, 3)),  # above it
        ],
        0,
        {"recovery_send_s": 2.0, "recovery_poll_s": 3.0},
        last_heal_s=10.0,
    ),
    Case(
        "unpolled by age at the end of the send period",
        [*send(1, 0, 1, 0), *send(2, 0, 2, 1), *poll(3, 5, (1, 2)), *send(40, 0, 3, 2), *send(40.5, 0, 4, 3)],
        1,
        {"unpolled": {"count": 3, "by_age_s": {"<1": 2, "1-10": 0, "10-60": 1, ">=60": 0}, "oldest_s": 39.5}},
    ),
    Case(
        "a fault never healed covers the rest of the period, and there is no last heal",
        [*send(1, 0, 1, 0), *fault(2, 99, "kill", "start")[:2], *send(30, 0, 2, None, "info")],
        0,
        {"longest_gap_s": 1.0, "recovery_send_s": None},
    ),
    Case(
        "overlapping windows count once",
        sorted(
            [
                *send(1, 0, 1, 0),
                *fault(2, 20, "kill", "start"),
                *fault(5, 8, "pause", "resume"),
                *send(21, 0, 2, 1),
            ],
            key=lambda step: step[0],
        ),
        0,
        {"longest_gap_s": 1.0, "recovery_send_s": 1.0},
        last_heal_s=20.0,
    ),
]


def write_case(run_dir: Path, case: Case) -> None:
    """A run directory holding the case's history, a complete drain and no replica dumps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (seconds, process, type_, f, value) in enumerate(case.steps):
            writer.append(Op(index, round(seconds * 1e9), process, type_, f, value))  # type: ignore[arg-type]
    spec = {
        "schema_version": 1,
        "name": case.name,
        "topic": "queue",
        "workload": {"name": "queue", "partitions": 1, "acks": "all"},
        "broker_config": {},
        "nemesis": {"faults": ["kill", "pause"]},
        "scenario": None,
        "nodes": [],
    }
    (run_dir / "test.json").write_text(json.dumps(spec))


def assert_case(case: Case, result: dict[str, Any]) -> None:
    stalled = result["anomalies"].get("stalled", {}).get("count", 0)
    assert stalled == case.stalled, (case.name, result["anomalies"].get("stalled"))
    figures = result["liveness"]["partitions"]["0"]
    assert {key: figures[key] for key in case.figures} == case.figures, case.name
    assert result["liveness"]["last_heal_s"] == case.last_heal_s, case.name
