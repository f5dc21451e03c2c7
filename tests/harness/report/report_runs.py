"""Stored runs for the report, index and JUnit tests: realistic histories, checked by the real checker.

:func:`write_run` writes what the runner would leave in a run directory -- ``test.json`` in
the runner's layout, ``history.jsonl`` through the real :class:`testbed.record.history.HistoryWriter`
(producers, a consumer, nemesis fault/heal pairs, a final drain; times in nanoseconds over
~20 s, with slow and failed sends inside fault windows), one ``nodes/<node>/dump.jsonl`` per
replica in the broker's dump format, a ``broker.log`` and an event log per node.  Planted anomalies
(lost writes, divergent replica offsets) are what make a run invalid.  :func:`check_run`
then runs the real checker (pandas engine) so that ``results.json`` has exactly the schema
the reports will meet in production.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.api import check_runs
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from testbed.cluster.bundled import effective_settings
from testbed.cluster.tansu import REPLICA_EVIDENCE as TANSU_REPLICA_EVIDENCE
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

NODES = ("n1", "n2", "n3")
TOPIC = "tidemark"
SECOND = 1_000_000_000
PRODUCERS = 3
CONSUMER, DRAINER = 10, 20
FAULTS: tuple[tuple[str, str, dict[str, Any], float, float], ...] = (
    ("kill", "start", {"nodes": ["n2"]}, 5.0, 9.0),
    ("pause", "resume", {"nodes": ["n1"]}, 11.0, 13.0),
    (
        "partition",
        "heal",
        {"kind": "halves", "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}},
        15.0,
        18.0,
    ),
)


@dataclasses.dataclass(frozen=True)
class RunShape:
    name: str = "queue"
    truncation: str = "leader-epoch"
    acks: str = "all"
    scenario: str | None = None
    partitions: int = 2
    seconds: float = 20.0
    send_interval: float = 0.05
    lost_writes: int = 0
    divergent_offsets: int = 0
    drain_complete: bool = True
    unhealed_kill: bool = False
    """A ``kill n3`` at the end that no ``start`` follows."""
    single_store: bool = False
    """Recorded as tansu records itself (``replica_evidence`` single-store): the replica and the
    white-box checks are then not applicable."""


def _in_fault(seconds: float) -> bool:
    return any(start <= seconds <= end for _, _, _, start, end in FAULTS)


def write_run(run_dir: Path, shape: RunShape = RunShape()) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    events: list[
        tuple[int, int, Any, str, str, Any, str | None]
    ] = []  # time, order, process, type, f, value, error
    logs: dict[int, list[tuple[str, int]]] = {p: [] for p in range(shape.partitions)}
    acked: list[tuple[int, dict[str, Any], int]] = []  # partition, send value, ack time
    value = 0
    for process in range(PRODUCERS):
        clock = 1.0 + process * shape.send_interval / PRODUCERS
        number = 0
        while clock < shape.seconds:
            value += 1
            number += 1
            partition = value % shape.partitions
            send: dict[str, Any] = {"partition": partition, "key": f"k{partition}", "value": value}
            faulty = _in_fault(clock)
            latency = 0.4 if faulty else 0.004 + 0.001 * (number % 5)
            outcome = (
                ("fail" if number % 3 == 0 else "info" if number % 3 == 1 else "ok")
                if faulty and number % 2
                else "ok"
            )
            done = clock + latency
            events.append((int(clock * SECOND), 0, process, "invoke", "send", send, None))
            if outcome == "ok":
                acked.append((partition, send, int(done * SECOND)))
                events.append(
                    (int(done * SECOND), 1, process, "ok", "send", None, None)
                )  # offset filled below
            elif outcome == "fail":
                events.append((int(done * SECOND), 1, process, "fail", "send", None, "NOT_ENOUGH_REPLICAS"))
            else:
                events.append((int(done * SECOND), 1, process, "info", "send", send, "REQUEST_TIMED_OUT"))
                process += 100  # an info completion retires the process: a fresh one takes over
            clock = done + shape.send_interval
    # Offsets in ack order; the last ``lost_writes`` acks point past the final log (lost).
    acked.sort(key=lambda item: item[2])
    lost = {id(item[1]) for item in acked[len(acked) - shape.lost_writes :]} if shape.lost_writes else set()
    offsets: dict[int, dict[str, Any]] = {}
    tail = {p: 0 for p in range(shape.partitions)}
    for partition, send, _ in acked:
        if id(send) not in lost:
            logs[partition].append((send["key"], send["value"]))
        offsets[send["value"]] = {**send, "offset": tail[partition]}
        tail[partition] += 1
    events = [
        (t, o, p, k, f, offsets[v["value"]] if k == "ok" and f == "send" else v, e)
        for t, o, p, k, f, v, e in _fill_send_values(events)
    ]
    for fault, heal, fault_value, start, end in FAULTS:
        heal_value = {"nodes": sorted(fault_value["grudge"])} if fault == "partition" else fault_value
        events += [
            (int(start * SECOND), 0, "nemesis", "invoke", fault, fault_value, None),
            (int((start + 0.05) * SECOND), 1, "nemesis", "ok", fault, fault_value, None),
            (int(end * SECOND), 0, "nemesis", "invoke", heal, heal_value, None),
            (int((end + 0.2) * SECOND), 1, "nemesis", "ok", heal, heal_value, None),
        ]
    if shape.unhealed_kill:
        at = shape.seconds - 1.0
        events += [
            (int(at * SECOND), 0, "nemesis", "invoke", "kill", {"nodes": ["n3"]}, None),
            (int((at + 0.05) * SECOND), 1, "nemesis", "ok", "kill", {"nodes": ["n3"]}, None),
        ]
    read = {p: 0 for p in range(shape.partitions)}
    clock = 1.1
    while clock < shape.seconds:  # the consumer polls what has been acknowledged and is in the log
        records = []
        for p in range(shape.partitions):
            for offset in range(read[p], min(len(logs[p]), read[p] + 3)):
                records.append(
                    {"partition": p, "offset": offset, "key": logs[p][offset][0], "value": logs[p][offset][1]}
                )
            read[p] = min(len(logs[p]), read[p] + 3)
        events += [
            (int(clock * SECOND), 0, CONSUMER, "invoke", "poll", None, None),
            (int((clock + 0.002) * SECOND), 1, CONSUMER, "ok", "poll", records, None),
        ]
        clock += 0.25
    clock = shape.seconds + 2.0
    for p in range(shape.partitions):
        records = [{"offset": o, "key": k, "value": v} for o, (k, v) in enumerate(logs[p])]
        complete = shape.drain_complete or p != shape.partitions - 1
        drained = {"partition": p, "records": records, "end_offset": len(records), "complete": complete}
        events += [
            (int(clock * SECOND), 0, DRAINER, "invoke", "drain", {"partition": p}, None),
            (int((clock + 0.1) * SECOND), 1, DRAINER, "ok", "drain", drained, None),
        ]
        clock += 0.2
    events.sort(key=lambda event: (event[0], event[1]))
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (time, _, process, kind, f, op_value, error) in enumerate(events):
            writer.append(Op(index, time, process, kind, f, op_value, error))  # type: ignore[arg-type]
    _write_dumps(run_dir, shape, logs)
    _write_spec(run_dir, shape)


def _fill_send_values(events: list[tuple[int, int, Any, str, str, Any, str | None]]) -> list[Any]:
    """Give each ``ok`` send completion its invoke's value (the offset is added by the caller)."""
    pending: dict[Any, Any] = {}
    filled = []
    for time, order, process, kind, f, value, error in sorted(events, key=lambda e: (e[0], e[1])):
        if f == "send" and kind == "invoke":
            pending[process] = value
        elif f == "send" and kind == "ok":
            value = pending.pop(process)
        filled.append((time, order, process, kind, f, value, error))
    return filled


