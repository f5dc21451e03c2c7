"""The transaction coordinator of one broker: the transactional ids of the ``__transaction_state``
partitions it leads.

Built as the group coordinator is (:mod:`broker_impl.group_coordinator`).  Ownership follows
partition leadership: on becoming leader of a ``__transaction_state`` partition (in a new leader
epoch) the coordinator **loads** it -- replays its log to the log end into a
:class:`TxnPartition`, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile -- and then resends the
markers of every transaction it found prepared (its old coordinator may have died between the
prepare and the markers); on losing leadership it **unloads** at once (NOT_COORDINATOR), and its
marker tasks are cancelled.  The coordinator epoch of the markers is that partition's leader
epoch.

Every decision is made by the pure rules of :mod:`broker_impl.txn_state` (a :class:`Plan`); this
module carries a plan out: the new metadata is appended to the partition with ``acks=all``
(:func:`broker_impl.leader_append.append_and_wait`), and only once acknowledged is it adopted
and the client answered.  While a write (or a prepared transaction's markers) is in flight the id
is *pending* and other requests for it get CONCURRENT_TRANSACTIONS, as in Kafka.  A prepared
transaction's markers go out through :class:`broker_impl.txn_markers.MarkerSender`; when every
partition has its marker, CompleteCommit / CompleteAbort is written.  A clock aborts every
transaction older than its timeout (fencing its producer); another removes the transactional ids
idle past ``transactional.id.expiration.ms`` (a tombstone, the Dead state).

Each state change is a ``txn-state`` event in the broker's event log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import records, wire
from .broker_view import RequestBrokerView
from .control_records import Marker
from .coordinator_topic import CoordinatorTopic
from .group_records import OFFSETS_TOPIC, RecordFormatError, partition_for
from .leader_append import append_and_wait
from .txn_markers import MarkerSender
from .txn_records import TRANSACTION_STATE_TOPIC, decode, encode_key, encode_value, transaction_partition
from .txn_rules import TransactionRules
from .txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_TRANSACTION_TIMEOUT,
    MAX_EPOCH,
    PREPARED,
    Plan,
    TxnMetadata,
    TxnState,
    after_end,
    complete,
    plan_add_partitions,
    plan_end,
    plan_expire,
    plan_init,
    plan_timeout,
    verify_partition,
)
from .txn_verification import TxnVerifier

if TYPE_CHECKING:
    from .partition import Partition

logger = logging.getLogger(__name__)

STATE_TOPIC = CoordinatorTopic(
    TRANSACTION_STATE_TOPIC,
    transaction_partition,
    "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
)
"""``__transaction_state``: a transactional id's coordinator leads the id's partition of it."""

WRITE_TIMEOUT_SECONDS = 5.0
_APPEND_ERRORS = {
    wire.NOT_ENOUGH_REPLICAS: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_ENOUGH_REPLICAS_AFTER_APPEND: wire.COORDINATOR_NOT_AVAILABLE,
    wire.REQUEST_TIMED_OUT: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_LEADER_OR_FOLLOWER: wire.NOT_COORDINATOR,
    wire.KAFKA_STORAGE_ERROR: wire.NOT_COORDINATOR,
}
"""Append errors as a transactional client sees them (Kafka's mapping: it retries on both)."""


@dataclasses.dataclass
class TxnPartition:
    """The coordinator's state for one led ``__transaction_state`` partition, valid for one
    leader epoch (which is the coordinator epoch of the markers it writes)."""

    index: int
    leader_epoch: int
    loaded: bool = False
    transactions: dict[str, TxnMetadata] = dataclasses.field(default_factory=dict)
    pending: set[str] = dataclasses.field(default_factory=set)
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        transactional_id, metadata = decode(key, value)
        if metadata is None:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = metadata


class TransactionCoordinator:
    def __init__(self, broker: RequestBrokerView, node_id: int) -> None:
        self.broker = broker
        self.max_timeout_ms: int = broker.settings["transaction.max.timeout.ms"]
        self.check_interval = (
            broker.settings["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        )
        self.expiration_ms: int = broker.settings["transactional.id.expiration.ms"]
        self.expiry_interval = (
            broker.settings["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000
        )
        self.partitions: dict[int, TxnPartition] = {}
        self.markers = MarkerSender(broker, node_id)
        self.rules = TransactionRules.from_settings(broker.settings)
        self.verifier = TxnVerifier(broker, node_id, self.rules)
        """The partition leader's side of KIP-890 part 1 (used by the produce handler)."""
        self._loads: dict[int, asyncio.Task[None]] = {}

    # ---- ownership ------------------------------------------------------------------------------

    def partition_changed(self, partition: Partition) -> None:
        """Follow a leadership change of any local replica (called after every role change)."""
        if partition.topic != TRANSACTION_STATE_TOPIC:
            return
        current = self.partitions.get(partition.index)
        if partition.role == "leader":
            if current is not None and current.leader_epoch == partition.leader_epoch:
                return
            self._unload(partition.index)
            state = self.partitions[partition.index] = TxnPartition(partition.index, partition.leader_epoch)
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
            for running in state.tasks:
                running.cancel()
            logger.info(
                "%s-%d: unloaded %d transactional ids",
                TRANSACTION_STATE_TOPIC,
                index,
                len(state.transactions),
            )

    def _owns(self, state: TxnPartition) -> bool:
        partition = self.broker.partitions.get((TRANSACTION_STATE_TOPIC, state.index))
        return (
            self.partitions.get(state.index) is state
            and partition is not None
            and partition.role == "leader"
            and partition.leader_epoch == state.leader_epoch
        )

    async def _load(self, partition: Partition, state: TxnPartition) -> None:
        log = partition.log
        for number, batch in enumerate(log.batches(), start=1):
            if not self._owns(state):
                return
            if not batch.header.is_control:
                for record in records.decode_records(log.read_batch(batch)):
                    try:
                        state.replay(record.key, record.value)
                    except RecordFormatError as error:
                        logger.warning("%s: skipping record %d: %s", partition.name, record.offset, error)
            if number % 64 == 0:
                await asyncio.sleep(0)
        if not self._owns(state):
            return
        state.loaded = True
        self._loads.pop(state.index, None)
        logger.info(
            "%s: loaded %d transactional ids in epoch %d",
            partition.name,
            len(state.transactions),
            state.leader_epoch,
        )
        for metadata in list(state.transactions.values()):
            if metadata.state in PREPARED:
                self._start_markers(state, metadata)

    def owner(self, transactional_id: str) -> tuple[int, TxnPartition | None]:
        """The loaded partition holding ``transactional_id``, or the error to answer instead."""
        return STATE_TOPIC.owner(self.broker, self.partitions, transactional_id)

    # ---- FindCoordinator ------------------------------------------------------------------------

    async def locate(self, transactional_id: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of ``transactional_id``'s coordinator; creates
        ``__transaction_state`` on first use."""
        return await STATE_TOPIC.locate(self.broker, transactional_id)

    # ---- the transactional APIs -----------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[int, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        error, state = self.owner(transactional_id)
        if state is None:
            return error, -1, -1
        current = state.transactions.get(transactional_id)
        fresh = -1
        if current is None or current.producer_epoch >= MAX_EPOCH:
            fresh = await self.broker.allocate_producer_id()
            if fresh < 0:
                return wire.COORDINATOR_NOT_AVAILABLE, -1, -1
        if transactional_id in state.pending:
            return CONCURRENT_TRANSACTIONS, -1, -1
        plan = plan_init(
            state.transactions.get(transactional_id),
            transactional_id,
            timeout_ms,
            _now_ms(),
            fresh,
            expected,
            self.rules.fence_step,
        )
        error = await self._execute(state, transactional_id, plan)
        adopted = state.transactions.get(transactional_id)
        if error or adopted is None:
            return error, -1, -1
        return wire.NONE, adopted.producer_id, adopted.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[tuple[str, int]],
    ) -> int:
        """AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's offsets
        partition): one error for the whole request."""
        error, state = self._idle_owner(transactional_id)
        if state is None:
            return error
        current = state.transactions.get(transactional_id)
        plan = plan_add_partitions(current, producer_id, producer_epoch, partitions, _now_ms())
        return await self._execute(state, transactional_id, plan)

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: tuple[str, int]
    ) -> int:
        """AddPartitionsToTxn v4 ``verify_only``: may a leader open this transaction there?"""
        error, state = self.owner(transactional_id)
        if state is None:
            return error
        current = state.transactions.get(transactional_id)
        return verify_partition(current, producer_id, producer_epoch, partition)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition AddOffsetsToTxn adds for ``group_id``."""
        topic = self.broker.metadata_topics().get(OFFSETS_TOPIC)
        count = len(topic["partitions"]) if topic else self.broker.settings["offsets.topic.num.partitions"]
        return OFFSETS_TOPIC, partition_for(group_id, count)

    def _idle_owner(self, transactional_id: str) -> tuple[int, TxnPartition | None]:
        """:meth:`owner`, and CONCURRENT_TRANSACTIONS while a write or markers of the id are in
        flight (its stored state is about to change)."""
        error, state = self.owner(transactional_id)
        if state is not None and transactional_id in state.pending:
            return CONCURRENT_TRANSACTIONS, None
        return error, state

    async def end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, bump: bool = False
    ) -> tuple[int, int, int]:
        """EndTxn: (error, producer id, epoch) -- answered once the prepare is stored; the markers
        follow.  ``bump``: KIP-890 part 2 (:meth:`TransactionRules.bumps_epoch`); the id and epoch
        answered are then those the client must use next (-1, -1 with an error)."""
        error, state = self._idle_owner(transactional_id)
        if state is None:
            return error, -1, -1
        current = state.transactions.get(transactional_id)
        fresh = -1
        if bump and current is not None and current.producer_epoch >= MAX_EPOCH:
            fresh = await self.broker.allocate_producer_id()
            if fresh < 0:
                return wire.COORDINATOR_NOT_AVAILABLE, -1, -1
            error, state = self._idle_owner(transactional_id)
            if state is None:
                return error, -1, -1
            current = state.transactions.get(transactional_id)
        plan = plan_end(current, producer_id, producer_epoch, commit, _now_ms(), bump, fresh)
        error = await self._execute(state, transactional_id, plan)
        adopted = state.transactions.get(transactional_id)
        if error or adopted is None:
            return error, -1, -1
        producer = (
            after_end(adopted) if adopted.state in PREPARED else (adopted.producer_id, adopted.producer_epoch)
        )
        return wire.NONE, producer[0], producer[1]

    # ---- carrying plans out ---------------------------------------------------------------------

    async def _execute(self, state: TxnPartition, transactional_id: str, plan: Plan) -> int:
        """Store ``plan.write`` (if any), adopt it, start its markers: the error to answer."""
        if plan.write is None:
            return plan.error
        state.pending.add(transactional_id)
        try:
            error = await self._store(state, plan.write)
        finally:
            state.pending.discard(transactional_id)
        if error:
            return error
        if plan.markers:
            self._start_markers(state, plan.write)
        return plan.error

    async def _store(self, state: TxnPartition, metadata: TxnMetadata) -> int:
        partition = self.broker.partitions.get((TRANSACTION_STATE_TOPIC, state.index))
        if partition is None or not self._owns(state):
            return wire.NOT_COORDINATOR
        dead = metadata.state is TxnState.DEAD
        value = None if dead else encode_value(metadata)  # the Dead state is stored as a tombstone
        batch = records.build_batch([(encode_key(metadata.transactional_id), value)], _now_ms())
        error, _ = await append_and_wait(partition, batch, WRITE_TIMEOUT_SECONDS, state.leader_epoch)
        if error:
            return _APPEND_ERRORS.get(error, error)
        if not self._owns(state):
            return wire.NOT_COORDINATOR
        previous = state.transactions.get(metadata.transactional_id)
        if dead:
            state.transactions.pop(metadata.transactional_id, None)
        else:
            state.transactions[metadata.transactional_id] = metadata
        partition.events.emit(
            "txn-state",
            topic=TRANSACTION_STATE_TOPIC,
            partition=state.index,
            transactional_id=metadata.transactional_id,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            old_state=previous.state.label if previous else None,
            state=metadata.state.label,
            partitions=sorted([list(entry) for entry in metadata.partitions]),
            coordinator_epoch=state.leader_epoch,
            last_update_ms=metadata.last_update_ms,
        )
        return wire.NONE

    def _start_markers(self, state: TxnPartition, metadata: TxnMetadata) -> None:
        state.pending.add(metadata.transactional_id)
        task = asyncio.create_task(self._finish(state, metadata), name=f"markers-{metadata.transactional_id}")
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)

    async def _finish(self, state: TxnPartition, metadata: TxnMetadata) -> None:
        """Write the markers of prepared ``metadata``, then its completion (retried until stored
        or the partition is unloaded; the next coordinator then finishes it)."""
        try:
            committed = metadata.state is TxnState.PREPARE_COMMIT
            marker = Marker(metadata.producer_id, metadata.producer_epoch, committed, state.leader_epoch)
            await self.markers.send(marker, metadata.partitions)
            while self._owns(state):
                if await self._store(state, complete(metadata, _now_ms())) == wire.NONE:
                    return
                await asyncio.sleep(0.2)
        finally:
            state.pending.discard(metadata.transactional_id)

    # ---- the clock ------------------------------------------------------------------------------

    async def abort_timed_out(self) -> None:
        """Abort (fencing the producer) every loaded transaction older than its timeout."""
        fence_step = self.rules.fence_step
        await self._sweep(
            lambda metadata, now: plan_timeout(metadata, now, fence_step), "timed out: aborting"
        )

    async def remove_expired(self) -> None:
        """Remove (a tombstone each) every loaded transactional id idle past the expiration."""
        expiration = self.expiration_ms
        await self._sweep(lambda metadata, now: plan_expire(metadata, now, expiration), "idle: expired")

    async def _sweep(self, plan_of: Callable[[TxnMetadata, int], Plan | None], what: str) -> None:
        """Carry out ``plan_of``'s plan for every loaded id it has one for, now (an id with a write
        or markers in flight is left to the next round)."""
        now = _now_ms()
        for state in list(self.partitions.values()):
            if not state.loaded:
                continue
            for transactional_id, metadata in list(state.transactions.items()):
                plan = plan_of(metadata, now)
                if plan is not None and transactional_id not in state.pending:
                    logger.info(
                        "%s (%s, last change %d ms): %s",
                        transactional_id,
                        metadata.state.label,
                        metadata.last_update_ms,
                        what,
                    )
                    await self._execute(state, transactional_id, plan)

    async def tick_forever(self) -> None:
        """The coordinator's two clocks: timed-out transactions every ``check_interval``, expired
        transactional ids every ``expiry_interval``; a failure of one round is logged, never ends it."""
        next_expiry = time.monotonic() + self.expiry_interval
        while True:
            await asyncio.sleep(min(self.check_interval, max(0.0, next_expiry - time.monotonic())))
            try:
                await self.abort_timed_out()
            except Exception:
                logger.exception("transaction timeout check failed")
            if time.monotonic() >= next_expiry:
                next_expiry = time.monotonic() + self.expiry_interval
                try:
                    await self.remove_expired()
                except Exception:
                    logger.exception("transactional id expiry failed")


def _now_ms() -> int:
    return int(time.time() * 1000)
