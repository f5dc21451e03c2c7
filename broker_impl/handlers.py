"""Kafka API handlers of a broker: one method per API, each returning a response body.

Error behaviour follows Kafka: NOT_LEADER_OR_FOLLOWER from a non-leader,
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the request's leader epoch is older /
newer than ours (KIP-320; with ``leader.epoch.fencing.enable=false`` the request's epoch
is ignored, as by brokers before Kafka 2.1), NOT_ENOUGH_REPLICAS when ``acks=all`` meets an ISR smaller than
``min.insync.replicas``, REQUEST_TIMED_OUT when ``acks=all`` waits past the request's
timeout, OFFSET_OUT_OF_RANGE outside ``[log start, LEO]``.  InitProducerId here is the idempotent
producer's; with a transactional id it goes to :mod:`broker_impl.txn_handlers`.  Fetch and
ListOffsets in read_committed (isolation level 1) stop at the last stable offset, and such a Fetch
returns the aborted transactions of its range.
``__consumer_offsets`` and ``__transaction_state`` are internal, as in Kafka: Metadata marks them
so and a client's Produce to them is refused with INVALID_TOPIC_EXCEPTION (only the coordinators
append there; their APIs are in :mod:`broker_impl.group_handlers` and ``txn_handlers``).

Every refusal of a request for a partition this broker holds a replica of --
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER -- is a ``fencing-answer``
event in the broker's event log (``docs/events.md``), with both epochs and who asked.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import records, wire
from .broker_view import RequestBrokerView
from .group_records import OFFSETS_TOPIC
from .partition import Partition
from .records import CorruptBatch
from .txn_records import TRANSACTION_STATE_TOPIC
from .txn_verification import TxnVerifier, record_refusal

logger = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
FENCING_ANSWERS = {
    wire.FENCED_LEADER_EPOCH: "FENCED_LEADER_EPOCH",
    wire.UNKNOWN_LEADER_EPOCH: "UNKNOWN_LEADER_EPOCH",
    wire.NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_OR_FOLLOWER",
}
"""The refusals recorded as ``fencing-answer`` events, by error code."""


class Handlers:
    def __init__(self, broker: RequestBrokerView, verifier: TxnVerifier | None = None) -> None:
        self.broker = broker
        self.verifier = verifier

    def _lookup(
        self,
        topic: str,
        index: int,
        current_leader_epoch: int = -1,
        *,
        api: str = "unknown",
        replica: int = -1,
    ) -> tuple[int, Partition | None]:
        """The local leader replica, or the error code to answer with.  ``api`` and
        ``replica`` (the requesting follower, -1 for a client) name the request in the
        ``fencing-answer`` event a refusal of a local replica records."""
        partition = self.broker.partitions.get((topic, index))
        if partition is None:
            known = self.broker.metadata_topics().get(topic)
            if known is None or index >= len(known["partitions"]):
                return wire.UNKNOWN_TOPIC_OR_PARTITION, None
            return wire.NOT_LEADER_OR_FOLLOWER, None
        error = wire.NONE
        if current_leader_epoch >= 0 and partition.rules.epoch_fencing:
            if current_leader_epoch < partition.leader_epoch:
                error = wire.FENCED_LEADER_EPOCH
            elif current_leader_epoch > partition.leader_epoch:
                error = wire.UNKNOWN_LEADER_EPOCH
        if error == wire.NONE and partition.role != "leader":
            error = wire.NOT_LEADER_OR_FOLLOWER
        if error != wire.NONE:
            self._record_refusal(partition, error, api, current_leader_epoch, replica)
            return error, None
        return wire.NONE, partition

    @staticmethod
    def _record_refusal(partition: Partition, error: int, api: str, request_epoch: int, replica: int) -> None:
        partition.events.emit(
            "fencing-answer",
            topic=partition.topic,
            partition=partition.index,
            api=api,
            error=FENCING_ANSWERS[error],
            error_code=error,
            request_epoch=request_epoch,
            epoch=partition.leader_epoch,
            role=partition.role,
            leader=partition.leader,
            replica=replica,
        )

    # ---- metadata -----------------------------------------------------------------------

    async def api_versions(self, request: wire.Request) -> Any:
        return wire.api_versions_response(request)

    async def metadata(self, request: wire.Request) -> Any:
        response_class = request.api.response
        broker_class = wire.nested(response_class, "MetadataResponseBroker")
        topic_class = wire.nested(response_class, "MetadataResponseTopic")
        partition_class = wire.nested(topic_class, "MetadataResponsePartition")
        topics = self.broker.metadata_topics()
        live = self.broker.live_brokers()
        requested = request.body.topics
        if requested is None or (request.version == 0 and not requested):
            names = sorted(topics)
        else:
            names = [entry.name for entry in requested]
        allow_create = (
            getattr(request.body, "allow_auto_topic_creation", True) if request.version >= 4 else True
        )
        topic_entries = []
        for name in names:
            topic = topics.get(name)
            if topic is None:
                error = wire.UNKNOWN_TOPIC_OR_PARTITION
                if allow_create and self.broker.settings["auto.create.topics.enable"] and name:
                    error = await self.broker.auto_create_topic(name)
                topic_entries.append(
                    topic_class(error_code=error, name=name, topic_id=None, is_internal=False, partitions=[])
                )
                continue
            partitions = []
            for index, state in enumerate(topic["partitions"]):
                leader = state["leader"]
                partitions.append(
                    partition_class(
                        error_code=wire.NONE if leader >= 0 else wire.LEADER_NOT_AVAILABLE,
                        partition_index=index,
                        leader_id=leader,
                        leader_epoch=state["leader_epoch"],
                        replica_nodes=state["replicas"],
                        isr_nodes=state["isr"],
                        offline_replicas=[r for r in state["replicas"] if r not in live],
                    )
                )
            topic_entries.append(
                topic_class(
                    error_code=wire.NONE,
                    name=name,
                    topic_id=topic["id"],
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=partitions,
                )
            )
        brokers = [
            broker_class(node_id=node, host=host, port=port, rack=None)
            for node, (host, port) in sorted(live.items())
        ]
        return wire.response(
            request,
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.broker.cluster_id,
            controller_id=min(live) if live else -1,
            topics=topic_entries,
        )

    async def create_topics(self, request: wire.Request) -> Any:
        result_class = wire.nested(request.api.response, "CreatableTopicResult")
        results = []
        for topic in request.body.topics:
            error, message = await self.broker.create_topic(
                topic.name, topic.num_partitions, topic.replication_factor, request.body.timeout_ms
            )
            results.append(result_class(name=topic.name, error_code=error, error_message=message))
        return wire.response(request, throttle_time_ms=0, topics=results)

    # ---- produce ------------------------------------------------------------------------

    async def produce(self, request: wire.Request) -> Any:
        body = request.body
        acks = body.acks
        topic_class = wire.nested(request.api.response, "TopicProduceResponse")
        partition_class = wire.nested(topic_class, "PartitionProduceResponse")
        waits = []
        for topic in body.topic_data:
            for data in topic.partition_data:
                waits.append(
                    self._produce_partition(
                        topic.name, data.index, data.records, acks, body.timeout_ms, body.transactional_id
                    )
                )
        results = await asyncio.gather(*waits)
        by_topic: dict[str, list[Any]] = {}
        for name, index, error, base_offset, log_start in results:
            by_topic.setdefault(name, []).append(
                partition_class(
                    index=index,
                    error_code=error,
                    base_offset=base_offset,
                    log_append_time_ms=-1,
                    log_start_offset=log_start,
                    record_errors=[],
                    error_message=None,
                )
            )
        if acks == 0:
            return None
        return wire.response(
            request,
            throttle_time_ms=0,
            responses=[
                topic_class(name=name, partition_responses=partitions)
                for name, partitions in by_topic.items()
            ],
        )

    async def _produce_partition(
        self,
        topic: str,
        index: int,
        data: bytes | None,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None,
    ) -> tuple[str, int, int, int, int]:
        if acks not in (0, 1, -1):
            return topic, index, wire.INVALID_REQUIRED_ACKS, -1, -1
        if topic in INTERNAL_TOPICS:  # only the coordinators write there (Kafka: internal topics)
            return topic, index, wire.INVALID_TOPIC_EXCEPTION, -1, -1
        error, partition = self._lookup(topic, index, api="produce")
        if partition is None:
            return topic, index, error, -1, -1
        min_insync = partition.rules.min_insync_replicas
        if acks == -1 and len(partition.isr) < min_insync:
            return topic, index, wire.NOT_ENOUGH_REPLICAS, -1, -1
        buffer = bytearray(data or b"")
        try:
            batches = list(records.iterate_batches(buffer))
        except CorruptBatch as problem:
            logger.warning("%s: rejecting produce: %s", partition.name, problem)
            code = wire.UNSUPPORTED_FOR_MESSAGE_FORMAT if "magic" in str(problem) else wire.CORRUPT_MESSAGE
            return topic, index, code, -1, -1
        if not batches:
            return topic, index, wire.INVALID_RECORD, -1, -1
        first_offset = -1
        last_offset = -1
        for position, header in batches:
            error, duplicate = partition.log.check_producer(header)
            if not error and duplicate is None and self.verifier and self.verifier.needed(partition, header):
                error = await self.verifier.verify(transactional_id, header, topic, index)  # KIP-890 part 1
            if error:
                record_refusal(partition, header, error)
                return topic, index, error, -1, -1
            if duplicate is not None:
                first, last = duplicate.base_offset, duplicate.last_offset
            else:
                batch = bytearray(buffer[position : position + header.size])
                first, last = partition.append_as_leader(batch, header)
            first_offset = first if first_offset < 0 else first_offset
            last_offset = max(last_offset, last)
        partition.data_appended.notify()
        partition.maybe_increment_high_watermark()
        if acks != -1:
            return topic, index, wire.NONE, first_offset, partition.log.log_start_offset
        waiter = partition.add_ack_waiter(last_offset + 1)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(waiter.future), timeout_ms / 1000)
        except TimeoutError:
            partition.remove_ack_waiter(waiter)
            return topic, index, wire.REQUEST_TIMED_OUT, -1, -1
        if outcome != wire.NONE:
            return topic, index, outcome, -1, -1
        if len(partition.isr) < min_insync:
            return topic, index, wire.NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1, -1
        return topic, index, wire.NONE, first_offset, partition.log.log_start_offset

    # ---- fetch --------------------------------------------------------------------------

    async def fetch(self, request: wire.Request) -> Any:
        body = request.body
        follower = body.replica_id >= 0
        deadline = asyncio.get_running_loop().time() + max(0, body.max_wait_ms) / 1000
        while True:
            responses, bytes_found, errors, waiters = self._fetch_round(request, follower)
            remaining = deadline - asyncio.get_running_loop().time()
            if bytes_found >= max(1, body.min_bytes) or errors or remaining <= 0 or not waiters:
                return wire.response(
                    request, throttle_time_ms=0, error_code=wire.NONE, session_id=0, responses=responses
                )
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)

    def _fetch_round(self, request: wire.Request, follower: bool) -> tuple[list[Any], int, bool, list[Any]]:
        body = request.body
        topic_class = wire.nested(request.api.response, "FetchableTopicResponse")
        partition_class = wire.nested(topic_class, "PartitionData")
        budget = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
        total = 0
        errors = False
        waiters: list[Any] = []
        responses = []
        for topic in body.topics:
            partitions = []
            for fetch in topic.partitions:
                error, partition = self._lookup(
                    topic.topic,
                    fetch.partition,
                    fetch.current_leader_epoch,
                    api="fetch",
                    replica=body.replica_id,
                )
                data = b""
                high_watermark = log_start = stable = -1
                aborted: list[Any] | None = None if error else []
                if partition is not None and follower and body.replica_id not in partition.remote:
                    error = wire.NOT_LEADER_OR_FOLLOWER  # a leader refuses a replica it does not lead
                    self._record_refusal(
                        partition, error, "fetch", fetch.current_leader_epoch, body.replica_id
                    )
                    partition = None
                if partition is not None:
                    high_watermark, stable = partition.high_watermark, partition.last_stable_offset
                    log_start = partition.log.log_start_offset
                    end = partition.log_end_offset
                    if fetch.fetch_offset > end or fetch.fetch_offset < log_start:
                        error = wire.OFFSET_OUT_OF_RANGE
                    else:
                        if follower:
                            partition.record_follower_fetch(body.replica_id, fetch.fetch_offset)
                            self.broker.note_follower_fetch(partition)
                            high_watermark = partition.high_watermark
                        committed_only = not follower and request.version >= 4 and body.isolation_level == 1
                        limit = end if follower else stable if committed_only else high_watermark
                        room = min(fetch.partition_max_bytes, budget - total)
                        if room > 0 or total == 0:
                            data = partition.log.read(fetch.fetch_offset, max(room, 1), limit)
                        if committed_only:
                            aborted = self._aborted(partition, fetch.fetch_offset, limit, partition_class)
                        total += len(data)
                        notifier = partition.data_appended if follower else partition.high_watermark_moved
                        waiters.append(notifier.waiter())
                if error != wire.NONE:
                    errors = True
                partitions.append(
                    partition_class(
                        partition_index=fetch.partition,
                        error_code=error,
                        high_watermark=high_watermark,
                        last_stable_offset=stable,
                        log_start_offset=log_start,
                        aborted_transactions=None if error else aborted,
                        preferred_read_replica=-1,
                        records=data,
                    )
                )
            responses.append(topic_class(topic=topic.topic, partitions=partitions))
        return responses, total, errors, waiters

    @staticmethod
    def _aborted(partition: Partition, start: int, end: int, partition_class: Any) -> list[Any]:
        """The aborted transactions a read_committed fetch of ``[start, end)`` returns."""
        entry_class = wire.nested(partition_class, "AbortedTransaction")
        return [
            entry_class(producer_id=entry.producer_id, first_offset=entry.first_offset)
            for entry in partition.log.transactions.aborted_between(start, end)
        ]

    # ---- offsets --------------------------------------------------------------------------

    async def list_offsets(self, request: wire.Request) -> Any:
        body = request.body
        topic_class = wire.nested(request.api.response, "ListOffsetsTopicResponse")
        partition_class = wire.nested(topic_class, "ListOffsetsPartitionResponse")
        topics = []
        for topic in body.topics:
            partitions = []
            for entry in topic.partitions:
                error, partition = self._lookup(
                    topic.name,
                    entry.partition_index,
                    entry.current_leader_epoch,
                    api="list-offsets",
                    replica=body.replica_id,
                )
                offset, timestamp, epoch = -1, -1, -1
                if partition is not None:
                    committed_only = request.version >= 2 and body.isolation_level == 1
                    found = self._find_offset(
                        partition, entry.timestamp, body.replica_id >= 0, committed_only
                    )
                    if found is not None:
                        offset, timestamp, epoch = found
                partitions.append(
                    partition_class(
                        partition_index=entry.partition_index,
                        error_code=error,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            topics.append(topic_class(name=topic.name, partitions=partitions))
        return wire.response(request, throttle_time_ms=0, topics=topics)

    @staticmethod
    def _find_offset(
        partition: Partition, timestamp: int, from_replica: bool, committed_only: bool = False
    ) -> tuple[int, int, int] | None:
        """(offset, timestamp, epoch) for ListOffsets; for read_committed, LATEST is the LSO and a
        timestamp's offset must be below it."""
        log = partition.log
        if timestamp == LATEST_TIMESTAMP:
            offset = log.log_end_offset if from_replica else partition.high_watermark
            offset = partition.last_stable_offset if committed_only and not from_replica else offset
            return (
                offset,
                -1,
                log.epochs.epoch_for_offset(offset - 1) if offset > 0 else log.epochs.latest_epoch(),
            )
        if timestamp == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1, log.epochs.epoch_for_offset(log.log_start_offset)
        if timestamp == MAX_TIMESTAMP:
            return log.max_timestamp()
        found = log.offset_for_timestamp(timestamp)
        visible = partition.last_stable_offset if committed_only else partition.high_watermark
        if found is None or found[0] >= visible:
            return None
        return found

    async def offset_for_leader_epoch(self, request: wire.Request) -> Any:
        topic_class = wire.nested(request.api.response, "OffsetForLeaderTopicResult")
        partition_class = wire.nested(topic_class, "EpochEndOffset")
        topics = []
        for topic in request.body.topics:
            partitions = []
            for entry in topic.partitions:
                error, partition = self._lookup(
                    topic.topic,
                    entry.partition,
                    entry.current_leader_epoch,
                    api="offset-for-leader-epoch",
                    replica=getattr(request.body, "replica_id", -1),
                )
                epoch, end_offset = -1, -1
                if partition is not None:
                    epoch, end_offset = partition.log.epochs.end_offset_for(
                        entry.leader_epoch, partition.log_end_offset
                    )
                partitions.append(
                    partition_class(
                        error_code=error, partition=entry.partition, leader_epoch=epoch, end_offset=end_offset
                    )
                )
            topics.append(topic_class(topic=topic.topic, partitions=partitions))
        return wire.response(request, throttle_time_ms=0, topics=topics)

    async def init_producer_id(self, request: wire.Request) -> Any:
        body = request.body
        if request.version >= 3 and body.producer_id >= 0:
            return wire.response(
                request,
                throttle_time_ms=0,
                error_code=0,
                producer_id=body.producer_id,
                producer_epoch=(body.producer_epoch + 1) % 32767,
            )
        producer_id = await self.broker.allocate_producer_id()
        if producer_id < 0:
            return wire.response(
                request, throttle_time_ms=0, error_code=15, producer_id=-1, producer_epoch=-1
            )
        return wire.response(
            request, throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0
        )

    def table(self) -> dict[int, Any]:
        return {
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            3: self.metadata,
            18: self.api_versions,
            19: self.create_topics,
            22: self.init_producer_id,
            23: self.offset_for_leader_epoch,
        }
