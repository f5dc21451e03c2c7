"""Synthetic runs with event logs: planted invariant violations, and Kafka's legitimate behaviour.

:func:`write_invariant_run` writes a clean run (:func:`tests.checker.synthetic.write_run`: history,
dumps, ``test.json`` with ``event.log.enable=true``) and the event logs of three brokers and a
controller, in the writer's line format, that tell a consistent story per partition: partition 0
is always the plain base (topic created, leader n1 in epoch 0, every write committed and
learned by both followers, clean shutdowns), and every planted violation or legitimate episode
gets a partition of its own, played after its base.  It returns the anomaly counts the checker
must report -- the white-box ones planted, plus what a plant brings by definition
(:data:`COMPANIONS`) -- no more, no fewer.

Legitimate episodes (:data:`LEGIT`), each silent by the definitions and each a false alarm of a
naive one:

* ``stale-new-leader`` -- a complete new leader whose HW starts below the old leader's and catches up;
* ``restart-lower-checkpoint`` -- a follower restarts with a checkpointed HW below what it had;
* ``deposed-leader-tail`` -- a deposed leader cuts its uncommitted tail after the new leader
  wrote and committed other records at those offsets (a truncation below the exposed HW);
* ``zombie-exposure`` -- a deposed leader that has not heard yet advertises its old, lower HW;
* ``uncommitted-tail-hw-mode`` -- high-watermark truncation of records that were never committed.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from checker.definitions import (
    DIVERGENT_TAIL,
    EPOCH_REUSE,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    ISR_DIVERGENCE,
    METADATA_ROLLBACK,
    MIN_ISR_VIOLATION,
    TRUNCATED_COMMITTED,
)
from testbed.record.rundir import BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE
from tests.checker.synthetic import Plan, write_run

PLANTABLE = (
    TRUNCATED_COMMITTED,
    INCOMPLETE_LEADER,
    HW_REGRESSION,
    MIN_ISR_VIOLATION,
    ISR_DIVERGENCE,
    EPOCH_REUSE,
    METADATA_ROLLBACK,
)
LEGIT = (
    "stale-new-leader",
    "restart-lower-checkpoint",
    "deposed-leader-tail",
    "zombie-exposure",
    "uncommitted-tail-hw-mode",
)
COMPANIONS = {HW_REGRESSION: {INCOMPLETE_LEADER: 1}, EPOCH_REUSE: {METADATA_ROLLBACK: 1}}
"""An established HW below the old one belongs to a leader that was incomplete when elected; the
planted epoch reuse follows a controller restart that lost the first election."""
BROKERS = (1, 2, 3)
CONTROLLER_ID = 3000
TOPIC = "queue"
FORMAT_FIELDS = {"format": "tidemark-broker-events", "schema_version": 1}


@dataclasses.dataclass(frozen=True)
class InvariantPlan:
    seed: int
    plant: tuple[tuple[str, int], ...] = ()
    """(kind, count): instances, one partition each; isr-divergence: divergent positions in one."""
    legit: tuple[tuple[str, int], ...] = ()
    """(episode of :data:`LEGIT`, count), one partition each."""
    values: int = 5
    broker_config: tuple[tuple[str, str], ...] = (("event.log.enable", "true"),)


class World:
    """Event logs being written: one global clock (ts += 1 us per event), one seq per log."""

    def __init__(self) -> None:
        self.clock = 1_795_000_000_000_000_000
        self.logs: dict[str, list[dict[str, Any]]] = {
            name: [] for name in (*(f"n{b}" for b in BROKERS), "controller")
        }

    def emit(self, name: str, kind: str, **fields: Any) -> None:
        self.clock += 1000
        log = self.logs[name]
        node = CONTROLLER_ID if name == "controller" else int(name[1:])
        log.append({"ts": self.clock, "node": node, "seq": len(log), "kind": kind, **fields})

    def write(self, run_dir: Path) -> None:
        for name, events in self.logs.items():
            file_name = CONTROLLER_EVENTS_FILE if name == "controller" else BROKER_EVENTS_FILE
            directory = run_dir / "nodes" / name
            directory.mkdir(parents=True, exist_ok=True)
            text = "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in events)
            (directory / file_name).write_text(text, encoding="utf-8")


class Partition:
    """One partition's story; methods emit the events of one step each."""

    def __init__(self, world: World, index: int, end: int) -> None:
        self.world, self.index, self.end = world, index, end
        self.leader, self.epoch, self.isr = 1, 0, [1, 2, 3]
        self.leo = dict.fromkeys(BROKERS, 0)
        self.hw = dict.fromkeys(BROKERS, 0)

    def emit(self, broker: int | str, kind: str, **fields: Any) -> None:
        name = broker if isinstance(broker, str) else f"n{broker}"
        self.world.emit(name, kind, topic=TOPIC, partition=self.index, **fields)

    def open(self, broker: int, leo: int, hw: int, epochs: list[list[int]], dropped: int = 0) -> None:
        self.leo[broker], self.hw[broker] = leo, hw
        self.emit(
            broker,
            "replica-opened",
            leo=leo,
            hw=hw,
            checkpointed_hw=hw,
            log_start=0,
            epochs=epochs,
            dropped_bytes=dropped,
        )

    def lead(self, broker: int, epoch: int, hw: int | None = None, isr: list[int] | None = None) -> None:
        self.leader, self.epoch, self.isr = broker, epoch, isr or self.isr
        if hw is not None:
            self.hw[broker] = hw
        self.emit(
            broker,
            "become-leader",
            epoch=epoch,
            partition_epoch=epoch,
            replicas=list(BROKERS),
            isr=self.isr,
            leo=self.leo[broker],
            hw=self.hw[broker],
            epoch_start=self.leo[broker],
            previous_role="follower",
            previous_epoch=epoch - 1,
        )

    def follow(self, broker: int, previous: int = -1) -> None:
        self.emit(
            broker,
            "become-follower",
            leader=self.leader,
            epoch=self.epoch,
            partition_epoch=self.epoch,
            replicas=list(BROKERS),
            isr=self.isr,
            leo=self.leo[broker],
            hw=self.hw[broker],
            previous_role="none" if previous < 0 else "follower",
            previous_epoch=previous,
        )

    def elect(self, new: int, how: str = "isr", isr: list[int] | None = None) -> None:
        self.world.emit(
            "controller",
            "election",
            metadata_version=0,
            cause="broker-fenced",
            broker=self.leader,
            topic=TOPIC,
            partition=self.index,
            old_leader=self.leader,
            new_leader=new,
            old_epoch=self.epoch,
            new_epoch=self.epoch + 1,
            partition_epoch=self.epoch + 1,
            replicas=list(BROKERS),
            old_isr=self.isr,
            new_isr=isr or self.isr,
            old_elr=[],
            new_elr=[],
            alive=list(BROKERS),
            how=how,
        )

    def truncate(self, broker: int, target: int, reason: str, queried: int | None = None) -> None:
        old_leo, old_hw = self.leo[broker], self.hw[broker]
        self.leo[broker] = min(old_leo, target)
        self.hw[broker] = min(old_hw, self.leo[broker])
        details = (
            {}
            if queried is None
            else {
                "queried_epoch": queried,
                "answer_epoch": queried,
                "answer_end_offset": target,
                "complete": True,
            }
        )
        self.emit(
            broker,
            "truncate",
            role="follower",
            epoch=self.epoch,
            leader=self.leader,
            reason=reason,
            target=target,
            old_leo=old_leo,
            new_leo=self.leo[broker],
            old_hw=old_hw,
            new_hw=self.hw[broker],
            **details,
        )

    def leader_hw(
        self, new: int, isr: list[int] | None = None, min_isr: int = 2, broker: int | None = None
    ) -> None:
        broker = self.leader if broker is None else broker
        old, self.hw[broker] = self.hw[broker], new
        self.leo[broker] = max(self.leo[broker], new)
        self.emit(
            broker,
            "hw",
            role="leader",
            epoch=self.epoch if broker == self.leader else self.epoch - 1,
            old_hw=old,
            new_hw=new,
            leo=self.leo[broker],
            isr=isr or self.isr,
            pending_isr=None,
            min_isr=min_isr,
            epoch_start=0,
        )

    def follower_hw(self, broker: int, new: int) -> None:
        old, self.hw[broker] = self.hw[broker], new
        self.leo[broker] = max(self.leo[broker], new)
        self.emit(
            broker,
            "hw",
            role="follower",
            epoch=self.epoch,
            old_hw=old,
            new_hw=new,
            leo=self.leo[broker],
            leader=self.leader,
            leader_hw=new,
        )

    def write(self, upto: int, isr: list[int] | None = None) -> None:
        """Records up to ``upto`` committed: the leader's HW, then each follower's, one at a time."""
        for offset in range(self.hw[self.leader] + 1, upto + 1):
            self.leo[self.leader] = offset
            for broker in self.isr:
                if broker != self.leader:
                    self.leo[broker] = offset
            self.leader_hw(offset, isr=isr)
            for broker in self.isr:
                if broker != self.leader:
                    self.follower_hw(broker, offset)

    def base(self) -> None:
        for broker in BROKERS:
            self.open(broker, 0, 0, [])
        self.lead(1, 0)
        for broker in (2, 3):
            self.follow(broker)


