"""Cases found by writing runs from ``docs/history.md`` alone, as stored runs both engines check.

Each :class:`Case` is a history written op by op, the replica dumps (each with its own high
watermarks), how the run is loaded, and what ``results.json`` must say: the anomaly counts
(no more, no fewer), the verdict, the reasons it is incomplete and, where the case is about
an example, a check of that example.  pandas runs them in ``tests/checker/test_contract_cases.py``,
Spark in ``tests/checker/spark/test_contract_cases.py`` -- which also requires the same
``results.json`` as pandas, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checker.definitions import (
    DIVERGENT_TAIL,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    POLL_SKIP,
    REPLICA_DIVERGENCE,
    UNEXPECTED,
)
from testbed.record.history import HistoryWriter, convert_history
from testbed.record.ops import Op

Value = int | str | None
"""A record value as a consumer reads it: the workload's integer, other text, or null."""
Step = tuple[int, str, str, Any]
"""(process, type, f, value) of one op; ops are numbered in list order."""


def send(process: int, value: int, offset: int | None) -> list[Step]:
    """An acknowledged send to partition 0; ``offset`` None: an ``ok`` value without one."""
    invoked = {"partition": 0, "key": "k0", "value": value}
    done = invoked if offset is None else {**invoked, "offset": offset}
    return [(process, "invoke", "send", invoked), (process, "ok", "send", done)]


def poll(process: int, *records: tuple[int, Value]) -> list[Step]:
    """An ok poll of partition 0 records (offset, value)."""
    value = [{"partition": 0, "offset": o, "key": "k0", "value": v} for o, v in records]
    return [(process, "invoke", "poll", None), (process, "ok", "poll", value)]


def drain(*records: tuple[int, Value], process: int = 30, complete: bool = True) -> list[Step]:
    """The final drain of partition 0, in one chunk, up to the offset after the last record."""
    end = max((o for o, _ in records), default=-1) + 1
    value = {
        "partition": 0,
        "records": [{"offset": o, "key": "k0", "value": v} for o, v in records],
        "end_offset": end,
        "complete": complete,
    }
    return [(process, "invoke", "drain", {"partition": 0}), (process, "ok", "drain", value)]


@dataclasses.dataclass(frozen=True)
class Replica:
    """One node's dump: partition 0 records (offset, value) and its HW (None: no partition line)."""

    node: str
    records: tuple[tuple[int, Value], ...]
    high_watermark: int | None

    def lines(self) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = [
            {
                "type": "record",
                "topic": "queue",
                "partition": 0,
                "offset": offset,
                "leader_epoch": 1,
                "key": "k0",
                "value": value if value is None else str(value),
            }
            for offset, value in self.records
        ]
        end = max((o for o, _ in self.records), default=-1) + 1
        topic, partition, mark = ("queue", 0, self.high_watermark)
        if self.high_watermark is None:  # a dump without queue/0's line: another topic's keeps it whole
            topic, mark = "__other", 0
        lines.append(
            {
                "type": "partition",
                "topic": topic,
                "partition": partition,
                "high_watermark": mark,
                "log_end_offset": end if topic == "queue" else 0,
                "log_start_offset": 0,
                "epochs": [[1, 0]],
            }
        )
        return lines


def agreeing(*records: tuple[int, Value]) -> tuple[Replica, ...]:
    """Three replicas holding ``records``, all committed."""
    return tuple(Replica(node, records, len(records)) for node in ("n1", "n2", "n3"))


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    steps: list[Step]
    replicas: tuple[Replica, ...]
    found: dict[str, int]
    valid: bool | str
    incomplete: tuple[str, ...] = ()
    """Substrings of ``incomplete``, one per reason, in order (and no other reason)."""
    acks: str = "all"
    skip_bad_lines: bool = False
    prepare: Callable[[Path], None] | None = None
    """Changes the written run directory before it is loaded (damage, a newer file, ...)."""
    verify: Callable[[dict[str, Any]], None] | None = None
    """Further assertions on ``results.json``."""


