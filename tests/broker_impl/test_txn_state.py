"""A transactional id's state machine and its records (``broker_impl.txn_state``, ``txn_records``).

Pure: no broker, no clock.  The transitions are Kafka's TransactionMetadata rules; each request's
plan is checked for the error it answers, the metadata it writes and whether markers follow.
"""

from __future__ import annotations

import dataclasses

import pytest

from broker_impl import txn_state
from broker_impl.txn_records import decode, encode_key, encode_value, transaction_partition
from broker_impl.txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
    IllegalTransition,
    TxnMetadata,
    TxnState,
    complete,
    plan_add_partitions,
    plan_end,
    plan_init,
    plan_timeout,
    transition,
)

S = TxnState
T0 = 1_000_000
PARTITIONS = frozenset({("t", 0), ("t", 1)})


def initialized() -> TxnMetadata:
    plan = plan_init(None, "tx", 60000, T0, fresh_producer_id=7)
    assert plan.error == 0 and plan.write is not None and not plan.markers
    return plan.write


def ongoing() -> TxnMetadata:
    current = initialized()
    plan = plan_add_partitions(current, 7, 0, PARTITIONS, T0 + 1)
    assert plan.write is not None
    return plan.write


def test_a_new_transactional_id_starts_empty_at_epoch_zero() -> None:
    current = initialized()
    assert (current.producer_id, current.producer_epoch, current.state) == (7, 0, S.EMPTY)


def test_init_bumps_the_epoch_of_a_known_id() -> None:
    current = dataclasses.replace(initialized(), state=S.COMPLETE_COMMIT)
    plan = plan_init(current, "tx", 60000, T0, fresh_producer_id=-1)
    assert plan.write is not None
    assert (plan.write.producer_id, plan.write.producer_epoch, plan.write.state) == (7, 1, S.EMPTY)


def test_init_of_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    current = dataclasses.replace(initialized(), producer_epoch=txn_state.MAX_EPOCH)
    plan = plan_init(current, "tx", 60000, T0, fresh_producer_id=99)
    assert plan.write is not None and (plan.write.producer_id, plan.write.producer_epoch) == (99, 0)


def test_init_during_an_open_transaction_fences_and_aborts_it() -> None:
    plan = plan_init(ongoing(), "tx", 60000, T0 + 5, fresh_producer_id=-1)
    assert plan.error == CONCURRENT_TRANSACTIONS  # the client retries until the abort is complete
    assert plan.write is not None and plan.markers
    assert (plan.write.state, plan.write.producer_epoch, plan.write.partitions) == (
        S.PREPARE_ABORT,
        1,
        PARTITIONS,
    )


def test_init_while_prepared_is_concurrent() -> None:
    prepared = transition(ongoing(), S.PREPARE_COMMIT, T0)
    assert plan_init(prepared, "tx", 60000, T0, fresh_producer_id=-1).error == CONCURRENT_TRANSACTIONS


def test_add_partitions_opens_the_transaction_once_and_adds_nothing_twice() -> None:
    current = ongoing()
    assert (current.state, current.partitions, current.txn_start_ms) == (S.ONGOING, PARTITIONS, T0 + 1)
    assert plan_add_partitions(current, 7, 0, frozenset({("t", 0)}), T0 + 2).write is None
    grown = plan_add_partitions(current, 7, 0, frozenset({("u", 0)}), T0 + 3).write
    assert grown is not None and grown.partitions == PARTITIONS | {("u", 0)}
    assert grown.txn_start_ms == T0 + 1  # the transaction's start does not move


@pytest.mark.parametrize(
    ("producer_id", "epoch", "error"),
    [(7, 1, PRODUCER_FENCED), (7, -1, PRODUCER_FENCED), (8, 0, INVALID_PRODUCER_ID_MAPPING)],
)
def test_requests_of_another_epoch_or_id_are_refused(producer_id: int, epoch: int, error: int) -> None:
    assert plan_add_partitions(ongoing(), producer_id, epoch, PARTITIONS, T0).error == error
    assert plan_end(ongoing(), producer_id, epoch, True, T0).error == error


def test_end_prepares_then_completes_and_a_retry_is_answered_by_the_outcome() -> None:
    plan = plan_end(ongoing(), 7, 0, True, T0 + 5)
    assert plan.write is not None and plan.markers and plan.write.state is S.PREPARE_COMMIT
    assert plan_end(plan.write, 7, 0, True, T0 + 6).error == CONCURRENT_TRANSACTIONS
    assert plan_end(plan.write, 7, 0, False, T0 + 6).error == INVALID_TXN_STATE
    done = complete(plan.write, T0 + 7)
    assert (done.state, done.partitions, done.producer_epoch) == (S.COMPLETE_COMMIT, frozenset(), 0)
    assert plan_end(done, 7, 0, True, T0 + 8) == txn_state.Plan()  # the retry of a commit that happened
    assert plan_end(done, 7, 0, False, T0 + 8).error == INVALID_TXN_STATE
    assert plan_end(initialized(), 7, 0, True, T0).error == INVALID_TXN_STATE  # nothing open


def test_abort_completes_as_complete_abort() -> None:
    plan = plan_end(ongoing(), 7, 0, False, T0 + 5)
    assert plan.write is not None and plan.write.state is S.PREPARE_ABORT
    assert complete(plan.write, T0 + 6).state is S.COMPLETE_ABORT


def test_a_transaction_older_than_its_timeout_is_fenced_and_aborted() -> None:
    current = ongoing()
    assert plan_timeout(current, T0 + 1 + 60000) is None
    plan = plan_timeout(current, T0 + 2 + 60000)
    assert plan is not None and plan.write is not None and plan.markers
    assert (plan.write.state, plan.write.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert plan_timeout(initialized(), T0 + 10**9) is None  # only open transactions time out


def test_the_transition_table_refuses_illegal_moves() -> None:
    with pytest.raises(IllegalTransition):
        transition(initialized(), S.PREPARE_COMMIT, T0)  # Empty -> PrepareCommit
    with pytest.raises(IllegalTransition):
        complete(ongoing(), T0)  # Ongoing -> CompleteAbort
    for state, previous in txn_state.VALID_PREVIOUS.items():
        for source in TxnState:
            current = dataclasses.replace(initialized(), state=source)
            if source in previous:
                assert transition(current, state, T0).state is state
            else:
                with pytest.raises(IllegalTransition):
                    transition(current, state, T0)


def test_state_records_round_trip_and_ids_spread_over_partitions() -> None:
    for current in (initialized(), ongoing(), complete(transition(ongoing(), S.PREPARE_ABORT, T0), T0)):
        assert decode(encode_key("tx"), encode_value(current)) == ("tx", current)
    assert decode(encode_key("tx"), None) == ("tx", None)
    assert len({transaction_partition(f"tx-{n}", 5) for n in range(50)}) == 5
