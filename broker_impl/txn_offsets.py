"""TxnOffsetCommit: a transaction's consumer offsets, through the group coordinator.

A transactional producer that consumed (read-process-write) sends its offsets with
TxnOffsetCommit to the *group's* coordinator, after AddOffsetsToTxn made that group's
``__consumer_offsets`` partition one of the transaction's partitions.  As in Kafka the offsets are
written to that partition as a **transactional batch** (the producer's id and epoch, no sequence)
with ``acks=all``, and held *pending* under the producer id
(:meth:`~broker_impl.coordinator_partition.CoordinatorPartition.add_pending`); the transaction's
marker, written to the same partition by WriteTxnMarkers, applies them (COMMIT) or drops them
(ABORT) -- :meth:`TxnOffsets.marker_written` live, the group coordinator's loader on replay.  So a
consumer of the group sees the offsets exactly when the transaction's output is visible.

Checks, as Kafka's: the group's coordinator must be this broker (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS); a known member and generation (v3+) must match
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID); a partition must exist (UNKNOWN_TOPIC_OR_PARTITION).
With ``transaction.partition.verification.enable`` the first commit of a transaction on the
partition is verified with the transaction's coordinator first, as a produce is (KIP-890 part 1;
Kafka verifies TxnOffsetCommit since 3.6): a TxnOffsetCommit that reaches the group coordinator
*after* its transaction's marker -- a request held by a paused broker while the client timed out
and aborted -- would otherwise open a transaction on ``__consumer_offsets`` that no marker will
end, and every read_committed offset fetch of the group would answer UNSTABLE_OFFSET_COMMIT for good.
"""

from __future__ import annotations

import time

from . import records, wire
from .control_records import Marker, build_transactional_batch
from .group_coordinator import GroupCoordinator
from .group_records import OFFSETS_TOPIC, CommittedOffset, OffsetKey, encode_key, encode_value
from .leader_append import append_and_wait
from .txn_verification import TxnVerifier, record_refusal

_APPEND_ERRORS = {
    wire.NOT_ENOUGH_REPLICAS: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_ENOUGH_REPLICAS_AFTER_APPEND: wire.COORDINATOR_NOT_AVAILABLE,
    wire.NOT_LEADER_OR_FOLLOWER: wire.NOT_COORDINATOR,
    wire.KAFKA_STORAGE_ERROR: wire.NOT_COORDINATOR,
}


class TxnOffsets:
    def __init__(self, coordinator: GroupCoordinator, verifier: TxnVerifier | None = None) -> None:
        self.coordinator = coordinator
        self.verifier = verifier

    async def commit(
        self,
        group_id: str,
        producer: tuple[int, int],
        member: tuple[str, int],
        offsets: list[tuple[str, int, CommittedOffset]],
        transactional_id: str | None = None,
    ) -> list[int]:
        """One error per entry of ``offsets`` (topic, partition, value); ``producer`` is (id,
        epoch), ``member`` (member id, generation id; generation -1: not checked);
        ``transactional_id`` names the coordinator a verification asks."""
        error, state = self.coordinator.owner(group_id)
        if state is None:
            return [error] * len(offsets)
        member_id, generation_id = member
        group = state.group(group_id)
        if group is None and generation_id >= 0:
            return [wire.ILLEGAL_GENERATION] * len(offsets)
        if group is not None and generation_id >= 0:
            error = group.check_commit(member_id, generation_id, time.monotonic())
            if error:
                return [error] * len(offsets)
        topics = self.coordinator.broker.metadata_topics()
        results = [
            wire.NONE
            if topic in topics and 0 <= partition < len(topics[topic]["partitions"])
            else wire.UNKNOWN_TOPIC_OR_PARTITION
            for topic, partition, _ in offsets
        ]
        entries = [
            (OffsetKey(group_id, topic, partition), value)
            for (topic, partition, value), result in zip(offsets, results, strict=True)
            if result == wire.NONE
        ]
        if not entries:
            return results
        partition = self.coordinator.broker.partitions.get((OFFSETS_TOPIC, state.index))
        if partition is None:
            return [wire.NOT_COORDINATOR] * len(offsets)
        batch = build_transactional_batch(
            [(encode_key(key), encode_value(value)) for key, value in entries],
            producer,
            int(time.time() * 1000),
        )
        header = records.parse_header(batch)
        if self.verifier is not None and self.verifier.needed(partition, header):
            error = await self.verifier.verify(transactional_id, header, OFFSETS_TOPIC, state.index)
            if error:
                record_refusal(partition, header, error)
                return [_APPEND_ERRORS.get(error, error)] * len(offsets)
        error, base_offset = await append_and_wait(
            partition, batch, self.coordinator.commit_timeout, state.leader_epoch
        )
        if error == wire.NONE and self.coordinator.partitions.get(state.index) is state:
            for position, (key, value) in enumerate(entries):
                state.add_pending(producer[0], key, value, base_offset + position)
        mapped = _APPEND_ERRORS.get(error, error)
        return [mapped if result == wire.NONE else result for result in results]

    def marker_written(self, index: int, leader_epoch: int, marker: Marker) -> None:
        """A marker was appended to ``__consumer_offsets-<index>`` in ``leader_epoch``: the
        pending commits of its producer are applied or dropped.  Not while the partition loads:
        the loader may not have replayed the transaction's offsets yet (it would then find them
        pending for good -- every read_committed offset fetch of the group answered
        UNSTABLE_OFFSET_COMMIT), and it replays this marker itself, reading the log to its end as
        it moves."""
        state = self.coordinator.partitions.get(index)
        if state is not None and state.loaded and state.leader_epoch == leader_epoch:
            state.complete_transaction(marker.producer_id, marker.committed)
