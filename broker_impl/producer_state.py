"""Idempotent-producer bookkeeping: dedupe of retried batches per producer id.

An idempotent producer (kafka-python's default, librdkafka with ``enable.idempotence``)
numbers its batches per partition with a sequence.  A retry after a lost response
re-sends a batch the log may already hold; the broker must answer it with the
*original* offsets instead of appending it twice (a ``duplicate`` anomaly otherwise).
As in Kafka, the last five batches of each producer are remembered, and the state is
rebuilt from the log itself (on recovery and after truncation), so it follows the data
through leader changes -- followers build it from the batches they replicate.
"""

from __future__ import annotations

import collections
import dataclasses

from .records import BatchHeader

REMEMBERED_BATCHES = 5
SEQUENCE_MODULUS = 2**31

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


@dataclasses.dataclass(frozen=True, slots=True)
class BatchIdentity:
    producer_epoch: int
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


class ProducerStateTable:
    def __init__(self) -> None:
        self._producers: dict[int, collections.deque[BatchIdentity]] = {}
        self._epochs: dict[int, int] = {}
        """The latest epoch of each producer id, of data batches and transaction markers alike."""

    def clear(self) -> None:
        self._producers.clear()
        self._epochs.clear()

    def check(self, header: BatchHeader) -> tuple[int, BatchIdentity | None]:
        """Check a batch a leader is about to append.

        Returns ``(0, None)`` to append, ``(0, identity)`` for a duplicate to answer with
        ``identity``'s offsets, or ``(error_code, None)`` to reject.
        """
        if header.producer_id < 0 or header.base_sequence < 0:
            return (0, None)
        if header.producer_epoch < self._epochs.get(header.producer_id, -1):
            return (INVALID_PRODUCER_EPOCH, None)  # fenced: a newer epoch wrote, maybe a marker
        history = self._producers.get(header.producer_id)
        if not history:
            return (0, None)  # unknown producer: accept (KIP-360 leniency)
        latest = history[-1]
        if header.producer_epoch < latest.producer_epoch:
            return (INVALID_PRODUCER_EPOCH, None)
        if header.producer_epoch > latest.producer_epoch:
            return (0, None) if header.base_sequence == 0 else (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        for identity in history:
            if (
                identity.first_sequence == header.base_sequence
                and identity.last_sequence == header.last_sequence
            ):
                return (0, identity)
        if header.base_sequence != (latest.last_sequence + 1) % SEQUENCE_MODULUS:
            return (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        return (0, None)

    def record(self, header: BatchHeader, is_marker: bool = False) -> None:
        """Remember an appended batch (leader or follower).  A transaction marker carries no
        sequence but its epoch fences the producer's older epochs (the coordinator writes the
        markers of a fenced or timed-out producer with a bumped epoch)."""
        if header.producer_id >= 0 and (is_marker or header.base_sequence >= 0):
            self._epochs[header.producer_id] = max(
                header.producer_epoch, self._epochs.get(header.producer_id, -1)
            )
        if is_marker:
            history = self._producers.get(header.producer_id)
            if history and history[-1].producer_epoch < header.producer_epoch:
                history.clear()
            return
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        history = self._producers.setdefault(header.producer_id, collections.deque(maxlen=REMEMBERED_BATCHES))
        if history and history[-1].producer_epoch != header.producer_epoch:
            history.clear()
        history.append(
            BatchIdentity(
                header.producer_epoch,
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
            )
        )