def _settings() -> dict[str, Any]:
    return {"truncation.mode": "leader-epoch", "min.insync.replicas": 2, "min.insync.replicas.strict": True}


def plant(p: Partition, kind: str, rng: random.Random, count: int = 1) -> None:
    """One violation of ``kind`` on ``p`` (``count``: divergent positions, for isr-divergence)."""
    n = p.end
    if kind in (TRUNCATED_COMMITTED, MIN_ISR_VIOLATION, ISR_DIVERGENCE):
        p.write(n - 1)
        p.write(n, isr=[1] if kind == MIN_ISR_VIOLATION else None)  # the leader alone confirmed in ISR
    if kind == TRUNCATED_COMMITTED:
        if rng.random() < 0.5:  # KIP-101: a restarted follower cuts to its own lagging HW
            p.world.emit(
                "n2", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=False, settings=_settings()
            )
            p.open(2, n, n - 1, [[0, 0]])
            p.follow(2)
            p.truncate(2, n - 1, "high-watermark")
        else:  # a leader answered OFFSET_OUT_OF_RANGE below the committed offset
            p.truncate(3, n - 1, "out-of-range")
    elif kind == EPOCH_REUSE:  # the controller lost its last election in a crash: its epoch again
        p.write(n)
        p.elect(2)  # epoch 0 -> 1 (elect leaves the partition's own epoch as it was)
        p.world.emit(
            "controller", "start", **FORMAT_FIELDS, role="controller", metadata_version=0, settings={}
        )
        p.elect(3)  # epoch 0 -> 1 once more
    elif kind == METADATA_ROLLBACK:  # a fencing published at v7, gone when the controller restarts from v2
        p.write(n)
        p.world.emit("controller", "broker-fenced", metadata_version=7, broker=2, reason="session timed out")
        p.world.emit(
            "controller", "start", **FORMAT_FIELDS, role="controller", metadata_version=2, settings={}
        )
    elif kind in (INCOMPLETE_LEADER, HW_REGRESSION):  # n2 lost its last record to a power loss, then leads
        p.write(n)
        p.world.emit(
            "n2", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=False, settings=_settings()
        )
        p.open(2, n - 1, n - 2, [[0, 0]], dropped=80)
        p.elect(2, how="elr", isr=[2])
        established = kind == HW_REGRESSION
        if established and rng.random() < 0.5:
            p.lead(2, p.epoch + 1, hw=n - 1, isr=[2])  # its HW is its LEO at once: established
        else:
            p.lead(2, p.epoch + 1, isr=[2])
            if established:
                p.leader_hw(n - 1, min_isr=1)


