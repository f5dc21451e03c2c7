"""Synthetic ``--consume-via subscribe`` runs with planted consumer-group anomalies.

:func:`write_group_run` writes a run directory (``test.json`` and ``history.jsonl``, through
the real :class:`testbed.record.history.HistoryWriter`; no replica dumps) from a
:class:`GroupPlan` and returns the anomaly counts the checker must report -- no more, no fewer.

The clean history is shaped as ``docs/consumer-groups.md`` describes a group's: a producer
acknowledges every record; then generations 1..G, each assigning every partition to one of
the consumers (rotating, so partitions move at every rebalance; a consumer may get none), each
assignment a fresh process that resumes at the last ``ok`` commit, polls a few records at a
time and commits its positions after every poll -- synchronously, or through a committer
process naming it in ``polled_by`` -- then revokes.  Before the last generation, commits may
end ``fail`` or ``info`` (the next generation then re-reads the uncommitted window, which is
legitimate), and a synchronous ``info`` hands the assignment to a takeover process that
continues it.  The last generation commits ``ok`` only and reaches the end of every
partition; a final drain reads everything.

Each planted kind gets a partition of its own, after the clean ones, so that no plant touches
another's evidence (the clean generations read those partitions too):

* group-skip -- ``k + 1`` more records, and a member of a new generation resumes at the last:
  ``k`` positions nobody read;
* group-redelivery -- ``k`` members of new generations each re-read one committed record;
* commit-regression -- a committer commits ``k`` lower offsets after the last generation's;
* committed-beyond-read -- a committer commits ``k`` offsets past what its reader read;
* generation-regression -- consumer 0, which held every generation, is assigned ``k`` times
  more, each time an older generation (it reads and commits nothing, so no other check sees it).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from checker.definitions import (
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION,
    GROUP_REDELIVERY,
    GROUP_SKIP,
)
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

GROUP_PLANTABLE = (
    GROUP_SKIP,
    GROUP_REDELIVERY,
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION,
)


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    seed: int
    partitions: int = 2
    """Clean partitions; each planted kind adds one."""
    records: int = 12
    consumers: int = 2
    generations: int = 3
    commit: str = "sync"
    plant: tuple[tuple[str, int], ...] = ()
    broker_config: tuple[tuple[str, str], ...] = ()
    acks: str = "all"
    faults: tuple[str, ...] = ("kill",)


class _History:
    """Ops numbered in the order they are written; fresh process ids on demand."""

    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.index = 0
        self._fresh: Iterator[int] = iter(range(100, 10**6))

    def fresh(self) -> int:
        return next(self._fresh)

    def op(self, process: int, type_: str, f: str, value: Any = None) -> None:
        self.writer.append(Op(self.index, self.index * 1_000_000, process, type_, f, value))  # type: ignore[arg-type]
        self.index += 1

    def pair(self, process: int, f: str, value: Any, outcome: str = "ok") -> None:
        self.op(process, "invoke", f, value if f != "poll" else None)
        self.op(process, outcome, f, value)


def _record(partition: int, offset: int) -> dict[str, Any]:
    return {
        "partition": partition,
        "offset": offset,
        "key": f"k{partition}",
        "value": _value(partition, offset),
    }


def _value(partition: int, offset: int) -> int:
    return 10_000 * (partition + 1) + offset


class _Member:
    """One consumer's assignment in one generation: its process (and takeovers), reads and commits."""

    def __init__(self, history: _History, consumer: int, generation: int, partitions: list[int]) -> None:
        self.history, self.consumer, self.generation = history, consumer, generation
        self.partitions = partitions
        self.process = history.fresh()
        self.positions: dict[int, int] = {}
        history.pair(self.process, "assign", self._assign_value())

    def _assign_value(self, takeover: int | None = None) -> dict[str, Any]:
        value: dict[str, Any] = {
            "partitions": self.partitions,
            "generation": self.generation,
            "member_id": f"member-{self.consumer}",
            "consumer": self.consumer,
        }
        return value if takeover is None else {**value, "takeover": takeover}

    def poll(self, records: list[tuple[int, int]]) -> None:
        self.history.pair(self.process, "poll", [_record(p, o) for p, o in records])
        for p, o in records:
            self.positions[p] = o + 1

    def commit(self, outcome: str, committer: int | None) -> bool:
        """Commit every position read; True if the commit ended ``info`` (its process is then over)."""
        value = {
            "offsets": {str(p): o for p, o in sorted(self.positions.items())},
            "generation": self.generation,
            "polled_by": self.process,
        }
        self.history.pair(self.process if committer is None else committer, "commit", value, outcome)
        if outcome == "info" and committer is None:  # a synchronous info: a takeover continues
            previous, self.process = self.process, self.history.fresh()
            self.history.pair(self.process, "assign", self._assign_value(takeover=previous))
        return outcome == "info"

    def revoke(self) -> None:
        value = {"partitions": self.partitions, "lost": False, "generation": self.generation}
        self.history.pair(self.process, "revoke", {**value, "consumer": self.consumer})


