"""One transactional id's state at its coordinator, and every rule that changes it (pure).

Kafka's TransactionMetadata, restated.  A :class:`TxnMetadata` is immutable; the ``plan_*``
functions take the current one and a request and return a :class:`Plan`: the error to answer, or
the metadata to write to ``__transaction_state`` (the coordinator adopts it only once the write
is acknowledged -- until then the id is *pending* and other requests get CONCURRENT_TRANSACTIONS)
and whether transaction markers follow.  Every state change goes through :func:`transition`,
which checks it against :data:`VALID_PREVIOUS` -- the one table of legal transitions::

    Empty            <- Empty, CompleteCommit, CompleteAbort          (InitProducerId: epoch bump)
    Ongoing          <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/AddOffsets)
    PrepareCommit    <- Ongoing                                      (EndTxn commit)
    PrepareAbort     <- Ongoing, PrepareEpochFence                   (EndTxn abort, fence, timeout)
                        Empty, CompleteCommit, CompleteAbort          (EndTxn v5 abort of an empty
                                                                      transaction, TV2 only)
    CompleteCommit   <- PrepareCommit                                (every marker written)
    CompleteAbort    <- PrepareAbort
    PrepareEpochFence<- Ongoing                                      (InitProducerId of a newer
                                                                      producer, or a timeout)
    Dead             <- Empty, CompleteCommit, CompleteAbort          (expiry: idle past
                                                                      transactional.id.expiration.ms)

Fencing: the epoch only grows.  InitProducerId bumps it (the older producer is fenced: its
requests carry an older epoch and get PRODUCER_FENCED); an InitProducerId or a timeout that finds
a transaction open first bumps it through PrepareEpochFence and aborts the transaction with the
new epoch, so the markers themselves fence the old producer at every partition.

Rules that historical Kafka versions had differently are each one function here, so a switch is
one place: :func:`plan_end` with ``bump`` (KIP-890 part 2, ``transaction.version=2`` and a client
on EndTxn v5: the prepare of every transaction end carries the epoch bumped by one, so its markers
fence every request of the older epoch -- a late EndTxn or Produce of the transaction just ended
can no longer land in the next one, KAFKA-17754; without ``bump`` the epoch stays, as before
KIP-890) and :func:`verify_partition` (KIP-890 part 1, whose switch is
``transaction.partition.verification.enable``); both switches are read in
:mod:`broker_impl.txn_rules`.

Epoch exhaustion under KIP-890 part 2 is Kafka's: ending a transaction at epoch :data:`MAX_EPOCH`
prepares it at 32767 (its markers carry it) with ``next_producer_id`` chosen, and the completion
moves the id to ``next_producer_id`` at epoch 0 (remembering ``previous_producer_id``, so a retry
of that EndTxn is still recognised); the client is answered the new id at epoch 0 at once.
"""

from __future__ import annotations

import dataclasses
import enum

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
MAX_EPOCH = 32767 - 1
"""Kafka's Short.MAX_VALUE - 1: at this epoch a producer gets a new producer id instead."""


class TxnState(enum.Enum):
    """The states, with Kafka's byte in the ``__transaction_state`` value."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset(
        {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    ),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""State -> the states it may be entered from (Kafka's TransactionState.validPreviousStates)."""
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(Exception):
    """A transition :data:`VALID_PREVIOUS` forbids: a coordinator bug, never a client's error."""


@dataclasses.dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = -1
    """The producer id before the last epoch exhaustion under KIP-890 part 2 (-1: none)."""
    next_producer_id: int = -1
    """Set in a prepare at an exhausted epoch under KIP-890 part 2: the id its completion takes."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a request does: ``error`` to answer now, or ``write`` to store (then answer NONE);
    ``markers``: after the write, send the transaction's markers and then complete it."""

    error: int = NONE
    write: TxnMetadata | None = None
    markers: bool = False


