"""A partition leader's transaction events: ``txn-open``, ``txn-close`` and what a new leader inherits.

The last stable offset of a leader is ``min(HW, first offset of its oldest open transaction)``
(:mod:`broker_impl.txn_index`).  It changes in three places only, and each records the new value
in the event log at the moment it changes (``docs/events.md``):

* the HW moves -- the ``hw`` event carries ``lso`` (:meth:`broker_impl.partition.Partition.maybe_increment_high_watermark`);
* a marker closes an open transaction -- ``txn-close`` (here) carries ``lso``, the LSO after the
  marker: it moves at the marker's *append*, while the HW has not moved (the marker lies at the
  log end, above the HW);
* the replica becomes leader -- ``become-leader`` carries ``lso`` and ``open_transactions`` (the
  transactions its log holds open: the index is rebuilt from the replicated batches, so a new
  leader inherits them without a ``txn-open`` of its own; :func:`open_transactions`).

A batch that *opens* a transaction does not move the LSO: it is appended at the log end, at or
above the HW, so ``min`` keeps the HW.  A marker of a producer with no open transaction changes
nothing (markers are idempotent) and records nothing here.  Only leaders append markers this way;
a follower's LSO is never served.  So the sequence of a leader tenure's ``become-leader``, ``hw``
and ``txn-close`` events, in ``seq`` order, holds every LSO the leader served, and
``txn-open``/``txn-close``/``open_transactions`` every open transaction it should have held the
LSO at -- the two sides of the white-box check ``lso-past-open-transaction``
(``checker/txn/lso.py``).

Why an event of its own, not ``lso`` on ``txn-marker``: that event is the WriteTxnMarkers
handler's, written when the append's wait for the HW ends -- after the HW passed the marker, or
with ``offset`` -1 after a timeout although the marker was appended -- so it cannot say when the
transaction closed.  ``txn-close`` owns that fact (and the LSO it left); ``txn-marker`` keeps the
marker's acknowledgement, which unmarked-transaction counts.

Cost: one event per transaction per partition, as ``txn-open``, on the marker's append only;
nothing on a non-transactional append.
"""

from __future__ import annotations

from typing import Any, Protocol

from .events import EventLog
from .log import PartitionLog
from .records import BatchHeader
from .txn_index import TransactionIndex


class Leader(Protocol):
    """What these events need of a partition replica (:class:`broker_impl.partition.Partition`)."""

    topic: str
    index: int
    events: EventLog
    log: PartitionLog
    leader_epoch: int
    high_watermark: int

    @property
    def last_stable_offset(self) -> int: ...


def open_transactions(index: TransactionIndex) -> list[list[int]]:
    """``[[producer id, first offset], ...]`` of the open transactions, oldest first."""
    return sorted(([producer, first] for producer, first in index.open.items()), key=lambda pair: pair[1])


def was_open(index: TransactionIndex, header: BatchHeader) -> int | None:
    """Before a leader's append: the first offset of the transaction a marker batch would close
    (None for a data batch, or a marker of a producer with nothing open)."""
    if not header.is_control or not header.is_transactional:
        return None
    return index.open.get(header.producer_id)


def record_leader_append(leader: Leader, header: BatchHeader, first: int, closing: int | None) -> None:
    """After ``leader`` appended ``header``'s batch at ``first`` (``closing``: :func:`was_open`
    before the append): ``txn-open`` if it opened a transaction, ``txn-close`` with the LSO after
    it if it closed one (callers check ``events.enabled`` first)."""
    index = leader.log.transactions
    if not header.is_transactional or header.producer_id < 0:
        return
    if not header.is_control:
        if index.open.get(header.producer_id) == first:
            _emit(leader, "txn-open", header, first_offset=first)
        return
    if closing is None or header.producer_id in index.open:
        return
    aborted = bool(index.aborted) and index.aborted[-1].last_offset == first
    _emit(
        leader,
        "txn-close",
        header,
        epoch=leader.leader_epoch,
        committed=not aborted,
        first_offset=closing,
        offset=first,
        hw=leader.high_watermark,
        lso=leader.last_stable_offset,
    )


def _emit(leader: Leader, kind: str, header: BatchHeader, **fields: Any) -> None:
    leader.events.emit(
        kind,
        topic=leader.topic,
        partition=leader.index,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        **fields,
    )
