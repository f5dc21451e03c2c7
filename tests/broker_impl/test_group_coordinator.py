"""The coordinator's ownership of ``__consumer_offsets`` partitions, without processes or network.

A real :class:`~broker_impl.partition.Partition` (a real log in a temporary directory) under a
stand-in broker that holds only what the coordinator reads (settings, metadata, partitions).
Checked: a partition being loaded answers COORDINATOR_LOAD_IN_PROGRESS and the load yields to
the event loop; commits and a group's generation are appended to the log; another replica that
opens the same log later rebuilds both, members included; losing leadership answers waiting
requests and later ones with NOT_COORDINATOR; a broker that leads nothing says NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from broker_impl import config, records, wire
from broker_impl.control_records import Marker, build_marker_batch, build_transactional_batch
from broker_impl.group_coordinator import LOAD_BATCHES_PER_STEP, GroupCoordinator
from broker_impl.group_members import JoinOutcome, SyncOutcome
from broker_impl.group_records import OFFSETS_TOPIC, CommittedOffset, OffsetKey, encode_key, encode_value
from broker_impl.group_state import GroupState
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.rules import SAFE_RULES, ReplicationRules
from broker_impl.txn_offsets import TxnOffsets

GROUP = "hello"  # partition 2 of 5 (Java: "hello".hashCode() = 99162322)
INDEX = 2


class StandInBroker:
    """What :class:`GroupCoordinator` uses of a broker, and nothing else."""

    def __init__(self, directory: Path, extra_properties: str = "") -> None:
        self.directory = directory
        self.settings = config.parse_properties(
            "group.initial.rebalance.delay.ms=0\noffsets.commit.timeout.ms=500\n" + extra_properties,
            "test",
            config.BROKER_KEYS,
        )
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.topics: dict[str, Any] = {
            OFFSETS_TOPIC: {"partitions": [{"leader": 1}] * 5},
            "t": {"partitions": [{"leader": 1}] * 2},
        }

    def metadata_topics(self) -> dict[str, Any]:
        return self.topics

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        return {1: ("127.0.0.1", 9092)}

    def open_offsets_partition(self, rules: ReplicationRules = SAFE_RULES) -> Partition:
        partition = Partition(
            OFFSETS_TOPIC,
            INDEX,
            1,
            self.directory / f"{OFFSETS_TOPIC}-{INDEX}",
            1 << 30,
            FlushPolicy(config.NEVER, config.NEVER),
            0,
            rules,
        )
        self.partitions[(OFFSETS_TOPIC, INDEX)] = partition
        return partition


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def lead(broker: StandInBroker, coordinator: GroupCoordinator, epoch: int) -> Partition:
    partition = broker.partitions.get((OFFSETS_TOPIC, INDEX)) or broker.open_offsets_partition()
    partition.become_leader(epoch, epoch, [1], [1])
    coordinator.partition_changed(partition)
    return partition


async def loaded(coordinator: GroupCoordinator) -> None:
    for _ in range(1000):
        if coordinator.owner(GROUP)[0] != wire.COORDINATOR_LOAD_IN_PROGRESS:
            return
        await asyncio.sleep(0)
    raise AssertionError("the load never finished")


async def join(
    coordinator: GroupCoordinator, member_id: str = "", session_timeout_ms: int = 10000
) -> JoinOutcome:
    return await coordinator.join(
        GROUP,
        member_id=member_id,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=30000,
        protocol_type="consumer",
        protocols=[("range", b"subscription")],
        require_known_member_id=False,
    )


def test_commits_and_generations_are_in_the_log_and_another_replica_rebuilds_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = StandInBroker(tmp_path)
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        assert coordinator.owner(GROUP)[0] == wire.NOT_COORDINATOR  # leads nothing yet
        partition = lead(broker, coordinator, epoch=0)
        assert coordinator.owner(GROUP)[0] == wire.COORDINATOR_LOAD_IN_PROGRESS
        await loaded(coordinator)

        joined = await join(coordinator)
        assert joined.error == wire.NONE and joined.generation_id == 1
        synced = await coordinator.sync(
            GROUP,
            member_id=joined.member_id,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            assignments={joined.member_id: b"assignment"},
        )
        assert synced == SyncOutcome(wire.NONE, b"assignment", "consumer", "range")
        value = CommittedOffset(42, 3, "meta", 1)
        assert await coordinator.commit(
            GROUP, joined.member_id, 1, [("t", 1, value), ("nope", 0, value)]
        ) == [
            wire.NONE,
            wire.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        assert coordinator.fetch_offsets(GROUP, [("t", 1), ("t", 0)]) == (
            wire.NONE,
            {("t", 1): value, ("t", 0): None},
        )
        assert partition.high_watermark == partition.log_end_offset == 2  # the generation, then the commit
        partition.log.close()

        # Another replica of the same log becomes leader in a later epoch: a new coordinator.
        successor_broker = StandInBroker(tmp_path)
        successor = GroupCoordinator(successor_broker)  # type: ignore[arg-type]
        lead(successor_broker, successor, epoch=1)
        await loaded(successor)
        assert successor.fetch_offsets(GROUP, None) == (wire.NONE, {("t", 1): value})
        error, group = successor.describe(GROUP)
        assert error == wire.NONE and group is not None
        assert group.state is GroupState.STABLE and group.generation == 1
        assert group.members[joined.member_id].assignment == b"assignment"
        assert successor.heartbeat(GROUP, joined.member_id, 1) == wire.NONE  # it carries on, no rebalance

    run(scenario)


def test_loading_a_long_log_yields_and_answers_load_in_progress(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = StandInBroker(tmp_path)
        partition = broker.open_offsets_partition()
        batches = 3 * LOAD_BATCHES_PER_STEP
        for number in range(batches):
            key, value = (
                encode_key(OffsetKey(GROUP, "t", 0)),
                encode_value(CommittedOffset(number, -1, "", 0)),
            )
            batch = records.build_batch([(key, value)], 0)
            partition.log.append_as_leader(batch, records.parse_header(batch), 0)
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        lead(broker, coordinator, epoch=1)
        await asyncio.sleep(0)  # the load starts, replays one step, yields
        assert coordinator.owner(GROUP)[0] == wire.COORDINATOR_LOAD_IN_PROGRESS
        assert await coordinator.commit(GROUP, "", -1, []) == []
        assert coordinator.heartbeat(GROUP, "m", 1) == wire.COORDINATOR_LOAD_IN_PROGRESS
        await loaded(coordinator)
        assert coordinator.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == batches - 1  # type: ignore[union-attr]

    run(scenario)


def test_losing_leadership_answers_waiting_and_later_requests_with_not_coordinator(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = StandInBroker(tmp_path)
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        partition = lead(broker, coordinator, epoch=0)
        await loaded(coordinator)
        first = await join(coordinator)
        await coordinator.sync(
            GROUP,
            member_id=first.member_id,
            generation_id=1,
            protocol_type=None,
            protocol_name=None,
            assignments={},
        )
        # A second member's join waits for the first to rejoin ...
        waiting = asyncio.ensure_future(join(coordinator))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        # ... when another broker is elected.
        partition.become_follower(2, 1, 1, [1, 2], [1, 2])
        coordinator.partition_changed(partition)
        assert (await waiting).error == wire.NOT_COORDINATOR
        assert coordinator.owner(GROUP)[0] == wire.NOT_COORDINATOR
        assert coordinator.heartbeat(GROUP, first.member_id, 1) == wire.NOT_COORDINATOR
        assert await coordinator.commit(GROUP, "", -1, [("t", 0, CommittedOffset(1, -1, "", 0))]) == [
            wire.NOT_COORDINATOR
        ]

    run(scenario)


def test_a_commit_without_the_isr_needed_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = StandInBroker(tmp_path)
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        partition = broker.open_offsets_partition(ReplicationRules(min_insync_replicas=2))
        partition.become_leader(0, 0, [1, 2], [1])
        coordinator.partition_changed(partition)
        await loaded(coordinator)
        value = CommittedOffset(1, -1, "", 0)
        assert await coordinator.commit(GROUP, "", -1, [("t", 0, value)]) == [wire.COORDINATOR_NOT_AVAILABLE]
        assert partition.log_end_offset == 0

    run(scenario)


def test_a_marker_written_while_the_partition_loads_completes_the_transaction(tmp_path: Path) -> None:
    """The race behind a stuck read_committed offset fetch: a new coordinator starts loading; the
    transaction coordinator's retried marker lands on the partition mid-load, before the replay
    reached the transaction's offsets.  The marker must still complete them (the loader reads to
    the log end as it moves), or they stay pending and every require_stable fetch answers
    UNSTABLE_OFFSET_COMMIT until the next leader change."""

    async def scenario() -> None:
        broker = StandInBroker(tmp_path)
        partition = broker.open_offsets_partition()
        key = encode_key(OffsetKey(GROUP, "t", 0))

        def append(batch: bytearray) -> None:
            partition.log.append_as_leader(batch, records.parse_header(batch), 0)

        for number in range(2 * LOAD_BATCHES_PER_STEP):  # replayed in two steps, the load yields after each
            append(records.build_batch([(key, encode_value(CommittedOffset(number, -1, "", 0)))], 0))
        pending = CommittedOffset(1000, -1, "", 0)
        append(build_transactional_batch([(key, encode_value(pending))], (77, 0), 0))
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        lead(broker, coordinator, epoch=1)
        await asyncio.sleep(0)  # one step replayed: the transactional commit not yet
        assert coordinator.owner(GROUP)[0] == wire.COORDINATOR_LOAD_IN_PROGRESS
        commit = Marker(77, 0, True, 0)
        append(build_marker_batch(commit, 0))
        TxnOffsets(coordinator).marker_written(INDEX, 1, commit)
        await loaded(coordinator)
        _, state = coordinator.owner(GROUP)
        assert state is not None and state.pending_transactions == {}
        assert coordinator.fetch_offsets(GROUP, [("t", 0)]) == (wire.NONE, {("t", 0): pending})

    run(scenario)


def test_a_stalled_coordinator_does_not_hold_its_own_stall_against_the_members(tmp_path: Path) -> None:
    """The event loop really blocked past a member's session (a stalled machine: CI saw every
    process stop for 3.9 s, 2026-12-02): the member's heartbeats sat unread, so it is not expired
    at the first tick after the stall; silent from then on, it still is (broker_impl.stall)."""

    async def scenario() -> tuple[bool, bool]:
        broker = StandInBroker(tmp_path, "group.min.session.timeout.ms=500\n")
        coordinator = GroupCoordinator(broker)  # type: ignore[arg-type]
        lead(broker, coordinator, epoch=0)
        await loaded(coordinator)
        joined = await join(coordinator, session_timeout_ms=1000)
        assert joined.error == wire.NONE
        assignments = {joined.member_id: b"all"}
        synced = await coordinator.sync(
            GROUP,
            member_id=joined.member_id,
            generation_id=joined.generation_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=assignments,
        )
        assert synced.error == wire.NONE
        ticking = asyncio.create_task(coordinator.tick_forever())
        await asyncio.sleep(0.2)
        assert coordinator.heartbeat(GROUP, joined.member_id, joined.generation_id) == wire.NONE
        time.sleep(1.5)  # the stall: nothing runs, not even the tick
        await asyncio.sleep(0.2)  # the first ticks after it
        group = coordinator.describe(GROUP)[1]
        kept = group is not None and joined.member_id in group.members
        await asyncio.sleep(1.5)  # silent from now on: expired
        group = coordinator.describe(GROUP)[1]
        expired = group is not None and joined.member_id not in group.members
        ticking.cancel()
        return kept, expired

    assert asyncio.run(scenario()) == (True, True)
