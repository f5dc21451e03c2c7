"""The group coordinator of one broker: the groups of the ``__consumer_offsets`` partitions it leads.

Ownership follows partition leadership, which the controller decides: when this broker becomes
leader of an offsets partition (in a new leader epoch) the coordinator starts **loading** it --
replaying its log into a :class:`~broker_impl.coordinator_partition.CoordinatorPartition`, to
the log end (see there why) -- and answers wire.COORDINATOR_LOAD_IN_PROGRESS for its groups until
that is done; when it stops being leader it **unloads** at once: requests waiting on those
groups get wire.NOT_COORDINATOR, and so does every later request, so clients look the coordinator
up again.

Writes -- offset commits, and a group's generation when its leader's assignment arrives (or when
it becomes empty) -- are record batches appended to the partition exactly as a producer's
``acks=all`` batch is: the same log, the same epoch stamping, the same flush policy, the same
ack waiter; the answer waits until the HW passes the batch, for at most
``offsets.commit.timeout.ms``.  So an acknowledged commit is replicated to the ISR like an
acknowledged message, and every fault and bug switch that acts on user data acts on commits.
Append errors become the errors Kafka's coordinator gives (wire.NOT_COORDINATOR when leadership was
lost, wire.COORDINATOR_NOT_AVAILABLE when the ISR is below ``min.insync.replicas``, REQUEST_TIMED_OUT
for a commit whose HW did not arrive in time -- for a group store, wire.REBALANCE_IN_PROGRESS).

The groups' state machines are pure (:mod:`broker_impl.group_state`); this module turns their
tickets into asyncio futures, their store requests into appends, and runs their clocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from . import records, wire
from .broker_view import BrokerView
from .coordinator_partition import CoordinatorPartition
from .coordinator_topic import CoordinatorTopic
from .group_members import JoinOutcome, Reply, StoreGroup, SyncOutcome
from .group_records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    OffsetKey,
    RecordFormatError,
    encode_key,
    encode_value,
    partition_for,
)
from .group_state import Group, GroupSettings
from .leader_append import append_and_wait
from .stall import StallWatch

if TYPE_CHECKING:
    from .log import IndexedBatch, PartitionLog
    from .partition import Partition

_Outcome = TypeVar("_Outcome", JoinOutcome, SyncOutcome)

logger = logging.getLogger(__name__)

OFFSETS = CoordinatorTopic(
    OFFSETS_TOPIC, partition_for, "offsets.topic.num.partitions", "offsets.topic.replication.factor"
)
"""``__consumer_offsets``: a group's coordinator leads the group id's partition of it."""

TICK_SECONDS = 0.05
LOAD_BATCHES_PER_STEP = 64
"""Batches replayed between yields to the event loop while loading, so a long log does not
stall replication (and the load is observable as wire.COORDINATOR_LOAD_IN_PROGRESS)."""

_APPEND_ERRORS = {
    wire.NOT_ENOUGH_REPLICAS: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_ENOUGH_REPLICAS_AFTER_APPEND: wire.COORDINATOR_NOT_AVAILABLE,
    wire.UNKNOWN_TOPIC_OR_PARTITION: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_LEADER_OR_FOLLOWER: wire.NOT_COORDINATOR,
    wire.KAFKA_STORAGE_ERROR: wire.NOT_COORDINATOR,
}
"""Append errors as a committer sees them (Kafka's mapping); REQUEST_TIMED_OUT passes through."""


def group_settings(settings: dict[str, Any]) -> GroupSettings:
    return GroupSettings(
        initial_rebalance_delay=settings["group.initial.rebalance.delay.ms"] / 1000,
        min_session_timeout_ms=settings["group.min.session.timeout.ms"],
        max_session_timeout_ms=settings["group.max.session.timeout.ms"],
    )


class GroupCoordinator:
    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        self.settings = group_settings(broker.settings)
        self.commit_timeout = broker.settings["offsets.commit.timeout.ms"] / 1000
        self.metadata_max_bytes: int = broker.settings["offsets.metadata.max.bytes"]
        self.partitions: dict[int, CoordinatorPartition] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._stores: set[asyncio.Task[None]] = set()
        self._seen: dict[str, tuple[int, str, int]] = {}  # last logged (generation, state, members)

    # ---- ownership ------------------------------------------------------------------------------

    def partition_changed(self, partition: Partition) -> None:
        """Follow a leadership change of any local replica (the broker calls this after
        every ``become_leader`` / ``become_follower``)."""
        if partition.topic != OFFSETS_TOPIC:
            return
        current = self.partitions.get(partition.index)
        if partition.role == "leader":
            if current is not None and current.leader_epoch == partition.leader_epoch:
                return
            self._unload(partition.index)
            state = CoordinatorPartition(partition.index, partition.leader_epoch, self.settings)
            self.partitions[partition.index] = state
            self._loads[partition.index] = asyncio.create_task(
                self._load(partition, state), name=f"load-{partition.name}"
            )
        else:
            self._unload(partition.index)

    def _unload(self, index: int) -> None:
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        state = self.partitions.pop(index, None)
        if state is not None:
            self._deliver(state.shut_down(wire.NOT_COORDINATOR))
            logger.info("%s-%d: unloaded %d groups", OFFSETS_TOPIC, index, len(state.groups))

    def _owns(self, state: CoordinatorPartition, partition: Partition) -> bool:
        return (
            self.partitions.get(state.index) is state
            and partition.role == "leader"
            and partition.leader_epoch == state.leader_epoch
        )

    async def _load(self, partition: Partition, state: CoordinatorPartition) -> None:
        started = time.monotonic()
        log = partition.log
        skipped = 0
        for number, batch in enumerate(_to_the_moving_end(log), start=1):
            if not self._owns(state, partition):
                return
            if batch.header.is_control:  # a transaction's marker: its offsets count, or not
                state.replay_marker(batch.header, log.read_batch(batch))
            else:
                producer = batch.header.producer_id if batch.header.is_transactional else -1
                try:
                    decoded = records.decode_records(log.read_batch(batch))
                except Exception as error:  # kafka-python's reader raises many kinds on bad bytes
                    skipped += batch.header.record_count
                    logger.error("%s: skipping batch %d: %r", partition.name, batch.header.base_offset, error)
                    decoded = []
                for record in decoded:
                    try:
                        state.replay(record.offset, record.key, record.value, producer)
                    except RecordFormatError as error:
                        skipped += 1
                        logger.warning("%s: skipping record %d: %s", partition.name, record.offset, error)
            if number % LOAD_BATCHES_PER_STEP == 0:
                await asyncio.sleep(0)
        if not self._owns(state, partition):
            return
        state.finish_load(time.monotonic())
        self._loads.pop(state.index, None)
        logger.info(
            "%s: loaded %d records (%d skipped), %d groups, to offset %d in epoch %d in %.3f s",
            partition.name,
            state.replayed_records,
            skipped,
            len(state.group_ids()),
            partition.log_end_offset,
            state.leader_epoch,
            time.monotonic() - started,
        )

    def owner(self, group_id: str) -> tuple[int, CoordinatorPartition | None]:
        """The loaded partition holding ``group_id``, or the error a client gets instead."""
        return OFFSETS.owner(self.broker, self.partitions, group_id)

    # ---- FindCoordinator ------------------------------------------------------------------------

    async def locate(self, group_id: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of ``group_id``'s coordinator: the leader of its
        partition in this broker's metadata.  Creates ``__consumer_offsets`` on first use."""
        return await OFFSETS.locate(self.broker, group_id)

    async def create_offsets_topic(self) -> int:
        """Create ``__consumer_offsets`` (:meth:`broker_impl.coordinator_topic.CoordinatorTopic.create`)."""
        return await OFFSETS.create(self.broker)

    # ---- membership -----------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        *,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinOutcome:
        """JoinGroup: answered when the group's rebalance completes (see :meth:`Group.join`)."""
        error, state = self.owner(group_id)
        if state is None:
            return JoinOutcome(error, member_id)
        group = state.group_or_new(group_id)
        return await self._answer(
            state,
            group,
            JoinOutcome,
            lambda ticket: group.join(
                member_id=member_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                require_known_member_id=require_known_member_id,
                ticket=ticket,
                now=time.monotonic(),
            ),
        )

    async def sync(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncOutcome:
        """SyncGroup: answered once the leader's assignment is stored (see :meth:`Group.sync`)."""
        error, state = self.owner(group_id)
        if state is None:
            return SyncOutcome(error)
        group = state.group(group_id)
        if group is None:
            return SyncOutcome(wire.UNKNOWN_MEMBER_ID)
        return await self._answer(
            state,
            group,
            SyncOutcome,
            lambda ticket: group.sync(
                member_id=member_id,
                generation_id=generation_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=assignments,
                ticket=ticket,
                now=time.monotonic(),
            ),
        )

    async def _answer(
        self,
        state: CoordinatorPartition,
        group: Group,
        kind: type[_Outcome],
        request: Callable[[asyncio.Future[JoinOutcome | SyncOutcome]], _Outcome | None],
    ) -> _Outcome:
        """Make ``request`` of ``group`` with a fresh ticket: its answer now, or the one the group
        gives the ticket later (when the rebalance completes or the assignment is stored)."""
        ticket: asyncio.Future[JoinOutcome | SyncOutcome] = asyncio.get_running_loop().create_future()
        outcome = request(ticket)
        self._settle(state, group)
        if outcome is not None:
            return outcome
        answer = await ticket
        assert isinstance(answer, kind)
        return answer

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> int:
        error, state = self.owner(group_id)
        if state is None:
            return error
        group = state.group(group_id)
        if group is None:
            return wire.UNKNOWN_MEMBER_ID
        error = group.heartbeat(member_id, generation_id, time.monotonic())
        self._settle(state, group)
        return error

    def leave(self, group_id: str, member_ids: list[str]) -> tuple[int, list[int]]:
        """(group error, one error per member)."""
        error, state = self.owner(group_id)
        if state is None:
            return error, [error] * len(member_ids)
        group = state.group(group_id)
        if group is None:
            return wire.NONE, [wire.UNKNOWN_MEMBER_ID] * len(member_ids)
        errors = [group.leave(member_id, time.monotonic()) for member_id in member_ids]
        self._settle(state, group)
        return wire.NONE, errors

    def _settle(self, state: CoordinatorPartition, group: Group) -> None:
        """Carry out what ``group`` asked for: answer tickets, start stores.  Logs every change
        of the group's state or generation (the broker log then tells a group's history)."""
        seen = (group.generation, group.state.value, len(group.members))
        if self._seen.get(group.group_id) != seen:
            self._seen[group.group_id] = seen
            logger.info(
                "group %s: %s, generation %d, %d members, leader %s, protocol %s",
                group.group_id,
                group.state.value,
                group.generation,
                len(group.members),
                group.leader,
                group.protocol_name,
            )
        for effect in group.take_effects():
            if isinstance(effect, StoreGroup):
                task = asyncio.create_task(self._store_group(state, group, effect))
                self._stores.add(task)
                task.add_done_callback(self._stores.discard)
            else:
                self._deliver([effect])

    @staticmethod
    def _deliver(effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                ticket = effect.ticket
                assert isinstance(ticket, asyncio.Future)
                if not ticket.done():
                    ticket.set_result(effect.outcome)

    async def _store_group(self, state: CoordinatorPartition, group: Group, effect: StoreGroup) -> None:
        record = dataclasses.replace(effect.record, state_timestamp=int(time.time() * 1000))
        error, _ = await self._append(state, [(encode_key(GroupKey(group.group_id)), encode_value(record))])
        if error != wire.NONE:
            logger.info(
                "%s: storing generation %d failed: error %d", group.group_id, effect.generation, error
            )
        if self.partitions.get(state.index) is not state:
            return  # unloaded meanwhile: the group was already given up
        mapped = (
            wire.REBALANCE_IN_PROGRESS
            if error == wire.REQUEST_TIMED_OUT
            else _APPEND_ERRORS.get(error, error)
        )
        group.stored(effect.generation, mapped, time.monotonic())
        self._settle(state, group)

    def tick(self, now: float) -> None:
        """Run every loaded group's clock.  A failure is logged per group and never ends the
        loop: a coordinator bug must not stop the broker's replicated log with it."""
        for state in list(self.partitions.values()):
            if state.loaded:
                for group in list(state.groups.values()):
                    try:
                        group.tick(now)
                        self._settle(state, group)
                    except Exception:
                        logger.exception("%s: group clock failed", group.group_id)

    def forgive(self, seconds: float) -> None:
        """This coordinator did not run for ``seconds`` (see :mod:`broker_impl.stall`): move every
        loaded group's deadlines on by that much, so the members' unread heartbeats are not
        taken for silence."""
        for state in self.partitions.values():
            if state.loaded:
                for group in state.groups.values():
                    group.forgive(seconds)

    async def tick_forever(self) -> None:
        watch = StallWatch(TICK_SECONDS, time.monotonic())
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now = time.monotonic()
            if stalled := watch.stalled(now):
                self.forgive(stalled)
            self.tick(now)

    # ---- offsets --------------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> list[int]:
        """OffsetCommit: one error per entry of ``offsets`` (topic, partition, value), in order."""
        error, state = self.owner(group_id)
        if state is None:
            return [error] * len(offsets)
        group = state.group(group_id)
        if group is None:
            if generation_id >= 0:
                return [wire.ILLEGAL_GENERATION] * len(offsets)
            group = state.group_or_new(group_id)  # a group that only stores offsets here
        error = group.check_commit(member_id, generation_id, time.monotonic())
        if error:
            return [error] * len(offsets)
        topics = self.broker.metadata_topics()
        results: list[int] = []
        entries: list[tuple[OffsetKey, CommittedOffset]] = []
        for topic, partition, value in offsets:
            known = topics.get(topic)
            if known is None or not 0 <= partition < len(known["partitions"]):
                results.append(wire.UNKNOWN_TOPIC_OR_PARTITION)
            elif len(value.metadata.encode()) > self.metadata_max_bytes:
                results.append(wire.OFFSET_METADATA_TOO_LARGE)
            else:
                results.append(wire.NONE)
                entries.append((OffsetKey(group_id, topic, partition), value))
        if not entries:
            return results
        error, base_offset = await self._append(
            state, [(encode_key(key), encode_value(value)) for key, value in entries]
        )
        if error == wire.NONE and self.partitions.get(state.index) is state:
            for position, (key, value) in enumerate(entries):
                state.apply_offset(key, value, base_offset + position)
        mapped = _APPEND_ERRORS.get(error, error)
        return [mapped if result == wire.NONE else result for result in results]

    def fetch_offsets(
        self, group_id: str, wanted: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], CommittedOffset | None]]:
        """OffsetFetch: the committed offset of each wanted partition (``None``: none
        committed), or of every partition the group committed when ``wanted`` is None."""
        error, state = self.owner(group_id)
        if state is None:
            return error, {}
        committed = state.committed(group_id)
        if wanted is None:
            return wire.NONE, dict(committed)
        return wire.NONE, {position: committed.get(position) for position in wanted}

    # ---- appends --------------------------------------------------------------------------------

    async def _append(
        self, state: CoordinatorPartition, entries: list[tuple[bytes | None, bytes | None]]
    ) -> tuple[int, int]:
        """Append ``entries`` as one batch with acks=all semantics; (error, base offset).  The
        append and its wait are the ones transaction coordinators and markers use
        (:func:`broker_impl.leader_append.append_and_wait`): one rule for an internal write."""
        partition = self.broker.partitions.get((OFFSETS_TOPIC, state.index))
        if partition is None or not self._owns(state, partition):
            return wire.NOT_LEADER_OR_FOLLOWER, -1
        batch = records.build_batch(entries, int(time.time() * 1000))
        return await append_and_wait(partition, batch, self.commit_timeout)

    # ---- ListGroups / DescribeGroups ------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this broker coordinates now."""
        return sorted(
            (group.group_id, group.protocol_type or "", group.state.value)
            for state in self.partitions.values()
            if state.loaded
            for group in state.groups.values()
        )

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        error, state = self.owner(group_id)
        if state is None:
            return error, None
        return wire.NONE, state.group(group_id)


def _to_the_moving_end(log: PartitionLog) -> Iterator[IndexedBatch]:
    """Every batch of a leader's ``log`` in order, to its end *as it moves*: the load yields, and
    what is appended meanwhile -- above all a transaction's marker, which the transaction
    coordinator retries on the new leader at once -- is replayed too, so the loader alone owns the
    state until it is loaded (live marker handling skips a partition still loading, see
    :meth:`broker_impl.txn_offsets.TxnOffsets.marker_written`).  A leader only appends; should the
    replica stop leading, the caller stops at its next ownership check."""
    done = 0
    while True:
        batches = log.batches()[done:]
        if not batches:
            return
        done += len(batches)
        yield from batches
