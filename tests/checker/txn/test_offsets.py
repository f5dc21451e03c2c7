"""consumed-twice and consumed-skipped (exactly-once processing, :mod:`checker.txn.offsets`) on
hand-written consume-transform-produce histories, planted and absent, with their examples."""

from __future__ import annotations

import json
from typing import Any

from checker.definitions import CONSUMED_SKIPPED, CONSUMED_TWICE, TXN_CHECKS
from testbed.record.txn_rows import group_code
from tests.checker.txn.histories import History, check, offsets, poll, send

ALL = frozenset(TXN_CHECKS)
OFFSET_CHECKS = frozenset({CONSUMED_TWICE, CONSUMED_SKIPPED})


def findings(history: History) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in check(history, ALL).to_dict("records"):
        if row["kind"] in OFFSET_CHECKS:
            out.setdefault(row["kind"], []).append(
                {"total": row["total"], "index": row["index"], **json.loads(row["example"])}
            )
    return out


def written(history: History, values: range, partition: int = 0) -> None:
    """Committed writes of ``values`` at offsets ``values.start`` on (no markers, for brevity)."""
    history.txn(1, [send(partition, value, value) for value in values])


def test_a_group_that_processes_each_record_once_is_clean() -> None:
    history = History()
    written(history, range(4))
    history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))])
    history.txn(2, [poll((0, 2, 2)), offsets((0, 3))])
    assert findings(history) == {}


def test_what_an_aborted_transaction_read_is_read_again_and_that_is_no_anomaly() -> None:
    history = History()
    written(history, range(2))
    history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))], kind="fail", end="abort")
    history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))])
    assert findings(history) == {}


def test_a_record_two_committed_transactions_read_is_consumed_twice() -> None:
    history = History()
    written(history, range(3))
    first = history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))])
    second = history.txn(2, [poll((0, 1, 1), (0, 2, 2)), offsets((0, 3))])
    found = findings(history)
    assert list(found) == [CONSUMED_TWICE]
    (example,) = found[CONSUMED_TWICE]
    assert (
        example["total"],
        example["index"],
        example["partition"],
        example["offset"],
        example["value"],
    ) == (
        1,
        second,
        0,
        1,
        1,
    )
    assert example["group_code"] == group_code("g")
    assert example["committed_readers"] == 2
    assert (example["first"]["index"], example["second"]["index"]) == (first, second)
    assert example["first"]["offsets_sent"] == [{"item": 1, "partition": 0, "offset": 2}]
    assert example["second"]["offsets_sent"] == [{"item": 1, "partition": 0, "offset": 3}]
    assert example["second"]["reads"] == [{"item": 0, "partition": 0, "offset": 1, "value": 1}]


def test_groups_are_apart_and_only_committed_readers_count_twice() -> None:
    """The same record read by two groups (each its own processing), or by a committed and an
    aborted transaction of one group, is read once per committed transaction of a group."""
    history = History()
    written(history, range(2))
    history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2), group="a")])
    history.txn(3, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2), group="b")])
    history.txn(3, [poll((0, 0, 0)), offsets((0, 1), group="b")], kind="fail", end="abort")
    assert findings(history) == {}


def test_a_committed_record_below_the_groups_offset_that_no_transaction_read_is_skipped() -> None:
    """The planted bug: the workload (or the broker) moved the group's offset past what an
    aborted transaction read, so nobody processed it."""
    history = History()
    written(history, range(3))
    aborted = history.txn(2, [poll((0, 0, 0), (0, 1, 1)), offsets((0, 2))], kind="fail", end="abort")
    jumper = history.txn(2, [poll((0, 2, 2)), offsets((0, 3))])
    history.drain(0, [(0, 0), (1, 1), (2, 2)])
    found = findings(history)
    assert list(found) == [CONSUMED_SKIPPED]
    skipped = found[CONSUMED_SKIPPED]
    assert [(e["total"], e["index"], e["offset"], e["value"]) for e in skipped] == [
        (2, jumper, 0, 0),
        (2, jumper, 1, 1),
    ]
    past = skipped[0]["committed_past"]
    assert past["index"] == jumper and past["offsets_sent"] == [{"item": 1, "partition": 0, "offset": 3}]
    reader = skipped[0]["reader"]
    assert (skipped[0]["readers"], reader["index"], reader["type"]) == (1, aborted, "fail")


def test_only_records_whose_writer_committed_and_below_the_offset_can_be_skipped() -> None:
    """An aborted writer's record (read_committed skips it), an info reader (it may have
    committed) and a record above the group's offset are no skip."""
    history = History()
    written(history, range(2))
    history.txn(1, [send(0, 50, 2)], kind="fail", end="abort")
    written(history, range(3, 5))
    history.txn(2, [poll((0, 0, 0)), offsets((0, 1))], kind="info")
    history.txn(3, [poll((0, 1, 1), (0, 3, 3)), offsets((0, 4))])  # a fresh process after info
    history.drain(0, [(0, 0), (1, 1), (2, 50), (3, 3), (4, 4)])
    assert findings(history) == {}


def test_a_read_of_a_partition_the_transaction_sent_no_offsets_for_is_no_processing() -> None:
    history = History()
    written(history, range(2))
    written(history, range(10, 12), partition=1)
    history.txn(2, [poll((0, 0, 0), (1, 10, 10)), offsets((0, 1))])
    history.txn(2, [poll((0, 1, 1), (1, 10, 10)), offsets((0, 2))])
    assert findings(history) == {}