def _write_dumps(run_dir: Path, shape: RunShape, logs: dict[int, list[tuple[str, int]]]) -> None:
    divergent = {(0, offset) for offset in range(2, 2 + shape.divergent_offsets)}
    for node in NODES:
        lines = []
        for p, log in logs.items():
            for offset, (key, value) in enumerate(log):
                shown = f"diverged-{offset}" if node == "n2" and (p, offset) in divergent else str(value)
                epoch = 2 if node == "n2" and (p, offset) in divergent else 1
                lines.append(
                    {
                        "type": "record",
                        "topic": TOPIC,
                        "partition": p,
                        "offset": offset,
                        "leader_epoch": epoch,
                        "key": key,
                        "value": shown,
                    }
                )
            lines.append(
                {
                    "type": "partition",
                    "topic": TOPIC,
                    "partition": p,
                    "high_watermark": len(log),
                    "log_end_offset": len(log),
                    "log_start_offset": 0,
                    "epochs": [[0, 0], [1, 1]],
                }
            )
        directory = run_dir / "nodes" / node
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "dump.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
        )
        (directory / "broker.log").write_text(f"INFO broker {node} listening\n", encoding="utf-8")
        _write_event_log(directory / "broker-events.jsonl", int(node[1:]), "broker")
    (run_dir / "nodes" / "controller").mkdir(exist_ok=True)
    (run_dir / "nodes" / "controller" / "controller.log").write_text("INFO controller up\n", encoding="utf-8")
    _write_event_log(run_dir / "nodes" / "controller" / "controller-events.jsonl", 3000, "controller")


