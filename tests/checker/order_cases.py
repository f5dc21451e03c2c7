"""The tiny examples of the order checks' definitions (``checker.definitions``), as stored runs.

Each :class:`Case` is a history written op by op, the order anomalies it must show (no more,
no fewer) and what its first example of each must compare.  Both engines run them: pandas in
``tests/checker/test_order.py``, Spark in ``tests/checker/spark/test_order.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from checker.definitions import (
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    POLL_SKIP,
    REALTIME_ORDER,
    STALE_READ,
)
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

Step = tuple[int, str, str, Any]
"""(process, type, f, value) of one op; ops are numbered in list order."""


def poll(process: int, *records: tuple[int, int]) -> list[Step]:
    """An ok poll of (partition, offset) records (value = 100 * partition + offset + 1000)."""
    value = [{"partition": p, "offset": o, "key": f"k{p}", "value": 1000 + 100 * p + o} for p, o in records]
    return [(process, "invoke", "poll", None), (process, "ok", "poll", value)]


def drain(process: int, partition: int, *offsets: int) -> list[Step]:
    records = [{"offset": o, "key": f"k{partition}", "value": 1000 + 100 * partition + o} for o in offsets]
    value = {"partition": partition, "records": records, "end_offset": 10, "complete": True}
    return [(process, "invoke", "drain", {"partition": partition}), (process, "ok", "drain", value)]


def invoke(process: int, value: int, partition: int = 0) -> Step:
    return (process, "invoke", "send", {"partition": partition, "key": f"k{partition}", "value": value})


def acked(process: int, value: int, offset: int, partition: int = 0) -> Step:
    sent = {"partition": partition, "key": f"k{partition}", "value": value, "offset": offset}
    return (process, "ok", "send", sent)


def send(process: int, value: int, offset: int, partition: int = 0) -> list[Step]:
    return [invoke(process, value, partition), acked(process, value, offset, partition)]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    steps: list[Step]
    found: dict[str, int]
    compared: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """kind -> (prev_offset, offset) of its first example."""
    earlier: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """kind -> the index of the earlier op every example names (of equals, the first)."""
    acks: str = "all"


CASES = [
    Case("poll-skip", [*poll(10, (0, 3)), *poll(10, (0, 5))], {POLL_SKIP: 1}, {POLL_SKIP: (3, 5)}),
    Case(
        "nonmonotonic-poll",
        [*poll(10, (0, 5)), *poll(10, (0, 3))],
        {NONMONOTONIC_POLL: 1, STALE_READ: 1},
        {NONMONOTONIC_POLL: (5, 3), STALE_READ: (5, 3)},
    ),
    Case(
        "the same offset again", [*poll(10, (0, 5)), *poll(10, (0, 5))], {NONMONOTONIC_POLL: 1, STALE_READ: 1}
    ),
    Case("the same offset twice in a poll", poll(10, (0, 5), (0, 5)), {INT_NONMONOTONIC_POLL: 1}),
    Case("int-poll-skip", poll(10, (0, 3), (0, 5)), {INT_POLL_SKIP: 1}, {INT_POLL_SKIP: (3, 5)}),
    Case(
        "int-nonmonotonic-poll",
        poll(10, (0, 5), (0, 3)),
        {INT_NONMONOTONIC_POLL: 1},
        {INT_NONMONOTONIC_POLL: (5, 3)},
    ),
    Case(
        "stale-read",
        [*poll(10, (0, 5)), *poll(10, (0, 3)), *poll(10, (0, 4))],
        {STALE_READ: 2, NONMONOTONIC_POLL: 1},
        {STALE_READ: (5, 3)},
    ),
    Case(
        "stale-read that moved forward",  # below what an earlier poll read, above the previous record
        [*poll(10, (0, 2)), *poll(10, (0, 3), (0, 4), (0, 5), (0, 3)), *poll(10, (0, 4))],
        {INT_NONMONOTONIC_POLL: 1, STALE_READ: 1},
        {STALE_READ: (5, 4), INT_NONMONOTONIC_POLL: (5, 3)},
    ),
    Case(
        "stale-read names the first read of the highest offset",
        [*poll(10, (0, 5)), *poll(10, (0, 5)), *poll(10, (0, 4))],
        {NONMONOTONIC_POLL: 2, STALE_READ: 2},
        earlier={STALE_READ: [1, 1], NONMONOTONIC_POLL: [1, 3]},
    ),
    Case(
        "stale-read in a drain",
        [*drain(30, 0, 0, 1, 2), *drain(30, 0, 1)],
        {STALE_READ: 1},
        {STALE_READ: (2, 1)},
    ),
    Case("polls of other processes", [*poll(10, (0, 5)), *poll(11, (0, 3)), *poll(12, (0, 9))], {}),
    Case("partitions apart", [*poll(10, (0, 3), (1, 7), (0, 4)), *poll(10, (1, 8), (0, 5))], {}),
    Case(
        "nonmonotonic-send",
        [*send(0, 7, 5), *send(0, 8, 4)],
        {NONMONOTONIC_SEND: 1, REALTIME_ORDER: 1},
        {NONMONOTONIC_SEND: (5, 4), REALTIME_ORDER: (5, 4)},
    ),
    Case(
        "an acknowledged offset again, same process",
        [*send(0, 7, 5), *send(0, 8, 5)],
        {NONMONOTONIC_SEND: 1, REALTIME_ORDER: 1},
    ),
    Case("an acknowledged offset again", [*send(0, 7, 5), *send(1, 8, 5)], {REALTIME_ORDER: 1}),
    Case("realtime-order", [*send(0, 7, 5), *send(1, 8, 3)], {REALTIME_ORDER: 1}, {REALTIME_ORDER: (5, 3)}),
    Case(
        "realtime-order against the highest acknowledged offset",
        [*send(0, 7, 5), *send(1, 8, 9), *send(2, 9, 6), *send(3, 10, 10)],
        {REALTIME_ORDER: 1},
        {REALTIME_ORDER: (9, 6)},
    ),
    Case(
        "realtime-order names the first acknowledgement of the highest offset",
        [*send(0, 7, 5), *send(1, 8, 5), *send(2, 9, 4)],
        {REALTIME_ORDER: 2},
        earlier={REALTIME_ORDER: [1, 1]},
    ),
    Case("concurrent sends", [invoke(1, 8), *send(0, 7, 5), acked(1, 8, 3)], {}),
    Case("sends to other partitions", [*send(0, 7, 5, partition=0), *send(0, 8, 3, partition=1)], {}),
    Case("acks=0 acknowledges offset -1", [*send(0, 7, -1), *send(0, 8, -1), *send(1, 9, -1)], {}, acks="0"),
]


def write_case(run_dir: Path, case: Case) -> None:
    """A run directory holding the case's history (no replica dumps: the order checks need none)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (process, type_, f, value) in enumerate(case.steps):
            writer.append(Op(index, index * 1000, process, type_, f, value))  # type: ignore[arg-type]
    spec = {
        "schema_version": 1,
        "name": case.name,
        "topic": "queue",
        "workload": {"name": "queue", "partitions": 2, "acks": case.acks},
        "broker_config": {},
        "nemesis": {"faults": []},
        "scenario": None,
        "nodes": [],
    }
    (run_dir / "test.json").write_text(json.dumps(spec))


def assert_case(case: Case, result: dict[str, Any]) -> None:
    found = {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}
    assert found == case.found, case.name
    for kind, (prev_offset, offset) in case.compared.items():
        example = result["anomalies"][kind]["examples"][0]
        assert (example["prev_offset"], example["offset"]) == (prev_offset, offset), (case.name, kind)
    for kind, indexes in case.earlier.items():
        examples = result["anomalies"][kind]["examples"]
        named = [
            next(e[key]["index"] for key in ("prev_read", "prev_poll", "prev_send") if key in e)
            for e in examples
        ]
        assert named == indexes, (case.name, kind)
