"""Synthetic stored runs with planted anomalies, for the checker's soundness and parity tests.

:func:`write_run` writes a complete run directory (``test.json``, ``history.jsonl`` through
the real :class:`testbed.record.history.HistoryWriter`, one ``nodes/<node>/dump.jsonl`` per replica
in the broker's dump format) from a :class:`Plan`, and returns the anomaly counts that the
checker must report -- no more, no fewer.  Each planted anomaly is built so that it causes
exactly one anomaly of its kind and nothing else (e.g. a lost write's ack points past the
end of the final log, so no other value shares its offset), except where the definitions
make one imply another (:data:`COMPANIONS`): every nonmonotonic-send is a realtime-order,
every nonmonotonic-poll a stale-read.

The clock advances 1 us per op, so no partition ever waits long -- unless a *clock jump* is
planted (:attr:`Plan.jump`): :data:`JUMP_SECONDS` pass in the middle of the sends, inside a pause
of every node.  An announced pause is a fault window, and nothing stalls; an unannounced one
(and planting ``stalled``) leaves every partition without progress for that long: each one is
stalled once (checker.definitions, liveness).  With a jump, the history's first kill is healed
before the sends, so that its window does not cover the send period.

The clean history is sequential (each send invoked after the previous one completed), so
ack offsets grow with time in every partition.  A send planted with a claimed offset
(inconsistent-offsets) is therefore invoked at the start of the history, by a process of its
own: concurrent with everything, it breaks no order.  Order anomalies are planted by
processes of their own too (:func:`_plant_order`), so that none touches another's sequence.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checker.definitions import (
    ABORTED_READ,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    LOST_READ,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    ORDER_CHECKS,
    POLL_SKIP,
    REALTIME_ORDER,
    REPLICA_DIVERGENCE,
    STALE_READ,
    STALLED,
    UNEXPECTED,
    UNSEEN,
)
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

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
    INT_POLL_SKIP,
    INT_NONMONOTONIC_POLL,
    STALE_READ,
    NONMONOTONIC_SEND,
    REALTIME_ORDER,
    UNSEEN,
    STALLED,
)
NODES = ("n1", "n2", "n3")
COMPANIONS = {NONMONOTONIC_SEND: {REALTIME_ORDER: 1}, NONMONOTONIC_POLL: {STALE_READ: 1}}
"""What one planted anomaly of a kind brings with it, by definition (see ``checker.definitions``)."""


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
    jump: str | None = None
    """A clock jump inside a pause of every node: ``announced`` or ``unannounced`` (planting
    ``stalled`` makes it unannounced); None: none."""


JUMP_SECONDS = 30
"""How far the clock jumps (well above ``checker.definitions.DEFAULT_STALL_THRESHOLD_S``)."""


class _Recorder:
    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.index = 0
        self.shift = 0
        """Nanoseconds the clock has jumped so far."""

    def op(self, process: int | str, type_: str, f: str, value: Any = None, error: str | None = None) -> None:
        time = self.index * 1000 + self.shift
        self.writer.append(Op(self.index, time, process, type_, f, value, error))  # type: ignore[arg-type]
        self.index += 1

    def jump(self, announced: bool) -> None:
        """A pause of every node, :data:`JUMP_SECONDS` long (see the module docstring)."""
        value: dict[str, Any] = {"nodes": list(NODES), **({} if announced else {"announced": False})}
        self.pair("nemesis", "pause", value, "ok", value)
        self.shift += JUMP_SECONDS * 1_000_000_000
        self.pair("nemesis", "resume", value, "ok", value)

    def pair(
        self, process: int | str, f: str, invoke: Any, type_: str, value: Any, error: str | None = None
    ) -> None:
        self.op(process, "invoke", f, invoke)
        self.op(process, type_, f, value, error)


@dataclasses.dataclass
class _Send:
    partition: int
    value: dict[str, Any]
    outcome: str
    process: int | None = None
    """None: one of the three regular producers, by position."""
    early: bool = False
    """Invoked at the start of the history (concurrent with every other op)."""


@dataclasses.dataclass
class _Reads:
    """Extra reads planted by processes of their own: poll ops, and drain chunks after a drain."""

    polls: list[tuple[int, list[tuple[int, int]]]] = dataclasses.field(default_factory=list)
    """(process, [(partition, offset), ...]) per poll op, in history order."""
    drains: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    """partition -> offsets its drain process reads again, one extra chunk each."""


def _plant_order(
    planted: dict[str, int],
    rng: random.Random,
    targets: list[int],
    logs: dict[int, list[tuple[str | None, Any]]],
    send: Callable[..., int],
) -> tuple[_Reads, Counter[str]]:
    """Plant the order anomalies; return the extra reads and every anomaly they cause."""
    expected: Counter[str] = Counter()
    # Two acknowledged sends whose offsets contradict their order: the earlier-acknowledged one
    # holds the higher offset.  The log itself stays consistent (each value at its own offset).
    for kind, first_process in ((NONMONOTONIC_SEND, 200), (REALTIME_ORDER, 300)):
        for number in range(planted.get(kind, 0)):
            p = rng.choice(targets)
            low, high = len(logs[p]), len(logs[p]) + 1
            earlier = first_process + 2 * number
            later = earlier if kind == NONMONOTONIC_SEND else earlier + 1
            logs[p].append(("placeholder", None))
            logs[p].append(("placeholder", None))
            high_value = send(p, "ok", False, offset=high, process=earlier)
            low_value = send(p, "ok", False, offset=low, process=later)
            logs[p][low] = (f"k{low_value % 5}", low_value)
            logs[p][high] = (f"k{high_value % 5}", high_value)
            expected[kind] += 1
            expected.update(COMPANIONS.get(kind, {}))
    reads = _Reads()
    process = iter(range(50, 100))  # below the send plants' own processes (100 and up)
    shapes: dict[str, list[list[int]]] = {
        POLL_SKIP: [[0, 1], [3]],
        INT_POLL_SKIP: [[0, 2]],
        NONMONOTONIC_POLL: [[1], [0]],
        INT_NONMONOTONIC_POLL: [[1, 0]],
    }
    for kind in (*shapes, STALE_READ):
        for number in range(planted.get(kind, 0)):
            p = rng.choice(targets)
            start = rng.randrange(len(logs[p]) - 3)
            if kind == STALE_READ and number % 2 == 0:
                reads.drains.setdefault(p, []).append(start)  # the drain reads an offset again
                expected[STALE_READ] += 1
                continue
            if kind == STALE_READ:  # a consumer reset: one step back, then forward below its position
                ops, caused = [[0, 1, 2], [0], [1]], {STALE_READ: 2, NONMONOTONIC_POLL: 1}
            else:
                ops, caused = shapes[kind], {kind: 1, **COMPANIONS.get(kind, {})}
            reader = next(process)
            reads.polls.extend((reader, [(p, start + o) for o in op]) for op in ops)
            expected.update(caused)
    return reads, expected


def write_run(run_dir: Path, plan: Plan) -> dict[str, int]:
    """Write the run and return ``{anomaly: count}`` expected (only kinds with count > 0)."""
    rng = random.Random(plan.seed)
    planted = {kind: count for kind, count in plan.plant if count}
    jump = "unannounced" if STALLED in planted else plan.jump
    if STALLED in planted:  # a planted stall stalls every partition once
        planted[STALLED] = plan.partitions
    # The order anomalies are counted where they are planted, with what they cause.
    expected: Counter[str] = Counter({kind: n for kind, n in planted.items() if kind not in ORDER_CHECKS})
    run_dir.mkdir(parents=True, exist_ok=True)
    incomplete = plan.partitions - 1 if UNSEEN in planted else None
    complete_parts = [p for p in range(plan.partitions) if p != incomplete]
    logs: dict[int, list[tuple[str | None, Any]]] = {p: [] for p in range(plan.partitions)}
    next_value = iter(range(1000, 10**9))
    sends: list[_Send] = []

    def send(
        p: int,
        outcome: str,
        in_log: bool,
        offset: int | None = None,
        process: int | None = None,
        early: bool = False,
    ) -> int:
        value = next(next_value)
        key = f"k{value % 5}"
        real = len(logs[p])
        if in_log:
            logs[p].append((key, value))
        at = real if offset is None else offset
        sends.append(
            _Send(p, {"partition": p, "key": key, "value": value, "offset": at}, outcome, process, early)
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
    for number in range(planted.get(INCONSISTENT_OFFSETS, 0)):
        p = rng.choice(targets)
        claimed = rng.choice([o for o in range(plan.values_per_partition) if (p, o) not in claimed_positions])
        claimed_positions.add((p, claimed))
        send(p, "ok", True, offset=claimed, process=100 + number, early=True)
    for _ in range(planted.get(ABORTED_READ, 0)):
        send(rng.choice(targets), "fail", True)
    for i in range(planted.get(UNEXPECTED, 0)):
        p = rng.choice(targets)
        logs[p].append((None, f"garbage-{i}") if i % 2 else ("k0", next(next_value)))
    extra_reads, caused = _plant_order(planted, rng, targets, logs, send)
    expected.update(caused)
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

    # The consumer reads a prefix of each partition, in order.
    unseen_suffix = planted.get(UNSEEN, 0)
    readable = {p: len(logs[p]) - (unseen_suffix if p == incomplete else 0) for p in range(plan.partitions)}
    sequences = {
        p: list(range(rng.randint(min(8, readable[p]), readable[p]))) for p in range(plan.partitions)
    }

    def record(p: int, offset: int, in_poll: bool = True) -> dict[str, Any]:
        key, value = logs[p][offset]
        return {**({"partition": p} if in_poll else {}), "offset": offset, "key": key, "value": value}

    with HistoryWriter(run_dir / "history.jsonl") as writer:
        rec = _Recorder(writer)
        rec.pair("nemesis", "kill", {"nodes": ["n2"]}, "info", {"nodes": ["n2"]})
        if jump is not None:
            rec.pair("nemesis", "start", {"nodes": ["n2"]}, "info", {"nodes": ["n2"]})
        for item in sends:
            if item.early and item.process is not None:
                invoke = {k: item.value[k] for k in ("partition", "key", "value")}
                rec.op(item.process, "invoke", "send", invoke)
        producers = [0, 1, 2]  # the three regular producers' current process ids
        fresh = iter(range(600, 10**6))
        for number, item in enumerate(sends):
            if jump is not None and number == len(sends) // 2:
                rec.jump(announced=jump == "announced")
            process = producers[number % 3] if item.process is None else item.process
            if item.process is None and item.outcome == "info":  # an info retires the process id
                producers[number % 3] = next(fresh)
            invoke = {k: item.value[k] for k in ("partition", "key", "value")}
            if not item.early:
                rec.op(process, "invoke", "send", invoke)
            if item.outcome == "ok":
                rec.op(process, "ok", "send", item.value)
            elif item.outcome == "fail":
                rec.op(process, "fail", "send", None, error="NOT_ENOUGH_REPLICAS")
            else:
                rec.op(process, "info", "send", invoke, error="REQUEST_TIMED_OUT")
        if jump is None:
            rec.pair("nemesis", "start", {"nodes": ["n2"]}, "info", {"nodes": ["n2"]})
        cursors = dict.fromkeys(sequences, 0)
        while any(cursors[p] < len(sequences[p]) for p in sequences):
            records = []
            for p in sorted(sequences):
                for offset in sequences[p][cursors[p] : cursors[p] + rng.randint(1, 3)]:
                    records.append(record(p, offset))
                    cursors[p] += 1
            rec.pair(10, "poll", None, "ok", records)
        for process, op in extra_reads.polls:
            rec.pair(process, "poll", None, "ok", [record(p, offset) for p, offset in op])
        for number, (p, offset, value) in enumerate(lost_reads):
            lost = {"partition": p, "offset": offset, "key": f"k{value % 5}", "value": value}
            rec.pair(20 + number, "poll", None, "ok", [lost])
        for p in range(plan.partitions):
            upto = readable[p]
            chunks = [list(range(i, min(i + 7, upto))) for i in range(0, upto, 7)] or [[]]
            for number, chunk in enumerate(chunks):
                done = p != incomplete and number == len(chunks) - 1
                drained = [record(p, o, in_poll=False) for o in chunk]
                chunk_value = {
                    "partition": p,
                    "records": drained,
                    "end_offset": len(logs[p]),
                    "complete": done,
                }
                rec.pair(30 + p, "drain", {"partition": p}, "ok", chunk_value)
            for offset in extra_reads.drains.get(p, []):  # read again after the drain reached the end
                again = [record(p, offset, in_poll=False)]
                chunk_value = {
                    "partition": p,
                    "records": again,
                    "end_offset": len(logs[p]),
                    "complete": False,
                }
                rec.pair(30 + p, "drain", {"partition": p}, "ok", chunk_value)

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
    return {kind: count for kind, count in sorted(expected.items()) if count}