def legit(p: Partition, episode: str) -> None:
    """One legitimate episode on ``p`` (see the module docstring)."""
    n = p.end
    if episode == "stale-new-leader":
        p.write(n)
        p.elect(2)
        p.lead(2, p.epoch + 1, hw=n - 2)
        p.follow(1, previous=p.epoch - 1)
        p.truncate(1, n, "leader-epoch", queried=p.epoch - 1)
        p.leader_hw(n - 1)
        p.leader_hw(n)
    elif episode == "restart-lower-checkpoint":
        p.write(n)
        p.world.emit(
            "n3", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=False, settings=_settings()
        )
        p.open(3, n, n - 3, [[0, 0]])
        p.follow(3)
        p.truncate(3, n, "leader-epoch", queried=0)
        p.follower_hw(3, n)
    elif episode == "deposed-leader-tail":
        p.write(n - 2)
        p.leo[1] = n  # two records appended, never committed
        p.elect(2, isr=[2, 3])
        p.leo[2] = p.leo[3] = n - 2
        p.lead(2, p.epoch + 1, isr=[2, 3])
        p.follow(3, previous=p.epoch - 1)
        p.write(n + 1)  # the new leader writes and commits other records at those offsets
        p.world.emit(
            "n1", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=False, settings=_settings()
        )
        p.open(1, n, n - 2, [[0, 0]])
        p.follow(1)
        p.truncate(1, n - 2, "leader-epoch", queried=0)
        p.follower_hw(1, n + 1)
    elif episode == "zombie-exposure":
        p.write(n - 1)
        p.hw[1] = n - 2  # the leader's own HW lags a step: its last fetch answer is pending
        p.elect(2)
        p.leo[2] = n - 1
        p.lead(2, p.epoch + 1, hw=n - 2)
        p.leader_hw(n - 1)
        p.leader_hw(n, isr=[2, 3])
        p.leader_hw(n - 1, broker=1)  # the zombie answers a stale fetch: its old HW, advertised
        p.follow(1, previous=p.epoch - 1)
        p.truncate(1, n - 1, "leader-epoch", queried=p.epoch - 1)
    elif episode == "uncommitted-tail-hw-mode":
        p.write(n - 1)
        p.leo[3] = n  # fetched a record that was never committed
        p.world.emit(
            "n3", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=False, settings=_settings()
        )
        p.open(3, n, n - 1, [[0, 0]])
        p.follow(3)
        p.truncate(3, n - 1, "high-watermark")
    else:
        raise ValueError(episode)


