"""Transaction markers between brokers: WriteTxnMarkers, both sides.

**Sending** (:class:`MarkerSender`, the coordinator's side): once a transaction is prepared, its
coordinator sends a WriteTxnMarkers request to the leader of each of its partitions, as Kafka's
TransactionMarkerChannelManager does, over one connection per broker; a partition whose answer is
an error (a leader change, a short ISR, a timeout) is retried against the leader the metadata
names next, until every partition has its marker -- or the coordinator is deposed (the caller
cancels the task; the next coordinator resends the markers of every transaction it loads
prepared, so none is lost).

**Writing** (:func:`write_marker`, the partition leader's side): the marker batch is appended
with ``acks=all`` (:func:`broker_impl.leader_append.append_and_wait`) unless a newer coordinator
already wrote for that producer (TRANSACTION_COORDINATOR_FENCED).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from . import wire
from .broker_view import BrokerView
from .control_records import Marker, build_marker_batch
from .leader_append import append_and_wait
from .partition import Partition

logger = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1
RETRY_SECONDS = 0.2
MARKER_TIMEOUT_SECONDS = 5.0
FINAL_ERRORS = frozenset({wire.NONE, wire.UNKNOWN_TOPIC_OR_PARTITION})
"""Answers after which a partition needs no more tries (a deleted topic needs no marker)."""
TRANSACTION_COORDINATOR_FENCED = 52


async def write_marker(
    partitions: Mapping[tuple[str, int], Partition], marker: Marker, topic: str, index: int
) -> int:
    """Append ``marker`` to the local leader of (``topic``, ``index``): the error code."""
    partition = partitions.get((topic, index))
    if partition is None:
        return wire.NOT_LEADER_OR_FOLLOWER
    if partition.role != "leader":
        return wire.NOT_LEADER_OR_FOLLOWER
    error = partition.log.transactions.check_marker(marker.producer_id, marker.coordinator_epoch)
    if error:
        return error
    batch = build_marker_batch(marker, int(time.time() * 1000))
    error, offset = await append_and_wait(partition, batch, MARKER_TIMEOUT_SECONDS)
    partition.events.emit(
        "txn-marker",
        topic=topic,
        partition=index,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        committed=marker.committed,
        coordinator_epoch=marker.coordinator_epoch,
        offset=offset,
        error_code=error,
    )
    return error


class PeerConnections:
    """Connections of this broker to the others (and itself) as a Kafka client: one per broker,
    one request at a time on each (:class:`wire.KafkaConnection` answers in order)."""

    def __init__(self, broker: BrokerView, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self._connections: dict[int, tuple[wire.KafkaConnection, asyncio.Lock]] = {}

    async def call(self, node: int, request: Any, api_key: int, version: int) -> Any:
        """``request`` to broker ``node``: its response; ConnectionError / TimeoutError."""
        address = self.broker.live_brokers().get(node)
        if node < 0 or address is None:
            raise ConnectionError(f"broker {node} is not alive")
        current = self._connections.get(node)
        if current is None or (current[0].host, current[0].port) != address:
            connection = wire.KafkaConnection(
                address[0], address[1], self.client_id, MARKER_TIMEOUT_SECONDS + 5
            )
            current = self._connections[node] = (connection, asyncio.Lock())
        async with current[1]:
            return await current[0].call(request, wire.APIS[api_key].response, version)

    def close(self) -> None:
        for connection, _ in self._connections.values():
            connection.close()
        self._connections.clear()


class MarkerSender:
    """The coordinator's WriteTxnMarkers client."""

    def __init__(self, broker: BrokerView, node_id: int) -> None:
        self.broker = broker
        self.peers = PeerConnections(broker, f"txn-coordinator-{node_id}")

    async def send(self, marker: Marker, partitions: frozenset[tuple[str, int]]) -> None:
        """Write ``marker`` to every one of ``partitions``; returns once all have it.  Raises
        nothing but :class:`asyncio.CancelledError`; gives up only on a fenced coordinator."""
        remaining = set(partitions)
        while remaining:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            topics = self.broker.metadata_topics()
            for topic, index in sorted(remaining):
                known = topics.get(topic)
                if known is None or index >= len(known["partitions"]):
                    remaining.discard((topic, index))  # deleted: nothing to mark
                    continue
                by_leader.setdefault(known["partitions"][index]["leader"], []).append((topic, index))
            results = await asyncio.gather(
                *(self._send_to(leader, marker, wanted) for leader, wanted in by_leader.items())
            )
            for answered in results:
                for position, error in answered.items():
                    if error in FINAL_ERRORS:
                        remaining.discard(position)
                    elif error == TRANSACTION_COORDINATOR_FENCED:
                        logger.info("markers of producer %d: coordinator fenced", marker.producer_id)
                        return
            if remaining:
                await asyncio.sleep(RETRY_SECONDS)

    async def _send_to(
        self, leader: int, marker: Marker, wanted: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        api = wire.APIS[WRITE_TXN_MARKERS]
        topics: dict[str, list[int]] = {}
        for topic, index in wanted:
            topics.setdefault(topic, []).append(index)
        marker_class = wire.nested(api.request, "WritableTxnMarker")
        topic_class = wire.nested(marker_class, "WritableTxnMarkerTopic")
        request = api.request(
            version=MARKERS_VERSION,
            markers=[
                marker_class(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.committed,
                    topics=[
                        topic_class(name=name, partition_indexes=indexes) for name, indexes in topics.items()
                    ],
                    coordinator_epoch=marker.coordinator_epoch,
                )
            ],
        )
        try:
            response = await self.peers.call(leader, request, WRITE_TXN_MARKERS, MARKERS_VERSION)
        except (ConnectionError, TimeoutError) as error:
            logger.info("WriteTxnMarkers to broker %d failed: %s", leader, error)
            return {position: wire.REQUEST_TIMED_OUT for position in wanted}
        answered = {position: wire.REQUEST_TIMED_OUT for position in wanted}
        for result in response.markers:
            for topic in result.topics:
                for entry in topic.partitions:
                    answered[(topic.name, entry.partition_index)] = entry.error_code
        return answered
