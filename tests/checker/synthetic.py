"""Synthetic stored runs with planted anomalies, for the checker's soundness and parity tests.

:func:`write_run` writes a complete run directory (``test.json``, ``history.jsonl`` through
the real :class:`harness.record.history.HistoryWriter`, one ``nodes/<node>/dump.jsonl`` per replica
in the broker's dump format) from a :class:`Plan`, and returns the anomaly counts that the
checker must report -- no more, no fewer.  Each planted anomaly is built so that it causes
exactly one anomaly of its kind and nothing else (e.g. a lost write's ack points past the
end of the final log, so no other value shares its offset).
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from checker.definitions import (
    ABORTED_READ,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    LOST_READ,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    REPLICA_DIVERGENCE,
    UNEXPECTED,
    UNSEEN,
)
from harness.record.history import HistoryWriter
from harness.record.ops import Op

PLANTABLE = (
    LOST_WRITE,
    REPLICA_DIVERGENCE,
    INCONSISTENT_OFFSETS,
    DUPLICATE,
    ABORTED_READ,
    LOST_READ,
    UNEXPECTED,
    POLL_SKIP,
    NONMONOTONIC_POLL,
    UNSEEN,
)
NODES = ("n1", "n2", "n3")


@dataclasses.dataclass(frozen=True)
class Plan:
    seed: int
    partitions: int = 2
    values_per_partition: int = 12
    plant: tuple[tuple[str, int], ...] = ()
    broker_config: tuple[tuple[str, str], ...] = ()
    acks: str = "all"
    faults: tuple[str, ...] = ("kill",)
    other_topic: bool = True
    """Whether the replica dumps hold a record of a second topic (which the checks must ignore)."""


class _Recorder:
    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.index = 0

    def op(self, process: int | str, type_: str, f: str, value: Any = None, error: str | None = None) -> None:
        self.writer.append(Op(self.index, self.index * 1000, process, type_, f, value, error))  # type: ignore[arg-type]
        self.index += 1

    def pair(
        self, process: int | str, f: str, invoke: Any, type_: str, value: Any, error: str | None = None
    ) -> None:
        self.op(process, "invoke", f, invoke)
        self.op(process, type_, f, value, error)


def write_run(run_dir: Path, plan: Plan) -> dict[str, int]:
    """Write the run and return ``{anomaly: count}`` planted (only kinds with count > 0)."""
    rng = random.Random(plan.seed)
    planted = {kind: count for kind, count in plan.plant if count}
    run_dir.mkdir(parents=True, exist_ok=True)
    incomplete = plan.partitions - 1 if UNSEEN in planted else None
    complete_parts = [p for p in range(plan.partitions) if p != incomplete]
    logs: dict[int, list[tuple[str | None, Any]]] = {p: [] for p in range(plan.partitions)}
    next_value = iter(range(1000, 10**9))
    sends: list[tuple[int, dict[str, Any], str]] = []  # (partition, value dict, outcome)

    def send(p: int, outcome: str, in_log: bool, offset: int | None = None) -> int:
        value = next(next_value)
        key = f"k{value % 5}"
        real = len(logs[p])
        if in_log:
            logs[p].append((key, value))
        sends.append(
            (
                p,
                {"partition": p, "key": key, "value": value, "offset": real if offset is None else offset},
                outcome,
            )
        )
        return value

    for p in range(plan.partitions):
        for i in range(plan.values_per_partition):
            send(p, "ok", True)
            if i % 5 == 2:
                send(p, "fail", False)  # a definite failure that did not take effect: clean
            if i % 7 == 3:
                send(p, "info", rng.random() < 0.5)  # indeterminate either way: clean
    targets = complete_parts
    for _ in range(planted.get(DUPLICATE, 0)):
        p = rng.choice(targets)
        value = send(p, "ok", True)
        logs[p].append(logs[p][-1])
        assert logs[p][-1][1] == value
    claimed_positions: set[tuple[int, int]] = set()
    for _ in range(planted.get(INCONSISTENT_OFFSETS, 0)):
        p = rng.choice(targets)
        claimed = rng.choice([o for o in range(plan.values_per_partition) if (p, o) not in claimed_positions])
        claimed_positions.add((p, claimed))
        send(p, "ok", True, offset=claimed)
    for _ in range(planted.get(ABORTED_READ, 0)):
        send(rng.choice(targets), "fail", True)
    for i in range(planted.get(UNEXPECTED, 0)):
        p = rng.choice(targets)
        logs[p].append((None, f"garbage-{i}") if i % 2 else ("k0", next(next_value)))
    if incomplete is not None:
        for _ in range(planted[UNSEEN]):
            send(incomplete, "ok", True)
    tail = {p: len(logs[p]) for p in range(plan.partitions)}
    for _ in range(planted.get(LOST_WRITE, 0)):
        p = rng.choice(targets)
        send(p, "ok", False, offset=tail[p])
        tail[p] += 1
    lost_reads: list[tuple[int, int, int]] = []
    for _ in range(planted.get(LOST_READ, 0)):
        p = rng.choice(targets)
        lost_reads.append((p, tail[p], send(p, "info", False)))
        tail[p] += 1

    # Consumer reading sequences: offsets each partition's consumer reads, in order.
    unseen_suffix = planted.get(UNSEEN, 0)
    readable = {p: len(logs[p]) - (unseen_suffix if p == incomplete else 0) for p in range(plan.partitions)}
    sequences = {
        p: list(range(rng.randint(min(8, readable[p]), readable[p]))) for p in range(plan.partitions)
    }
    for _ in range(planted.get(POLL_SKIP, 0)):
        p = rng.choice(
            [q for q in complete_parts if len(sequences[q]) >= 3 + planted.get(POLL_SKIP, 0)] or [None]
        )  # type: ignore[list-item]
        assert p is not None, "plan too small to plant poll-skip"
        middle = [
            i for i in range(1, len(sequences[p]) - 1) if sequences[p][i + 1] - sequences[p][i - 1] == 2
        ]
        del sequences[p][rng.choice(middle)]
    for p in (
        rng.sample(complete_parts, planted.get(NONMONOTONIC_POLL, 0)) if NONMONOTONIC_POLL in planted else []
    ):
        assert len(sequences[p]) >= 2, "plan too small to plant nonmonotonic-poll"
        sequences[p].append(sequences[p][-2])

    with HistoryWriter(run_dir / "history.jsonl") as writer:
        rec = _Recorder(writer)
        rec.pair("nemesis", "kill", {"nodes": ["n2"]}, "info", {"nodes": ["n2"]})
        for number, (_, value, outcome) in enumerate(sends):
            process = number % 3
            invoke = {k: value[k] for k in ("partition", "key", "value")}
            if outcome == "ok":
                rec.pair(process, "send", invoke, "ok", value)
            elif outcome == "fail":
                rec.pair(process, "send", invoke, "fail", None, error="NOT_ENOUGH_REPLICAS")
            else:
                rec.pair(process, "send", invoke, "info", invoke, error="REQUEST_TIMED_OUT")
        rec.pair("nemesis", "start", {"nodes": ["n2"]}, "info", {"nodes": ["n2"]})
        cursors = dict.fromkeys(sequences, 0)
        while any(cursors[p] < len(sequences[p]) for p in sequences):
            records = []
            for p in sorted(sequences):
                for offset in sequences[p][cursors[p] : cursors[p] + rng.randint(1, 3)]:
                    key, value = logs[p][offset]
                    records.append({"partition": p, "offset": offset, "key": key, "value": value})
                    cursors[p] += 1
            rec.pair(10, "poll", None, "ok", records)
        for number, (p, offset, value) in enumerate(lost_reads):
            record = {"partition": p, "offset": offset, "key": f"k{value % 5}", "value": value}
            rec.pair(20 + number, "poll", None, "ok", [record])
        for p in range(plan.partitions):
            upto = readable[p]
            chunks = [list(range(i, min(i + 7, upto))) for i in range(0, upto, 7)] or [[]]
            for number, chunk in enumerate(chunks):
                records = [{"offset": o, "key": logs[p][o][0], "value": logs[p][o][1]} for o in chunk]
                done = p != incomplete and number == len(chunks) - 1
                value = {"partition": p, "records": records, "end_offset": len(logs[p]), "complete": done}
                rec.pair(30 + p, "drain", {"partition": p}, "ok", value)

    divergent: set[tuple[int, int]] = set()
    for _ in range(planted.get(REPLICA_DIVERGENCE, 0)):
        choices = [
            (p, o) for p in range(plan.partitions) for o in range(len(logs[p])) if (p, o) not in divergent
        ]
        divergent.add(rng.choice(choices))
    for node in NODES:
        lines = []
        for p in range(plan.partitions):
            for offset, (key, value) in enumerate(logs[p]):
                shown = f"diverged-{p}-{offset}" if node == "n3" and (p, offset) in divergent else str(value)
                lines.append(
                    {
                        "type": "record",
                        "topic": "queue",
                        "partition": p,
                        "offset": offset,
                        "leader_epoch": 1,
                        "key": key,
                        "value": shown,
                    }
                )
            if plan.other_topic:
                lines.append(
                    {
                        "type": "record",
                        "topic": "__other",
                        "partition": p,
                        "offset": 0,
                        "leader_epoch": 0,
                        "key": None,
                        "value": "x",
                    }
                )
            n = len(logs[p])
            lines.append(
                {
                    "type": "partition",
                    "topic": "queue",
                    "partition": p,
                    "high_watermark": n,
                    "log_end_offset": n,
                    "log_start_offset": 0,
                    "epochs": [[0, 0], [1, 1]],
                }
            )
        (run_dir / "nodes" / node).mkdir(parents=True, exist_ok=True)
        (run_dir / "nodes" / node / "dump.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines)
        )

    spec = {
        "schema_version": 1,
        "name": f"synthetic-{plan.seed}",
        "topic": "queue",
        "workload": {
            "name": "queue",
            "partitions": plan.partitions,
            "acks": plan.acks,
            "client": "kafka-python",
        },
        "broker_config": dict(plan.broker_config),
        "nemesis": {"faults": list(plan.faults)},
        "scenario": None,
        "nodes": list(NODES),
    }
    (run_dir / "test.json").write_text(json.dumps(spec, indent=2))
    return planted