def _write_event_log(path: Path, node: int, role: str) -> None:
    """An event log holding its process's ``start`` alone: complete evidence with nothing for the
    white-box checks to judge (their own tests are ``tests/checker/test_invariants.py``)."""
    start = {"ts": 1, "node": node, "seq": 0, "kind": "start", "format": "tidemark-broker-events"}
    path.write_text(json.dumps({**start, "schema_version": 1, "role": role}) + "\n", encoding="utf-8")


def _write_spec(run_dir: Path, shape: RunShape) -> None:
    settings = {"truncation.mode": shape.truncation, "min.insync.replicas": "2"}
    spec = {
        "schema_version": 1,
        "name": shape.name,
        "topic": TOPIC,
        "node_count": len(NODES),
        "time_limit": shape.seconds,
        "recovery_timeout": 60.0,
        "drain_timeout": 60.0,
        "seed": 0,
        "settings": settings,
        "workload": {
            "name": "queue",
            "partitions": shape.partitions,
            "replication_factor": 3,
            "producers": PRODUCERS,
            "consumers": 1,
            "rate": 60.0,
            "acks": shape.acks,
            "client": "kafka-python",
        },
        "nemesis": {"faults": ["kill", "pause", "partition"], "interval_seconds": 5.0, "seed": 0},
        "scenario": shape.scenario,
        "bootstrap": None,
        "inventory": None,
        "nodes": list(NODES),
        "broker_config": {**effective_settings(settings), "acks": shape.acks},  # as TestSpec records it
        "versions": {"python": "3.11", "tidemark": "0.1.0"},
    }
    if shape.single_store:
        spec["replica_evidence"] = TANSU_REPLICA_EVIDENCE
    (run_dir / "test.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")


def check_run(run_dir: Path, checks: Sequence[str] = ALL_CHECKS) -> dict[str, Any]:
    """Check the run with the real checker (pandas engine) and write its ``results.json`` and
    ``anomaly_records.parquet``, as ``tidemark check`` does."""
    (result,) = check_runs([load_run(run_dir)], PandasEngine(), checks, DEFAULT_EXAMPLE_LIMIT)
    return result


def make_checked_run(
    run_dir: Path, shape: RunShape = RunShape(), checks: Sequence[str] = ALL_CHECKS
) -> dict[str, Any]:
    write_run(run_dir, shape)
    return check_run(run_dir, checks)


DEMO_CONSEQUENCES: tuple[tuple[str, int], ...] = (
    ("hw-regression", 3),
    ("truncated-committed", 4),
    ("incomplete-leader", 2),
    ("isr-divergence", 1),
    ("inconsistent-offsets", 40),
    ("duplicate", 6),
    ("poll-skip", 9),
    ("nonmonotonic-poll", 5),
    ("int-poll-skip", 2),
    ("stale-read", 5),
)
"""White-box findings and consequences a real KIP-101 loss run reports beside its lost writes
(issue 36's demo: lost-write x350 after hw-regression and eleven consequences)."""


def make_demo_store(root: Path) -> Path:
    """A store laid out as ``tidemark demo`` leaves it: the KIP-101 loss scenario under
    ``high-watermark`` (350 lost writes, 40 divergent positions and, written into its
    ``results.json``, the other anomalies a real run reports: :data:`DEMO_CONSEQUENCES`) and under
    ``leader-epoch`` (valid), each checked by the real checker; reports not rendered."""
    from nemesis.scenario import load_scenario  # the one test helper that needs the scenarios

    for truncation, lost, divergent in (("high-watermark", 350, 40), ("leader-epoch", 0, 0)):
        run_dir = root / "runs" / f"kip101-loss-{truncation}"
        shape = RunShape(
            name="kip101-loss",
            truncation=truncation,
            scenario="kip101-loss",
            seconds=40.0,
            send_interval=0.01,
            lost_writes=lost,
            divergent_offsets=divergent,
        )
        make_checked_run(run_dir, shape)
        spec_file = run_dir / "test.json"
        spec = json.loads(spec_file.read_text(encoding="utf-8"))
        spec["nemesis"]["faults"] = []  # a scenario injects its faults through its steps
        spec |= {
            "scenario_faults": ["kill", "partition"],
            "scenario_definition": load_scenario("kip101-loss").definition,
        }
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        if lost:
            results_file = run_dir / "results.json"
            results = json.loads(results_file.read_text(encoding="utf-8"))
            rule = "truncation.mode=high-watermark"
            for kind, count in DEMO_CONSEQUENCES:
                results["anomalies"].setdefault(
                    kind,
                    {"count": count, "expected": True, "rule": rule, "severity": "error", "examples": []},
                )
            results_file.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return root
