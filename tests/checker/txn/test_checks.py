"""precommitted-read, the int- send checks and torn-transaction on hand-written histories, planted
and absent, with the example each shows; and the answer's shape (limit, totals, order)."""

from __future__ import annotations

import json
from typing import Any

from checker.definitions import (
    INT_NONMONOTONIC_SEND,
    INT_SEND_SKIP,
    PRECOMMITTED_READ,
    TORN_TRANSACTION,
    TXN_CHECKS,
)
from checker.txn.run import OUTPUT_COLUMNS
from tests.checker.txn.histories import RUN_ID, History, check, poll, send

ALL = frozenset(TXN_CHECKS)


def examples(history: History, **options: Any) -> dict[str, list[dict[str, Any]]]:
    answer = check(history, ALL, **options)
    out: dict[str, list[dict[str, Any]]] = {}
    for row in answer.to_dict("records"):
        out.setdefault(row["kind"], []).append({"total": row["total"], **json.loads(row["example"])})
    return out


def test_a_read_that_completed_before_its_writer_began_to_commit() -> None:
    history = History()
    history.invoke(1, [send(0, 7, 3)])
    reader = history.txn(0, [poll((0, 3, 7))])  # completes at t=20
    writer = history.complete(1, end_time=90)  # commit_transaction() called at t=90
    (example,) = examples(history)[PRECOMMITTED_READ]
    assert (example["partition"], example["offset"], example["value"], example["own_write"]) == (
        0,
        3,
        7,
        False,
    )
    assert (example["read_completed"], example["commit_began"], example["writer_invoked"]) == (20, 90, 0)
    assert example["reader"]["index"] == reader and example["writer"]["index"] == writer
    assert example["reader"]["reads"] == [{"item": 0, "partition": 0, "offset": 3, "value": 7}]


def test_a_read_after_the_commit_began_is_no_precommitted_read() -> None:
    history = History()
    history.invoke(1, [send(0, 7, 3)])
    history.txn(0, [poll((0, 3, 7))])
    history.complete(1, end_time=15)  # the commit began before the read completed (t=20)
    assert examples(history) == {}


def test_without_an_end_micro_op_the_writers_invoke_time_bounds() -> None:
    history = History()
    history.txn(0, [poll((0, 3, 7))])  # completes at t=10, before the writer is invoked
    history.invoke(1, [send(0, 7, 3)])
    history.complete(1, "info", None)
    (example,) = examples(history)[PRECOMMITTED_READ]
    assert (example["read_completed"], example["commit_began"], example["writer_invoked"]) == (10, None, 20)
    late = History()
    late.invoke(1, [send(0, 7, 3)])
    late.txn(0, [poll((0, 3, 7))])  # completes after the writer's invoke: maybe committed by then
    late.complete(1, "info", None)
    assert PRECOMMITTED_READ not in examples(late)


def test_a_transaction_reading_its_own_write_is_precommitted() -> None:
    """Jepsen's precommitted-read: Kafka hides a transaction's records from its own producer too."""
    history = History()
    txn = history.txn(0, [send(0, 7, 3), poll((0, 3, 7))])
    (example,) = examples(history)[PRECOMMITTED_READ]
    assert example["own_write"] and example["reader"]["index"] == txn == example["writer"]["index"]


def test_precommitted_read_only_under_read_committed_and_not_of_aborted_writers() -> None:
    history = History()
    history.txn(0, [send(0, 7, 3), poll((0, 3, 7))])
    assert examples(history, read_committed=False) == {}
    aborted = History()
    aborted.invoke(1, [send(0, 7, 3)])
    aborted.txn(0, [poll((0, 3, 7))])
    aborted.complete(1, "fail", "abort", end_time=90)
    assert examples(aborted) == {}  # G1a, the value family's


def test_int_send_skip_and_int_nonmonotonic_send() -> None:
    history = History()
    skip = history.txn(0, [send(0, 1, 3), send(0, 2, 5)])
    back = history.txn(0, [send(1, 3, 5), send(1, 4, 4), send(1, 5, 4)])
    history.txn(0, [send(2, 6, 1), send(2, 7), send(2, 8, 9)])  # an unknown offset between: not compared
    history.txn(0, [send(3, 9, 1), send(3, 10, 2)], kind="fail", end="abort")  # not committed
    found = examples(history)
    (gap,) = found[INT_SEND_SKIP]
    assert (gap["partition"], gap["prev_offset"], gap["offset"], gap["prev_value"], gap["value"]) == (
        0,
        3,
        5,
        1,
        2,
    )
    assert gap["txn"]["index"] == skip
    assert [(e["prev_offset"], e["offset"]) for e in found[INT_NONMONOTONIC_SEND]] == [(5, 4), (4, 4)]
    assert {e["txn"]["index"] for e in found[INT_NONMONOTONIC_SEND]} == {back}
    assert found[INT_NONMONOTONIC_SEND][0]["total"] == 2


def test_consecutive_offsets_in_one_transaction_are_fine() -> None:
    history = History()
    history.txn(0, [send(0, 1, 3), send(1, 2, 9), send(0, 3, 4)])
    assert examples(history) == {}


def test_torn_transaction_names_the_transaction_and_its_drained_and_missing_sends() -> None:
    history = History()
    torn = history.txn(0, [send(0, 1, 0), send(1, 2, 0)])
    history.txn(0, [send(0, 3, 1), send(1, 4, 1)])  # both drained
    history.txn(0, [send(0, 5), send(1, 6)])  # neither drained: lost writes, not torn
    history.txn(0, [send(0, 7), send(2, 8)])  # p2 has no complete drain: takes no part
    history.drain(0, [(0, 1), (1, 3)])
    history.drain(1, [(1, 4)])
    (example,) = examples(history, complete=frozenset({0, 1}))[TORN_TRANSACTION]
    assert example["txn"]["index"] == torn
    assert example["drained"] == [{"partition": 0, "value": 1}]
    assert example["missing"] == [{"partition": 1, "value": 2}]


def test_the_answer_keeps_limit_examples_in_index_order_with_the_total() -> None:
    history = History()
    txns = [history.txn(0, [send(p, 2 * p, 3), send(p, 2 * p + 1, 9)]) for p in range(4)]
    answer = check(history, frozenset({INT_SEND_SKIP}), limit=3)
    assert list(answer.columns) == list(OUTPUT_COLUMNS)
    assert answer["run_id"].tolist() == [RUN_ID] * 3 and answer["total"].tolist() == [4, 4, 4]
    assert answer["index"].tolist() == txns[:3] and answer["partition"].tolist() == [0, 1, 2]
    assert check(History(), ALL).empty