def write_case(run_dir: Path, case: Case) -> None:
    """The run directory of ``case``: ``test.json``, ``history.jsonl`` and one dump per replica."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (process, type_, f, value) in enumerate(case.steps):
            writer.append(Op(index, index * 1000, process, type_, f, value))  # type: ignore[arg-type]
    for replica in case.replicas:
        (run_dir / "nodes" / replica.node).mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in replica.lines())
        (run_dir / "nodes" / replica.node / "dump.jsonl").write_text(text)
    spec = {
        "schema_version": 1,
        "name": case.name,
        "topic": "queue",
        "workload": {"name": "queue", "partitions": 1, "acks": case.acks},
        "broker_config": {"acks": case.acks},
        "nemesis": {"faults": ["kill"]},
        "scenario": None,
        "scenario_faults": [],
        "nodes": [replica.node for replica in case.replicas],
    }
    (run_dir / "test.json").write_text(json.dumps(spec))
    if case.prepare is not None:
        case.prepare(run_dir)


def assert_case(case: Case, result: dict[str, Any]) -> None:
    found = {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}
    assert found == case.found, (case.name, result["anomalies"])
    assert result["valid"] == case.valid, (case.name, result["incomplete"])
    assert len(result["incomplete"]) == len(case.incomplete), (case.name, result["incomplete"])
    for expected, reason in zip(case.incomplete, result["incomplete"], strict=True):
        assert expected in reason, (case.name, reason)
    if case.verify is not None:
        case.verify(result)


# ---------------------------------------------------------------- item 1: null record values


def _null_read_once_shown(result: dict[str, Any]) -> None:
    (example,) = result["anomalies"][UNEXPECTED]["examples"]
    assert example["value"] is None and example["offset"] == 1
    read = example["read"]  # what was read, not "nothing read"
    assert read is not None and read["f"] == "poll" and read["process"] == 10
    assert read["value"] == [{"partition": 0, "offset": 1, "key": "k0", "value": None}]


def _null_against_integer(result: dict[str, Any]) -> None:
    (example,) = result["anomalies"][INCONSISTENT_OFFSETS]["examples"]
    assert [(seen["f"], seen["value"]) for seen in example["seen"]] == [
        ("send", 1000),
        ("poll", None),
        ("drain", 1000),
    ]


# ---------------------------------------------------------------- item 5: divergence by HW


def _divergence_pairs(kind: str, pairs: list[tuple[str, str, int, int]]) -> Callable[[dict[str, Any]], None]:
    """(node_a, node_b, first offset, positions) of each example of ``kind``."""

    def verify(result: dict[str, Any]) -> None:
        examples = result["anomalies"][kind]["examples"]
        shown = [(*sorted(e["replicas"]), e["offset"], e["positions"]) for e in examples]
        assert shown == pairs, shown
        assert result["anomalies"][kind]["severity"] == ("warning" if kind == DIVERGENT_TAIL else "error")

    return verify


def _both(*checks: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def verify(result: dict[str, Any]) -> None:
        for check in checks:
            check(result)

    return verify


# ---------------------------------------------------------------- items 3, 4, 6: evidence files


def _append_garbage(run_dir: Path) -> None:
    history = run_dir / "history.jsonl"
    history.write_text(history.read_text() + "not json\n")


def _damage_dump(node: str) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        dump = run_dir / "nodes" / node / "dump.jsonl"
        lines = dump.read_text().splitlines(keepends=True)
        dump.write_text(lines[0] + '{"type": "record", "topic": \n' + "".join(lines[1:]))

    return damage


def _newer_jsonl_wins(run_dir: Path) -> None:
    """Convert, then append a lost write to ``history.jsonl`` and make it newer than the Parquet file."""
    jsonl, parquet = run_dir / "history.jsonl", run_dir / "history.parquet"
    convert_history(jsonl, parquet)
    with HistoryWriter(jsonl) as writer:
        count = len(jsonl.read_text().splitlines()) - 1
        for number, (process, type_, f, value) in enumerate(send(7, 1099, 9)):
            writer.append(Op(count + number, (count + number) * 1000, process, type_, f, value))  # type: ignore[arg-type]
    stamp = parquet.stat().st_mtime_ns
    os.utime(jsonl, ns=(stamp + 1_000_000_000, stamp + 1_000_000_000))


def _newer_parquet_wins(run_dir: Path) -> None:
    """Convert, then spoil ``history.jsonl`` with an older mtime: the Parquet file is read alone."""
    jsonl, parquet = run_dir / "history.jsonl", run_dir / "history.parquet"
    convert_history(jsonl, parquet)
    jsonl.write_text("garbage that would be an error if it were read\n")
    stamp = parquet.stat().st_mtime_ns
    os.utime(jsonl, ns=(stamp - 1_000_000_000, stamp - 1_000_000_000))


REINVOKED_AFTER_INFO = [
    *send(0, 1000, 0),
    *send(1, 1001, 1),
    *poll(10, (1, 1001)),
    (10, "invoke", "poll", None),
    (10, "info", "poll", None),  # op 7: process 10 is gone
    *poll(10, (0, 1000)),  # ops 8-9, lines 10-11: a successor under the dead id
    *drain((0, 1000), (1, 1001)),
]
"""A broken contract (``docs/history.md`` section 1): read as is, a false nonmonotonic-poll."""

CLEAN = [*send(0, 1000, 0), *send(1, 1001, 1), *poll(10, (0, 1000), (1, 1001)), *drain((0, 1000), (1, 1001))]
CLEAN_LOG = agreeing((0, 1000), (1, 1001))

CASES = [
    Case(
        "a null value read three times at one offset is one value",
        [
            *send(0, 1000, 0),
            *poll(10, (0, 1000), (1, None)),
            *poll(11, (1, None)),
            *drain((0, 1000), (1, None)),
        ],
        agreeing((0, 1000), (1, None)),
        {UNEXPECTED: 1},
        False,
        verify=_null_read_once_shown,
    ),
    Case(
        "a text value read twice at one offset is one value",
        [*send(0, 1000, 0), *poll(10, (1, "x")), *drain((0, 1000), (1, "x"))],
        agreeing((0, 1000), (1, "x")),
        {UNEXPECTED: 1},
        False,
    ),
    Case(
        "a null value and an integer at one offset are inconsistent",
        [*send(0, 1000, 0), *poll(10, (0, None)), *drain((0, 1000))],
        agreeing((0, 1000)),
        {INCONSISTENT_OFFSETS: 1, UNEXPECTED: 1},
        False,
        verify=_null_against_integer,
    ),
    Case(
        "a null value and text at one offset are inconsistent",
        [*send(0, 1000, 0), *poll(10, (1, None)), *drain((0, 1000), (1, "x"))],
        agreeing((0, 1000), (1, "x")),
        {INCONSISTENT_OFFSETS: 1, UNEXPECTED: 2},
        False,
    ),
    Case(
        "acks=0 acknowledgements (offset -1 or none) observe no position",
        [
            *send(0, 1000, -1),
            *send(1, 1001, -1),
            *send(2, 1002, None),
            *drain((0, 1000), (1, 1001), (2, 1002)),
        ],
        agreeing((0, 1000), (1, 1001), (2, 1002)),
        {},
        True,
        acks="0",
    ),
    Case(
        "an acks=0 write lost: acknowledged, its offset unknown",
        [*send(0, 1000, -1), *send(1, 1001, -1), *drain((0, 1001))],
        agreeing((0, 1001)),
        {LOST_WRITE: 1},
        False,
        acks="0",
        verify=lambda result: _lost_offset_unknown(result),
    ),
    Case(
        "poll-skip counts one jump, not the offsets it skips",
        [*send(0, 1003, 3), *send(0, 1009, 9), *poll(10, (3, 1003)), *poll(10, (9, 1009))],
        agreeing(*((o, 1000 + o) for o in range(10))),
        {POLL_SKIP: 1},
        False,
        incomplete=("have no complete final drain",),
    ),
    Case(
        "replicas differing below both HWs diverge",
        CLEAN,
        (Replica("n1", ((0, 1000), (1, 1001)), 2), Replica("n2", ((0, 1000), (1, 1099)), 2)),
        {REPLICA_DIVERGENCE: 1},
        False,
        verify=_divergence_pairs(REPLICA_DIVERGENCE, [("n1", "n2", 1, 1)]),
    ),
    Case(
        "replicas differing at or above the lower HW have a divergent tail",
        CLEAN,
        (Replica("n1", ((0, 1000), (1, 1001)), 2), Replica("n2", ((0, 1000), (1, 1099)), 1)),
        {DIVERGENT_TAIL: 1},
        True,
        verify=_divergence_pairs(DIVERGENT_TAIL, [("n1", "n2", 1, 1)]),
    ),
    Case(
        "each differing position is classified once, by its committed pairs",
        [*CLEAN[:-2], *send(2, 1002, 2), *drain((0, 1000), (1, 1001), (2, 1002))],
        (
            Replica("n1", ((0, 1000), (1, 1001), (2, 1002)), 3),
            Replica("n2", ((0, 1000), (1, 1097), (2, 1002)), 3),
            Replica("n3", ((0, 1000), (1, 1098), (2, 1099)), 1),
        ),
        {REPLICA_DIVERGENCE: 1, DIVERGENT_TAIL: 1},
        False,
        verify=_both(
            _divergence_pairs(REPLICA_DIVERGENCE, [("n1", "n2", 1, 1)]),
            _divergence_pairs(DIVERGENT_TAIL, [("n1", "n3", 2, 1), ("n2", "n3", 2, 1)]),
        ),
    ),
    Case(
        "a replica without a partition line counts as HW 0",
        CLEAN,
        (Replica("n1", ((0, 1000), (1, 1001)), 2), Replica("n2", ((0, 1099), (1, 1001)), None)),
        {DIVERGENT_TAIL: 1},
        True,
        verify=_divergence_pairs(DIVERGENT_TAIL, [("n1", "n2", 0, 1)]),
    ),
    Case(
        "an invoke after the process's info is a bad line, not a nonmonotonic-poll",
        REINVOKED_AFTER_INFO,
        agreeing((0, 1000), (1, 1001)),
        {},
        "unknown",
        incomplete=("2 bad history line(s) skipped",),  # the invoke, then its orphaned completion
        skip_bad_lines=True,
        verify=lambda result: _skipped(result, 2),
    ),
    Case(
        "--skip-bad-lines on a clean history: the normal verdict",
        CLEAN,
        CLEAN_LOG,
        {},
        True,
        skip_bad_lines=True,
    ),
    Case(
        "--skip-bad-lines with a line skipped: at best unknown",
        CLEAN,
        CLEAN_LOG,
        {},
        "unknown",
        incomplete=("1 bad history line(s) skipped",),
        skip_bad_lines=True,
        prepare=_append_garbage,
        verify=lambda result: _skipped(result, 1),
    ),
    Case(
        "a damaged dump is that node's evidence missing",
        CLEAN,
        CLEAN_LOG,
        {},
        "unknown",
        incomplete=("replica dump of node n2 missing: damaged dump: ",),
        prepare=_damage_dump("n2"),
        verify=lambda result: _names_the_line(result, "n2", 2),
    ),
    Case(
        "an anomaly proven beside a damaged dump stays proven",
        [*CLEAN[:-2], *send(2, 1002, 2), *drain((0, 1000), (1, 1001))],
        CLEAN_LOG,
        {LOST_WRITE: 1},
        False,
        incomplete=("replica dump of node n1 missing: damaged dump: ",),
        prepare=_damage_dump("n1"),
    ),
    Case(
        "a history.jsonl newer than history.parquet is converted again",
        CLEAN,
        CLEAN_LOG,
        {LOST_WRITE: 1},
        False,
        prepare=_newer_jsonl_wins,
    ),
    Case(
        "a history.parquet as new as history.jsonl is read alone",
        CLEAN,
        CLEAN_LOG,
        {},
        True,
        prepare=_newer_parquet_wins,
    ),
]


def _lost_offset_unknown(result: dict[str, Any]) -> None:
    (example,) = result["anomalies"][LOST_WRITE]["examples"]
    assert example["value"] == 1000 and example["offset"] is None
    assert (
        result["anomalies"][LOST_WRITE]["expected"] is True
        and result["anomalies"][LOST_WRITE]["rule"] == "acks=0"
    )


def _skipped(result: dict[str, Any], lines: int) -> None:
    assert result["stats"]["skipped_lines"] == lines


def _names_the_line(result: dict[str, Any], node: str, line: int) -> None:
    """The missing node's reason names its dump's file:line; the node is out of the replica figures."""
    (reason,) = result["incomplete"]
    assert f"nodes/{node}/dump.jsonl:{line}: " in reason, reason
    assert (
        node in result["stats"]["replicas"]["missing"] and node not in result["stats"]["replicas"]["records"]
    )


from tests.checker.txn_value_cases import TXN_VALUE_CASES  # noqa: E402  (they build on the helpers above)

CASES += TXN_VALUE_CASES
