"""Kafka API handlers of transactions: one method per API, each returning a response body.

InitProducerId (with a transactional id; without one it is the idempotent producer's, answered
by :meth:`broker_impl.handlers.Handlers.init_producer_id`), AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn -- the coordinator's, translated to and from
:class:`~broker_impl.txn_coordinator.TransactionCoordinator` --, TxnOffsetCommit -- the group
coordinator's (:mod:`broker_impl.txn_offsets`) -- and WriteTxnMarkers, the partition leader's
(:func:`broker_impl.txn_markers.write_marker`; a marker for ``__consumer_offsets`` also settles the
transaction's pending offsets).  Version differences handled here, as
Kafka handles them:

* PRODUCER_FENCED exists from InitProducerId v4 and AddPartitionsToTxn / AddOffsetsToTxn / EndTxn
  v2; older versions are answered INVALID_PRODUCER_EPOCH instead.
* InitProducerId v3+ may name the producer id and epoch the client had (KIP-360).
* AddPartitionsToTxn v4+ batches transactions and is meant for brokers (KIP-890); only v0-3 are
  offered.
* EndTxn v5 (KIP-890 part 2) ends the transaction with a bumped epoch and answers the producer id
  and epoch to use next -- under ``transaction.version=2`` only
  (:meth:`~broker_impl.txn_rules.TransactionRules.bumps_epoch`); at level 1 it is not offered and
  is answered UNSUPPORTED_VERSION.  Because ``transaction.version`` changes what ApiVersions
  offers, ApiVersions is answered here (:meth:`TxnHandlers.api_versions`), overriding the plain
  handlers' answer in the broker's table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import wire
from .control_records import Marker
from .group_records import OFFSETS_TOPIC, CommittedOffset
from .partition import Partition
from .txn_coordinator import TransactionCoordinator
from .txn_markers import write_marker
from .txn_offsets import TxnOffsets
from .txn_state import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED

Handler = Callable[[wire.Request], Awaitable[Any]]
OPERATION_NOT_ATTEMPTED = 55
FIRST_VERSION_WITH_FENCED = {22: 4, 24: 2, 25: 2, 26: 2, 28: 2}
"""The first version of each API whose clients know PRODUCER_FENCED (KIP-588)."""


def _for_version(request: wire.Request, error: int) -> int:
    if error == PRODUCER_FENCED and request.version < FIRST_VERSION_WITH_FENCED.get(request.api.key, 0):
        return INVALID_PRODUCER_EPOCH
    return error


def _producer_answer(request: wire.Request, error: int, producer_id: int, producer_epoch: int) -> Any:
    """The answer of InitProducerId or EndTxn: an error and the producer id and epoch to use
    (EndTxn below v5 has no such fields; they are dropped by its encoder)."""
    return wire.response(
        request,
        throttle_time_ms=0,
        error_code=_for_version(request, error),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


class TxnHandlers:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        partitions: Mapping[tuple[str, int], Partition],
        idempotent_init: Handler,
        offsets: TxnOffsets,
    ) -> None:
        self.coordinator = coordinator
        self.partitions = partitions
        self.idempotent_init = idempotent_init
        self.offsets = offsets

    def table(self) -> dict[int, Handler]:
        return {
            wire.API_VERSIONS_KEY: self.api_versions,
            22: self.init_producer_id,
            24: self.add_partitions_to_txn,
            25: self.add_offsets_to_txn,
            26: self.end_txn,
            27: self.write_txn_markers,
            28: self.txn_offset_commit,
        }

    async def api_versions(self, request: wire.Request) -> Any:
        """ApiVersions as offered at this broker's ``transaction.version``."""
        return wire.api_versions_response(request, self.coordinator.rules.transaction_version)

    async def init_producer_id(self, request: wire.Request) -> Any:
        body = request.body
        if not body.transactional_id:
            return await self.idempotent_init(request)
        expected = (
            (body.producer_id, body.producer_epoch)
            if request.version >= 3 and body.producer_id >= 0
            else None
        )
        answer = await self.coordinator.init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected
        )
        return _producer_answer(request, *answer)

    async def add_partitions_to_txn(self, request: wire.Request) -> Any:
        body = request.body
        if request.version >= 4:
            return await self._add_partitions_for_brokers(request)
        topics = self.coordinator.broker.metadata_topics()
        wanted = [(topic.name, index) for topic in body.v3_and_below_topics for index in topic.partitions]
        unknown = {
            (name, index)
            for name, index in wanted
            if name not in topics or not 0 <= index < len(topics[name]["partitions"])
        }
        if unknown:
            errors = {
                position: wire.UNKNOWN_TOPIC_OR_PARTITION if position in unknown else OPERATION_NOT_ATTEMPTED
                for position in wanted
            }
        else:
            error = await self.coordinator.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                frozenset(wanted),
            )
            errors = dict.fromkeys(wanted, _for_version(request, error))
        topic_class = wire.nested(request.api.response, "AddPartitionsToTxnTopicResult")
        partition_class = wire.nested(topic_class, "AddPartitionsToTxnPartitionResult")
        by_topic: dict[str, list[Any]] = {}
        for (name, index), error in errors.items():
            by_topic.setdefault(name, []).append(
                partition_class(partition_index=index, partition_error_code=error)
            )
        return wire.response(
            request,
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[
                topic_class(name=name, results_by_partition=entries) for name, entries in by_topic.items()
            ],
        )

    async def _add_partitions_for_brokers(self, request: wire.Request) -> Any:
        """AddPartitionsToTxn v4+, the brokers' batched form: with ``verify_only`` a partition
        leader's verification (KIP-890 part 1), else the additions themselves."""
        result_class = wire.nested(request.api.response, "AddPartitionsToTxnResult")
        topic_class = wire.nested(result_class, "AddPartitionsToTxnTopicResult")
        partition_class = wire.nested(topic_class, "AddPartitionsToTxnPartitionResult")
        results = []
        for entry in request.body.transactions:
            wanted = [(topic.name, index) for topic in entry.topics for index in topic.partitions]
            producer = (entry.transactional_id, entry.producer_id, entry.producer_epoch)
            if entry.verify_only:
                errors = [self.coordinator.verify(*producer, position) for position in wanted]
            else:
                error = await self.coordinator.add_partitions(*producer, frozenset(wanted))
                errors = [error] * len(wanted)
            by_topic: dict[str, list[Any]] = {}
            for (name, index), error in zip(wanted, errors, strict=True):
                by_topic.setdefault(name, []).append(
                    partition_class(partition_index=index, partition_error_code=error)
                )
            results.append(
                result_class(
                    transactional_id=entry.transactional_id,
                    topic_results=[
                        topic_class(name=name, results_by_partition=rows) for name, rows in by_topic.items()
                    ],
                )
            )
        return wire.response(
            request, throttle_time_ms=0, error_code=wire.NONE, results_by_transaction=results
        )

    async def add_offsets_to_txn(self, request: wire.Request) -> Any:
        body = request.body
        error = await self.coordinator.add_partitions(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            frozenset({self.coordinator.offsets_partition(body.group_id)}),
        )
        return wire.response(request, throttle_time_ms=0, error_code=_for_version(request, error))

    async def end_txn(self, request: wire.Request) -> Any:
        body = request.body
        rules = self.coordinator.rules
        if request.version > rules.advertised_end_txn_version():
            return wire.response(request, throttle_time_ms=0, error_code=wire.UNSUPPORTED_VERSION)
        answer = await self.coordinator.end(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            body.committed,
            rules.bumps_epoch(request.version),
        )
        return _producer_answer(request, *answer)

    async def write_txn_markers(self, request: wire.Request) -> Any:
        result_class = wire.nested(request.api.response, "WritableTxnMarkerResult")
        topic_class = wire.nested(result_class, "WritableTxnMarkerTopicResult")
        partition_class = wire.nested(topic_class, "WritableTxnMarkerPartitionResult")
        results = []
        for entry in request.body.markers:
            marker = Marker(
                entry.producer_id, entry.producer_epoch, entry.transaction_result, entry.coordinator_epoch
            )
            wanted = [(topic.name, index) for topic in entry.topics for index in topic.partition_indexes]
            errors = await asyncio.gather(
                *(write_marker(self.partitions, marker, name, index) for name, index in wanted)
            )
            by_topic: dict[str, list[Any]] = {}
            for (name, index), error in zip(wanted, errors, strict=True):
                by_topic.setdefault(name, []).append(partition_class(partition_index=index, error_code=error))
                written = self.partitions.get((name, index))
                if name == OFFSETS_TOPIC and error == wire.NONE and written is not None:
                    self.offsets.marker_written(index, written.leader_epoch, marker)
            results.append(
                result_class(
                    producer_id=entry.producer_id,
                    topics=[topic_class(name=name, partitions=entries) for name, entries in by_topic.items()],
                )
            )
        return wire.response(request, markers=results)

    async def txn_offset_commit(self, request: wire.Request) -> Any:
        body = request.body
        now = int(time.time() * 1000)
        wanted = [
            (
                topic.name,
                entry.partition_index,
                CommittedOffset(
                    offset=entry.committed_offset,
                    leader_epoch=entry.committed_leader_epoch if request.version >= 2 else -1,
                    metadata=entry.committed_metadata or "",
                    commit_timestamp=now,
                ),
            )
            for topic in body.topics
            for entry in topic.partitions
        ]
        member = (body.member_id, body.generation_id) if request.version >= 3 else ("", -1)
        errors = await self.offsets.commit(
            body.group_id, (body.producer_id, body.producer_epoch), member, wanted, body.transactional_id
        )
        topic_class = wire.nested(request.api.response, "TxnOffsetCommitResponseTopic")
        partition_class = wire.nested(topic_class, "TxnOffsetCommitResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for (name, index, _), error in zip(wanted, errors, strict=True):
            by_topic.setdefault(name, []).append(partition_class(partition_index=index, error_code=error))
        return wire.response(
            request,
            throttle_time_ms=0,
            topics=[topic_class(name=name, partitions=entries) for name, entries in by_topic.items()],
        )