def _log_ends(run_dir: Path) -> dict[int, int]:
    lines = (run_dir / "nodes" / "n1" / "dump.jsonl").read_text().splitlines()
    parts = [json.loads(line) for line in lines]
    return {
        part["partition"]: part["log_end_offset"]
        for part in parts
        if part["type"] == "partition" and part["topic"] == TOPIC
    }


def _diverge(run_dir: Path, partition: int, offsets: list[int]) -> None:
    """n2's dump holds other records at ``offsets`` and checkpointed a HW no higher than them."""
    path = run_dir / "nodes" / "n2" / "dump.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["topic"] != TOPIC or row["partition"] != partition:
            continue
        if row["type"] == "record" and row["offset"] in offsets:
            row["value"] = f"diverged-{row['offset']}"
        elif row["type"] == "partition":
            row["high_watermark"] = min(offsets)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_invariant_run(run_dir: Path, plan: InvariantPlan) -> dict[str, int]:
    """Write the run (see the module docstring); return ``{anomaly: count}`` expected."""
    rng = random.Random(plan.seed)
    stories = [("base", "", 1)]
    for kind, count in plan.plant:
        if kind == ISR_DIVERGENCE and count:
            stories.append(("plant", kind, count))
        else:
            stories.extend(("plant", kind, 1) for _ in range(count))
    stories.extend(("legit", episode, 1) for episode, count in plan.legit for _ in range(count))
    write_run(
        run_dir,
        Plan(
            seed=plan.seed,
            partitions=len(stories),
            values_per_partition=plan.values,
            broker_config=plan.broker_config,
            other_topic=False,
        ),
    )
    ends = _log_ends(run_dir)
    world = World()
    world.emit("controller", "start", **FORMAT_FIELDS, role="controller", metadata_version=0, settings={})
    for broker in BROKERS:
        world.emit(
            f"n{broker}", "start", **FORMAT_FIELDS, role="broker", clean_shutdown=True, settings=_settings()
        )
    world.emit(
        "controller",
        "topic-created",
        metadata_version=1,
        topic=TOPIC,
        topic_id="t",
        partitions=[
            {"partition": p, "replicas": list(BROKERS), "leader": 1, "epoch": 0, "isr": list(BROKERS)}
            for p in range(len(stories))
        ],
    )
    expected: Counter[str] = Counter()
    partitions = []
    for index, (what, name, count) in enumerate(stories):
        assert ends[index] >= 4, "every story needs a few records"
        p = Partition(world, index, ends[index])
        partitions.append(p)
        p.base()
        if what == "base":
            p.write(p.end)
        elif what == "legit":
            legit(p, name)
        else:
            plant(p, name, rng, count)
            expected[name] += count
            expected.update(COMPANIONS.get(name, {}))
            if name == ISR_DIVERGENCE:
                _diverge(run_dir, index, list(range(ends[index] - count, ends[index])))
                expected[DIVERGENT_TAIL] += count
    for broker in BROKERS:
        shown = [
            {
                "topic": TOPIC,
                "partition": p.index,
                "role": "leader" if p.leader == broker else "follower",
                "epoch": p.epoch,
                "leo": p.leo[broker],
                "hw": p.hw[broker],
            }
            for p in partitions
        ]
        world.emit(f"n{broker}", "shutdown", partitions=shown)
    world.emit("controller", "shutdown", metadata_version=9)
    world.write(run_dir)
    return {kind: n for kind, n in sorted(expected.items()) if n}