def transition(current: TxnMetadata, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
    """``current`` moved to ``state`` (with ``changes``), if :data:`VALID_PREVIOUS` allows it."""
    if current.state not in VALID_PREVIOUS[state]:
        raise IllegalTransition(f"{current.transactional_id}: {current.state.label} -> {state.label}")
    return dataclasses.replace(current, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]


def after_end(prepared: TxnMetadata) -> tuple[int, int]:
    """The (producer id, epoch) a prepared transaction's completion leaves -- and what an EndTxn
    v5 is answered: the prepare's own (its epoch already bumped under KIP-890 part 2), or the
    next producer id at epoch 0 when the prepare exhausted the epoch."""
    if prepared.next_producer_id >= 0:
        return prepared.next_producer_id, 0
    return prepared.producer_id, prepared.producer_epoch


def check_producer(current: TxnMetadata | None, producer_id: int, producer_epoch: int) -> int:
    """NONE when a request of (``producer_id``, ``producer_epoch``) speaks for ``current``."""
    if current is None or current.producer_id != producer_id:
        return INVALID_PRODUCER_ID_MAPPING
    if producer_epoch != current.producer_epoch:
        return PRODUCER_FENCED
    return NONE


def plan_init(
    current: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    fresh_producer_id: int,
    expected: tuple[int, int] | None = None,
    fence_step: int = 1,
) -> Plan:
    """InitProducerId: a new id starts at epoch 0; a known one is bumped (fencing the older
    producer) -- after fencing and aborting an open transaction first (the client retries on
    CONCURRENT_TRANSACTIONS until the abort is complete; ``fence_step``: see
    :func:`plan_fence_and_abort`).  ``expected``: the (id, epoch) a KIP-360 client asks to bump;
    ``fresh_producer_id`` is used when the epoch is exhausted."""
    if current is None:
        return Plan(
            write=TxnMetadata(
                transactional_id, fresh_producer_id, 0, timeout_ms, S.EMPTY, last_update_ms=now_ms
            )
        )
    if (
        expected is not None
        and expected[0] >= 0
        and expected != (current.producer_id, current.producer_epoch)
    ):
        return Plan(
            error=PRODUCER_FENCED if expected[0] == current.producer_id else INVALID_PRODUCER_ID_MAPPING
        )
    if current.state in PREPARED or current.state is S.PREPARE_EPOCH_FENCE:
        return Plan(error=CONCURRENT_TRANSACTIONS)
    if current.state is S.ONGOING:
        return plan_fence_and_abort(current, now_ms, fence_step)
    if current.producer_epoch >= MAX_EPOCH:
        current = dataclasses.replace(current, producer_id=fresh_producer_id, producer_epoch=-1)
    return Plan(
        write=transition(
            current,
            S.EMPTY,
            now_ms,
            producer_epoch=current.producer_epoch + 1,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            txn_start_ms=-1,
        )
    )


def plan_fence_and_abort(current: TxnMetadata, now_ms: int, fence_step: int = 1) -> Plan:
    """Abort ``current``'s open transaction under an epoch bumped by ``fence_step`` (a newer
    producer, or the timeout): the markers carry the new epoch, so they fence the old producer
    everywhere.  Under KIP-890 part 2 the step is 2, as in Kafka (a fence, then the bump of the
    abort itself): a bump of one would make the fenced producer's own EndTxn look like the retry
    of an end (:func:`is_end_retry`) and be answered with the new epoch instead of
    PRODUCER_FENCED."""
    fenced = transition(
        current,
        S.PREPARE_EPOCH_FENCE,
        now_ms,
        producer_epoch=min(current.producer_epoch + fence_step, MAX_EPOCH),
    )
    return Plan(
        error=CONCURRENT_TRANSACTIONS, write=transition(fenced, S.PREPARE_ABORT, now_ms), markers=True
    )


def verify_partition(
    current: TxnMetadata | None, producer_id: int, producer_epoch: int, partition: tuple[str, int]
) -> int:
    """KIP-890 part 1 (``transaction.partition.verification.enable``): NONE when a partition
    leader may open a transaction of (``producer_id``, ``producer_epoch``) at ``partition`` -- the
    transaction is Ongoing and holds the partition; else the produce is refused, so a late
    produce after the transaction ended cannot open one nothing will end (KAFKA-14402)."""
    error = check_producer(current, producer_id, producer_epoch)
    if error or current is None:
        return error
    if current.state is not S.ONGOING or partition not in current.partitions:
        return INVALID_TXN_STATE
    return NONE


def plan_add_partitions(
    current: TxnMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: frozenset[tuple[str, int]],
    now_ms: int,
) -> Plan:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is (or becomes) Ongoing with
    ``partitions`` among its own.  Nothing is written when it already holds them all."""
    error = check_producer(current, producer_id, producer_epoch)
    if error or current is None:
        return Plan(error=error)
    if current.state in PREPARED or current.state is S.PREPARE_EPOCH_FENCE:
        return Plan(error=CONCURRENT_TRANSACTIONS)
    if current.state is S.ONGOING and partitions <= current.partitions:
        return Plan()
    if current.state not in VALID_PREVIOUS[S.ONGOING]:
        return Plan(error=INVALID_TXN_STATE)
    start = current.txn_start_ms if current.state is S.ONGOING else now_ms
    return Plan(
        write=transition(
            current, S.ONGOING, now_ms, partitions=current.partitions | partitions, txn_start_ms=start
        )
    )


def plan_end(
    current: TxnMetadata | None,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    bump: bool = False,
    fresh_producer_id: int = -1,
) -> Plan:
    """EndTxn: Ongoing goes to PrepareCommit / PrepareAbort (markers follow).

    Without ``bump`` (``transaction.version=1``, or a client below EndTxn v5): the epoch stays;
    a retry of an end already decided the same way is answered NONE, one decided the other way
    INVALID_TXN_STATE -- and, since the next transaction has the same (id, epoch), a *late* EndTxn
    of a finished transaction ends the next one (KAFKA-17754).  With ``bump``: see
    :func:`_plan_end_bumped`; ``fresh_producer_id`` is used when the epoch is exhausted."""
    if bump and current is not None:
        return _plan_end_bumped(current, producer_id, producer_epoch, commit, now_ms, fresh_producer_id)
    error = check_producer(current, producer_id, producer_epoch)
    if error or current is None:
        return Plan(error=error)
    wanted, done = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    if current.state is S.ONGOING:
        return Plan(write=transition(current, wanted, now_ms), markers=True)
    if current.state is done:
        return Plan()
    if current.state is wanted:
        return Plan(error=CONCURRENT_TRANSACTIONS)
    if current.state is S.PREPARE_EPOCH_FENCE:
        return Plan(error=PRODUCER_FENCED)
    return Plan(error=INVALID_TXN_STATE)


def is_end_retry(current: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """KIP-890 part 2: is an EndTxn of (``producer_id``, ``producer_epoch``) the retry of the one
    that ended ``current``'s last transaction?  Its epoch is one below the bumped one, or it is
    the last epoch of the id the exhaustion replaced (now epoch 0 of the new id)."""
    if current.producer_id == producer_id and current.producer_epoch == producer_epoch + 1:
        return True
    return (
        current.previous_producer_id == producer_id
        and producer_epoch == MAX_EPOCH
        and current.producer_epoch == 0
    )


def _plan_end_bumped(
    current: TxnMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    fresh_producer_id: int,
) -> Plan:
    """EndTxn v5 under KIP-890 part 2 (Kafka's TransactionCoordinator for TV2).

    The epoch alone tells a retry from the next transaction's end: a Complete* state answers an
    EndTxn one epoch below (:func:`is_end_retry`) NONE when decided the same way; an EndTxn of
    the current epoch there is the next (empty) transaction's: an abort is prepared (bumping
    again, no markers), a commit is INVALID_TXN_STATE.  Any other epoch is PRODUCER_FENCED -- a
    late EndTxn of an older transaction never reaches a newer one.  Every prepare bumps the epoch
    by one (an exhausted one picks ``fresh_producer_id`` for the completion)."""
    retry = is_end_retry(current, producer_id, producer_epoch)
    if current.producer_id != producer_id and not retry:
        return Plan(error=INVALID_PRODUCER_ID_MAPPING)
    same = producer_epoch == current.producer_epoch
    valid = {
        S.PREPARE_COMMIT: retry,
        S.PREPARE_ABORT: retry,
        S.COMPLETE_COMMIT: retry or same,
        S.COMPLETE_ABORT: retry or same,
    }.get(current.state, same)
    if not valid or current.state is S.PREPARE_EPOCH_FENCE:
        return Plan(error=PRODUCER_FENCED)
    wanted, done = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    if current.state is wanted:
        return Plan(error=CONCURRENT_TRANSACTIONS)
    if retry:
        return Plan() if current.state is done else Plan(error=INVALID_TXN_STATE)
    if current.state is not S.ONGOING and (commit or current.state not in COMPLETED):
        return Plan(error=INVALID_TXN_STATE)
    if current.producer_epoch >= MAX_EPOCH and fresh_producer_id < 0:
        raise ValueError(f"{current.transactional_id}: epoch exhausted and no fresh producer id")
    start = current.txn_start_ms if current.state is S.ONGOING else now_ms
    prepared = transition(
        current,
        wanted,
        now_ms,
        producer_epoch=current.producer_epoch + 1,
        next_producer_id=fresh_producer_id if current.producer_epoch >= MAX_EPOCH else -1,
        txn_start_ms=start,
    )
    return Plan(write=prepared, markers=True)


def plan_timeout(current: TxnMetadata, now_ms: int, fence_step: int = 1) -> Plan | None:
    """The abort of an Ongoing transaction older than its timeout (Kafka fences it too)."""
    if current.state is not S.ONGOING or now_ms - current.txn_start_ms <= current.timeout_ms:
        return None
    return plan_fence_and_abort(current, now_ms, fence_step)


def plan_expire(current: TxnMetadata, now_ms: int, expiration_ms: int) -> Plan | None:
    """The removal of a transactional id idle for ``expiration_ms`` (Kafka's
    ``transactional.id.expiration.ms``): only between transactions (Empty, CompleteCommit,
    CompleteAbort -- an open or prepared transaction is never dropped: its markers would be lost),
    and counted from the id's last state change.  The write is a tombstone; once stored the id is
    forgotten, and its next InitProducerId starts over with a new producer id at epoch 0, which
    fences whatever still holds the old one (INVALID_PRODUCER_ID_MAPPING at the coordinator)."""
    if current.state not in COMPLETED or now_ms - current.last_update_ms < expiration_ms:
        return None
    return Plan(write=transition(current, S.DEAD, now_ms))


def complete(current: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every marker of a prepared transaction is written: CompleteCommit / CompleteAbort."""
    state = S.COMPLETE_COMMIT if current.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    producer_id, producer_epoch = after_end(current)
    return transition(
        current,
        state,
        now_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        previous_producer_id=current.producer_id
        if producer_id != current.producer_id
        else current.previous_producer_id,
        next_producer_id=-1,
        partitions=frozenset(),
        txn_start_ms=-1,
    )
