"""A partition log's transactions: the open ones, the aborted ones, and so the last stable offset.

Kafka keeps this in its ProducerStateManager (the ongoing transactions, by first offset) and the
transaction index files (the aborted ranges).  Here it is one table, rebuilt from the log's own
batches exactly as the idempotence table is (on recovery and after every truncation), so it
follows the data through leader changes: followers build it from what they replicate.

* A transactional data batch of a producer id with no open transaction **opens** one at the
  batch's base offset; later batches of that producer id belong to it.
* A marker (:mod:`broker_impl.control_records`) **closes** the producer id's open transaction:
  COMMIT forgets it, ABORT records ``(producer id, first offset, marker offset)`` as an aborted
  range.  A marker for a producer id with no open transaction changes nothing (markers are
  idempotent: a coordinator that retries a marker, or a new coordinator that resends the markers
  of a transaction it found prepared, appends a second one harmlessly -- as Kafka does).
* The **first unstable offset** is the smallest first offset of an open transaction; the
  partition's last stable offset is ``min(HW, first unstable offset)``
  (:attr:`broker_impl.partition.Partition.last_stable_offset`): below it every transaction is
  decided.  With no transactions there is none, and the LSO is the HW.
* The coordinator epoch of the last marker of each producer id is remembered: a marker with an
  older one comes from a deposed coordinator and is refused (:meth:`check_marker`).
"""

from __future__ import annotations

import bisect
import dataclasses

from .control_records import Marker
from .records import BatchHeader

TRANSACTION_COORDINATOR_FENCED = 52


@dataclasses.dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction's range: ``first_offset`` (its first batch) to ``last_offset``
    (its ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int


class TransactionIndex:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        """Producer id -> first offset of its open transaction."""
        self.aborted: list[AbortedTransaction] = []
        """In marker order, so sorted by ``last_offset``."""
        self._aborted_ends: list[int] = []
        self._coordinator_epochs: dict[int, int] = {}

    def clear(self) -> None:
        self.open.clear()
        self.aborted.clear()
        self._aborted_ends.clear()
        self._coordinator_epochs.clear()

    def record(self, header: BatchHeader, marker: Marker | None) -> None:
        """Follow one appended batch (``marker``: the decoded marker of a control batch)."""
        if not header.is_transactional or header.producer_id < 0:
            return
        if marker is None:
            self.open.setdefault(header.producer_id, header.base_offset)
            return
        self._coordinator_epochs[header.producer_id] = max(
            marker.coordinator_epoch, self._coordinator_epochs.get(header.producer_id, -1)
        )
        first = self.open.pop(header.producer_id, None)
        if first is not None and not marker.committed:
            self.aborted.append(AbortedTransaction(header.producer_id, first, header.base_offset))
            self._aborted_ends.append(header.base_offset)

    def check_marker(self, producer_id: int, coordinator_epoch: int) -> int:
        """0 to append a marker of ``producer_id`` from a coordinator of ``coordinator_epoch``,
        TRANSACTION_COORDINATOR_FENCED when a newer coordinator already wrote one."""
        if coordinator_epoch < self._coordinator_epochs.get(producer_id, -1):
            return TRANSACTION_COORDINATOR_FENCED
        return 0

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.open.values()) if self.open else None

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """The aborted transactions a fetch of ``[start, end)`` must be told of: those whose
        marker is at or after ``start`` and whose first batch is before ``end``."""
        index = bisect.bisect_left(self._aborted_ends, start)
        return [entry for entry in self.aborted[index:] if entry.first_offset < end]
