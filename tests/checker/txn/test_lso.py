"""lso-past-open-transaction (:mod:`checker.txn.lso`) from hand-written event logs: each violation
form found (an ``hw``, a ``txn-close`` or a ``become-leader`` LSO past an open transaction, opened in
the tenure or inherited), and each legitimate non-violation of the module docstring left alone."""

from __future__ import annotations

from typing import Any

import pytest

from checker.definitions import LSO_PAST_OPEN_TRANSACTION
from checker.txn.white_box import transaction_invariants
from tests.checker.txn.test_white_box import TOPIC, event, frame

LSO = frozenset({LSO_PAST_OPEN_TRANSACTION})


class Log:
    """Events in order, each at the next sequence and time on its node."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._seq: dict[str, int] = {}

    def add(self, node: str, kind: str, **fields: Any) -> Log:
        seq = self._seq.get(node, 0)
        self._seq[node] = seq + 1
        fields.setdefault("topic", TOPIC)
        fields.setdefault("partition", 0)
        self.events.append(event(node, seq, 1000 + len(self.events), kind, **fields))
        return self

    def leader(
        self, node: str = "n1", epoch: int = 1, lso: int = 0, open_transactions: list[list[int]] | None = None
    ) -> Log:
        fields: dict[str, Any] = {"epoch": epoch, "lso": lso}
        if open_transactions is not None:
            fields["open_transactions"] = open_transactions
        return self.add(node, "become-leader", **fields)

    def opened(self, first: int, producer: int = 7, node: str = "n1") -> Log:
        return self.add(node, "txn-open", producer_id=producer, producer_epoch=0, first_offset=first)

    def closed(
        self, first: int, offset: int, lso: int, producer: int = 7, committed: bool = True, node: str = "n1"
    ) -> Log:
        return self.add(
            node, "txn-close", epoch=1, producer_id=producer, producer_epoch=0, committed=committed,
            first_offset=first, offset=offset, hw=lso, lso=lso,
        )  # fmt: skip

    def hw(self, new_hw: int, lso: int, node: str = "n1", role: str = "leader", epoch: int = 1) -> Log:
        return self.add(node, "hw", role=role, epoch=epoch, new_hw=new_hw, lso=lso)

    def marker(self, offset: int, producer: int = 7, error_code: int = 0, node: str = "n1") -> Log:
        return self.add(
            node, "txn-marker", producer_id=producer, producer_epoch=0, committed=False,
            coordinator_epoch=0, offset=offset, error_code=error_code,
        )  # fmt: skip

    def found(self) -> list[dict[str, Any]]:
        rows = transaction_invariants(frame(self.events), TOPIC, LSO)
        return [dict(row) for row in rows.to_dict("records")]


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["node"],
        row["seq"],
        row["value"],
        row["bound"],
        row["positions"],
        row["prev_seq"],
        row["peer"],
    )


def test_an_hw_whose_lso_passes_a_transaction_opened_in_the_tenure() -> None:
    log = Log().leader().opened(12).hw(13, 12).hw(15, 15)
    [row] = log.found()
    assert row["kind"] == LSO_PAST_OPEN_TRANSACTION and row["partition"] == 0
    # seq 3: the second hw; it passed F=12 by 3; opened by seq 1; never closed: no outcome.
    assert _key(row) == ("n1", 3, 15, 12, 3, 1, None)


def test_the_oldest_open_transaction_counts_when_a_newer_one_closes() -> None:
    """The broken index of mutant 13: closing the newer transaction moved the LSO past the older."""
    log = Log().leader().opened(10, producer=1).opened(12, producer=2).hw(14, 10)
    log.closed(12, offset=14, lso=14, producer=2).closed(10, offset=15, lso=15, producer=1, committed=False)
    [row] = log.found()
    # seq 4: the first txn-close, passing producer 1's F=10; its outcome: aborted later.
    assert _key(row) == ("n1", 4, 14, 10, 4, 1, "abort")


def test_an_inherited_open_transaction_holds_a_new_leader() -> None:
    log = Log().opened(3, node="n2").leader("n1", epoch=2, lso=3, open_transactions=[[7, 3]])
    log.hw(9, 9, epoch=2)
    [row] = log.found()
    assert _key(row) == ("n1", 1, 9, 3, 6, 0, None) and row["prev_node"] == "n1"


def test_a_new_leaders_own_lso_past_what_it_inherited() -> None:
    rows = Log().leader(lso=8, open_transactions=[[7, 3], [9, 5]]).found()
    assert [_key(row) for row in rows] == [("n1", 0, 8, 3, 5, 0, None), ("n1", 0, 8, 5, 3, 0, None)]


def test_one_row_per_transaction_passed_however_often() -> None:
    log = Log().leader().opened(12).hw(14, 14).hw(15, 15).hw(16, 16)
    assert len(log.found()) == 1


def test_a_new_tenure_of_the_same_transaction_counts_again() -> None:
    log = Log().leader().opened(12).hw(14, 14)
    log.leader(epoch=2, lso=12, open_transactions=[[7, 12]]).hw(16, 16, epoch=2)
    assert [row["seq"] for row in log.found()] == [2, 4]


LEGITIMATE = {
    "closed, then passed": Log().leader().opened(12).hw(13, 12).closed(12, offset=14, lso=13).hw(15, 15),
    "closed while the HW had not moved, its txn-marker timed out later": (
        Log().leader().opened(12).hw(14, 12).closed(12, 14, lso=14).marker(-1, error_code=7).hw(15, 15)
    ),
    "aborted by its timeout (the coordinator's abort marker)": (
        Log().leader().opened(12).closed(12, 13, lso=12, committed=False).hw(14, 14)
    ),
    "the lso at F, not past it": Log().leader().opened(12).hw(20, 12),
    "another broker opened it, the new leader never got the batch": (
        Log().leader("n2", epoch=1).opened(12, node="n2").leader("n1", epoch=2, lso=12, open_transactions=[])
        .hw(20, 20, epoch=2)
    ),
    "the deposed leader, now a follower": (
        Log().leader().opened(12).add("n1", "become-follower", epoch=2).hw(20, 20, role="follower", epoch=2)
    ),
    "a restart cut the batch away (power loss)": (
        Log().leader().opened(12).add("n1", "replica-opened", leo=12, hw=12)
        .leader(epoch=2, lso=12, open_transactions=[]).hw(20, 20, epoch=2)
    ),
    "truncated, then led again without it": (
        Log().leader().opened(12).add("n1", "truncate", role="leader", new_leo=12).leader(epoch=3, lso=12)
        .hw(20, 20, epoch=3)
    ),
    "an hw of another epoch": Log().leader().opened(12).hw(20, 20, epoch=0),
    "no become-leader recorded (an event log cut at its start)": Log().opened(12).hw(20, 20),
    "a marker of a producer with nothing open, then a close of the right one": (
        Log().leader().opened(12).marker(5, producer=3).closed(12, 14, lso=15).hw(16, 16)
    ),
    "another topic's transaction": (
        Log().leader().add("n1", "txn-open", topic="__consumer_offsets", producer_id=7, first_offset=2)
        .hw(20, 20)
    ),
}  # fmt: skip


@pytest.mark.parametrize("log", list(LEGITIMATE.values()), ids=list(LEGITIMATE))
def test_no_finding_when_the_lso_passes_nothing_open(log: Log) -> None:
    assert log.found() == []


def test_a_leader_without_open_transactions_in_its_election_holds_only_what_it_opens() -> None:
    """An older event log: ``become-leader`` without ``open_transactions`` -- nothing inherited."""
    log = Log().opened(3, node="n2").leader("n1", epoch=2, lso=3).hw(9, 9, epoch=2)
    assert log.found() == []
    log.opened(10).hw(12, 12, epoch=2)
    assert [row["bound"] for row in log.found()] == [10]
