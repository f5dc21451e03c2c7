"""The follower side of replication: truncate per the truncation mode, then fetch.

One task per followed partition.  On becoming follower the broker first truncates:

* ``high-watermark`` (pre-0.11 Kafka): done by the broker before this task starts --
  the log is cut at the replica's own HW, whatever the leader holds.
* ``leader-epoch`` (KIP-101, KIP-279): this task asks the leader
  ``OffsetsForLeaderEpoch(latest local epoch)`` and truncates to the answer; if the
  leader answers with an older epoch the follower does not hold, it truncates to its
  own end of that older epoch and asks again.  If the leader cannot be reached the
  follower does **not** truncate; it retries until it can ask.  With
  ``leader.epoch.lookup=single`` (KIP-101 as first shipped) the follower asks once and
  truncates to ``min(answered end offset, own LEO)``, whatever epoch the answer names:
  after fast back-to-back leader changes the two logs then keep different lineages
  below that offset (KAFKA-6361).

Then it fetches from its LEO with the real Fetch API (``replica_id`` = its node id),
appends what it gets and sets its HW to ``min(leader HW, own LEO)``.  With epoch fencing
(KIP-320, ``leader.epoch.fencing.enable``) every Fetch, OffsetsForLeaderEpoch and
ListOffsets carries the follower's ``current_leader_epoch``, so a leader of another
epoch refuses it (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH) instead of serving a
replica whose metadata is stale; without it they carry -1.

A fetcher serves one (leader, epoch) only: it applies an answer -- records, HW, a truncation
point -- only while its partition still follows the leader of the epoch it was started for,
and ends when it does not.  The broker cancels it on every change, but a cancellation can be
lost (``asyncio.wait_for`` before Python 3.12 returns the inner call's result when that call
had finished by the time the cancelled task resumes, CPython gh-86296); a new leader would then
append the deposed leader's records behind its own epoch start and keep fetching from it.
Kafka's AbstractFetcherThread likewise drops a response for a partition no longer in its fetch
states or fetched under another leader epoch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import wire
from .checkpoints import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache
from .partition import Partition
from .records import CorruptBatch

logger = logging.getLogger(__name__)

FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 7
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
RETRIABLE_LEADERSHIP_ERRORS = (
    wire.NOT_LEADER_OR_FOLLOWER,
    wire.FENCED_LEADER_EPOCH,
    wire.UNKNOWN_LEADER_EPOCH,
    wire.UNKNOWN_TOPIC_OR_PARTITION,
    wire.LEADER_NOT_AVAILABLE,
)


def truncation_step(
    epochs: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
    answer_epoch: int,
    answer_end_offset: int,
    *,
    iterative: bool,
) -> tuple[int, bool]:
    """Where a follower truncates after one OffsetsForLeaderEpoch answer, and whether it is done.

    ``epochs`` and ``log_end_offset`` are the follower's; the answer is the leader's reply to
    a query for the follower's latest epoch.  Pure, so the rule is tested against the
    divergence cases of the TLA+ description without a network:

    * undefined answer (the leader knows no such epoch, or has none) -> the follower's HW,
      done -- KIP-101's fallback;
    * ``iterative=False`` (KIP-101 as first shipped) -> ``min(answered end, own LEO)``, done,
      whatever epoch the answer names;
    * the follower holds the answered epoch -> ``min(own end of it, answered end, LEO)``, done;
    * it holds an older epoch only -> its own end of that older epoch, **not** done: ask again
      with the new latest epoch (KIP-279);
    * it holds nothing at or below the answered epoch -> ``min(answered end, LEO)``, done.
    """
    if answer_end_offset == UNDEFINED_OFFSET or answer_epoch == UNDEFINED_EPOCH:
        return high_watermark, True
    if not iterative:
        return min(answer_end_offset, log_end_offset), True
    own_epoch, own_end = epochs.end_offset_for(answer_epoch, log_end_offset)
    if own_epoch == UNDEFINED_EPOCH:
        return min(answer_end_offset, log_end_offset), True
    if own_epoch != answer_epoch:
        return min(own_end, log_end_offset), False
    return min(own_end, answer_end_offset, log_end_offset), True


class _NotFollowing(Exception):
    """The partition no longer follows the leader and epoch this fetcher serves."""


class ReplicaFetcher:
    def __init__(
        self, partition: Partition, node_id: int, leader_address: tuple[str, int], settings: dict[str, Any]
    ) -> None:
        self.partition = partition
        self.node_id = node_id
        self.epoch_mode = settings["truncation.mode"] == "leader-epoch"
        self.rules = partition.rules
        self.wait_ms = settings["replica.fetch.wait.max.ms"]
        self.max_bytes = settings["replica.fetch.max.bytes"]
        self.backoff = settings["replica.fetch.backoff.ms"] / 1000
        timeout = settings["replica.socket.timeout.ms"] / 1000
        self.connection = wire.KafkaConnection(
            *leader_address, client_id=f"replica-fetcher-{node_id}", timeout=timeout
        )
        self.epoch = partition.leader_epoch
        self.leader = partition.leader

    def _check_following(self) -> None:
        """Raise :class:`_NotFollowing` unless the partition still follows this fetcher's leader
        in its epoch and its log is open (a replica reassigned away keeps its leader and epoch
        but is closed and deleted); called after every answer, before anything of it is applied."""
        partition = self.partition
        if (
            partition.role != "follower"
            or partition.log.closed
            or (partition.leader, partition.leader_epoch)
            != (
                self.leader,
                self.epoch,
            )
        ):
            raise _NotFollowing

    async def run(self) -> None:
        truncated = not self.epoch_mode  # high-watermark mode truncated before we started
        try:
            while True:
                self._check_following()
                try:
                    if not truncated:
                        truncated = await self._truncate_by_leader_epoch()
                        if not truncated:
                            await asyncio.sleep(self.backoff)
                        continue
                    await self._fetch_once()
                except (ConnectionError, TimeoutError) as error:
                    logger.info(
                        "%s: fetch from leader %s:%d failed: %s",
                        self.partition.name,
                        self.connection.host,
                        self.connection.port,
                        error,
                    )
                    await asyncio.sleep(self.backoff)
                except CorruptBatch as error:
                    logger.error("%s: bad batch from leader: %s; refetching", self.partition.name, error)
                    await asyncio.sleep(self.backoff)
        except _NotFollowing:
            logger.info(
                "%s: no longer following %d in epoch %d; fetcher stops",
                self.partition.name,
                self.leader,
                self.epoch,
            )
        finally:
            self.connection.close()

    @property
    def _request_epoch(self) -> int:
        return self.epoch if self.rules.epoch_fencing else -1

    # ---- KIP-101 truncation -----------------------------------------------------------

    async def _truncate_by_leader_epoch(self) -> bool:
        """One OffsetsForLeaderEpoch round; True when truncation is complete."""
        log = self.partition.log
        latest = log.epochs.latest_epoch()
        if latest == UNDEFINED_EPOCH:
            if log.log_end_offset > 0:
                self.partition.truncate_to(self.partition.high_watermark, reason="no-leader-epoch")
            return True
        request_class = wire.APIS[23].request
        topic_class = wire.nested(request_class, "OffsetForLeaderTopic")
        partition_class = wire.nested(topic_class, "OffsetForLeaderPartition")
        request = request_class(
            version=OFFSET_FOR_LEADER_EPOCH_VERSION,
            replica_id=self.node_id,
            topics=[
                topic_class(
                    topic=self.partition.topic,
                    partitions=[
                        partition_class(
                            partition=self.partition.index,
                            current_leader_epoch=self._request_epoch,
                            leader_epoch=latest,
                        )
                    ],
                )
            ],
        )
        response = await self.connection.call(
            request, wire.APIS[23].response, OFFSET_FOR_LEADER_EPOCH_VERSION
        )
        self._check_following()
        answer = response.topics[0].partitions[0]
        if answer.error_code != wire.NONE:
            logger.info("%s: OffsetsForLeaderEpoch error %d", self.partition.name, answer.error_code)
            return False
        target, complete = truncation_step(
            log.epochs,
            log.log_end_offset,
            self.partition.high_watermark,
            answer.leader_epoch,
            answer.end_offset,
            iterative=self.rules.iterative_epoch_lookup,
        )
        logger.info(
            "%s: epoch %d -> leader says (epoch %d, end %d); truncating to %d",
            self.partition.name,
            latest,
            answer.leader_epoch,
            answer.end_offset,
            target,
        )
        self.partition.truncate_to(
            target,
            reason="leader-epoch",
            queried_epoch=latest,
            answer_epoch=answer.leader_epoch,
            answer_end_offset=answer.end_offset,
            complete=complete,
        )
        return complete

    # ---- fetching ---------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        partition = self.partition
        request_class = wire.APIS[1].request
        topic_class = wire.nested(request_class, "FetchTopic")
        partition_class = wire.nested(topic_class, "FetchPartition")
        fetch_offset = partition.log_end_offset
        request = request_class(
            version=FETCH_VERSION,
            replica_id=self.node_id,
            max_wait_ms=self.wait_ms,
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                topic_class(
                    topic=partition.topic,
                    partitions=[
                        partition_class(
                            partition=partition.index,
                            current_leader_epoch=self._request_epoch,
                            fetch_offset=fetch_offset,
                            last_fetched_epoch=-1,
                            log_start_offset=partition.log.log_start_offset,
                            partition_max_bytes=self.max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        timeout = self.wait_ms / 1000 + self.connection._timeout
        response = await self.connection.call(request, wire.APIS[1].response, FETCH_VERSION, timeout=timeout)
        if response.error_code != wire.NONE:
            raise ConnectionError(f"fetch error {response.error_code}")
        self._check_following()
        data = response.responses[0].partitions[0]
        if partition.log_end_offset != fetch_offset:
            return  # truncated meanwhile (cannot happen with one task, but never append out of place)
        if data.error_code == wire.NONE:
            if data.records:
                partition.log.append_as_follower(memoryview(data.records))
            partition.follower_appended(data.high_watermark)
        elif data.error_code == wire.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range()
        elif data.error_code in RETRIABLE_LEADERSHIP_ERRORS:
            logger.info(
                "%s: leader answered error %d; waiting for new metadata", partition.name, data.error_code
            )
            await asyncio.sleep(self.backoff)
        else:
            logger.warning("%s: fetch error %d", partition.name, data.error_code)
            await asyncio.sleep(self.backoff)

    async def _handle_out_of_range(self) -> None:
        """Our LEO is past the leader's: truncate to the leader's LEO (Kafka's behaviour
        in both modes; in leader-epoch mode it only follows an epoch mismatch)."""
        request_class = wire.APIS[2].request
        topic_class = wire.nested(request_class, "ListOffsetsTopic")
        partition_class = wire.nested(topic_class, "ListOffsetsPartition")
        request = request_class(
            version=LIST_OFFSETS_VERSION,
            replica_id=self.node_id,
            isolation_level=0,
            topics=[
                topic_class(
                    name=self.partition.topic,
                    partitions=[
                        partition_class(
                            partition_index=self.partition.index,
                            current_leader_epoch=self._request_epoch,
                            timestamp=-1,
                        )
                    ],
                )
            ],
        )
        response = await self.connection.call(request, wire.APIS[2].response, LIST_OFFSETS_VERSION)
        self._check_following()
        answer = response.topics[0].partitions[0]
        if answer.error_code == wire.NONE and answer.offset < self.partition.log_end_offset:
            logger.warning(
                "%s: out of range; leader LEO %d < ours %d",
                self.partition.name,
                answer.offset,
                self.partition.log_end_offset,
            )
            self.partition.truncate_to(answer.offset, reason="out-of-range")
        else:
            await asyncio.sleep(self.backoff)