def _generation(
    history: _History,
    rng: random.Random,
    plan: GroupPlan,
    number: int,
    state: tuple[dict[int, int], dict[int, int], dict[int, int]],
) -> None:
    """One clean generation: every partition read on from its committed offset.

    ``state``: the offsets the ``ok`` commits set, each consumer's committer process (async),
    and the process that read each partition last -- all updated."""
    committed, committers, readers = state
    last = number == plan.generations
    target = {
        p: plan.records if last else max(committed[p], round(plan.records * number / plan.generations))
        for p in committed
    }
    for consumer in range(plan.consumers):
        mine = [p for p in committed if (p + number) % plan.consumers == consumer]
        member = _Member(history, consumer, number, mine)
        cursor = {p: committed[p] for p in mine}
        while any(cursor[p] < target[p] for p in mine):
            batch = []
            for p in mine:
                take = min(rng.randint(1, 3), target[p] - cursor[p])
                batch += [(p, o) for o in range(cursor[p], cursor[p] + take)]
                cursor[p] += take
            member.poll(batch)
            readers.update((p, member.process) for p, _ in batch)
            outcome = "ok" if last else rng.choice(["ok", "ok", "ok", "fail", "info"])
            committer = None
            if plan.commit == "async":
                committer = committers.setdefault(consumer, history.fresh())
            if member.commit(outcome, committer) and committer is not None:
                committers[consumer] = history.fresh()  # a committer whose commit ended info is over
            if outcome == "ok":
                committed.update(member.positions)
        member.revoke()


def write_group_run(run_dir: Path, plan: GroupPlan) -> dict[str, int]:
    """Write the run and return ``{anomaly: count}`` expected (only kinds with count > 0)."""
    rng = random.Random(plan.seed)
    planted = {kind: count for kind, count in plan.plant if count}
    if GENERATION_REGRESSION in planted and plan.generations < 2:
        raise ValueError("a generation regression needs two clean generations: one to fall back to")
    kinds = [kind for kind in GROUP_PLANTABLE if kind in planted]
    own = {kind: plan.partitions + number for number, kind in enumerate(kinds)}
    partitions = plan.partitions + len(kinds)
    ends = dict.fromkeys(range(partitions), plan.records)
    if GROUP_SKIP in planted:
        ends[own[GROUP_SKIP]] += planted[GROUP_SKIP] + 1
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        history = _History(writer)
        for p in range(partitions):
            for offset in range(ends[p]):
                sent = {"partition": p, "key": f"k{p}", "value": _value(p, offset)}
                history.op(0, "invoke", "send", sent)
                history.op(0, "ok", "send", {**sent, "offset": offset})
        committed = dict.fromkeys(range(partitions), 0)
        committers: dict[int, int] = {}
        finals: dict[int, int] = {}  # the process that read each partition last (last generation)
        for number in range(1, plan.generations + 1):
            _generation(history, rng, plan, number, (committed, committers, finals))
        generation = plan.generations
        if GROUP_SKIP in planted:
            generation += 1
            skipper = _Member(history, plan.consumers, generation, [own[GROUP_SKIP]])
            skipper.poll([(own[GROUP_SKIP], ends[own[GROUP_SKIP]] - 1)])
        for _ in range(planted.get(GROUP_REDELIVERY, 0)):
            generation += 1
            again = _Member(history, plan.consumers, generation, [own[GROUP_REDELIVERY]])
            again.poll([(own[GROUP_REDELIVERY], rng.randrange(plan.records - 1))])
        for kind, step in ((COMMIT_REGRESSION, -1), (COMMITTED_BEYOND_READ, +1)):
            if kind not in planted:
                continue
            p, committer = own[kind], history.fresh()
            for number in range(planted[kind]):
                offset = plan.records - 1 - number if step < 0 else plan.records + 1 + number
                value = {
                    "offsets": {str(p): offset},
                    "generation": plan.generations,
                    "polled_by": finals.get(p),
                }
                history.pair(committer, "commit", value)
        for number in range(planted.get(GENERATION_REGRESSION, 0)):
            back = _Member(history, 0, 1 + number % (plan.generations - 1), [])
            back.revoke()
        for p in range(partitions):
            drained = [{"offset": o, "key": f"k{p}", "value": _value(p, o)} for o in range(ends[p])]
            chunk = {"partition": p, "records": drained, "end_offset": ends[p], "complete": True}
            drainer = history.fresh()
            history.op(drainer, "invoke", "drain", {"partition": p})
            history.op(drainer, "ok", "drain", chunk)
    spec = {
        "schema_version": 1,
        "name": f"synthetic-group-{plan.seed}",
        "topic": "queue",
        "workload": {
            "name": "queue",
            "partitions": partitions,
            "acks": plan.acks,
            "client": "kafka-python",
            "consume_via": "subscribe",
            "commit": plan.commit,
            "group": "tidemark-000000000000",
        },
        "broker_config": dict(plan.broker_config),
        "nemesis": {"faults": list(plan.faults)},
        "scenario": None,
        "nodes": [],
    }
    (run_dir / "test.json").write_text(json.dumps(spec, indent=2))
    return {kind: count for kind, count in sorted(planted.items()) if count}
