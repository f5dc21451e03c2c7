"""unmarked-transaction (:mod:`checker.txn.markers`) from hand-written event logs: a completed
transaction short of a marker is found; a marked one, one completed twice, one whose marker was
written twice, one under transaction.version=1 (one epoch, many transactions) and one never
completed are not."""

from __future__ import annotations

from typing import Any

from checker.definitions import UNMARKED_TRANSACTION
from checker.txn.white_box import transaction_invariants
from tests.checker.txn.test_white_box import TOPIC, event, frame

UNMARKED = frozenset({UNMARKED_TRANSACTION})
PARTITIONS = [[TOPIC, 0], [TOPIC, 1], ["__consumer_offsets", 3]]


class Log:
    """Events in order, each at the next sequence and time on its node."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def _add(self, node: str, kind: str, **fields: Any) -> None:
        self.events.append(event(node, len(self.events), 100 + len(self.events), kind, **fields))

    def state(self, name: str, epoch: int = 0, coordinator_epoch: int = 0, node: str = "n3") -> None:
        partitions = PARTITIONS if name.startswith("Prepare") else []
        self._add(
            node, "txn-state", topic="__transaction_state", partition=2, transactional_id="tx",
            producer_id=7, producer_epoch=epoch, state=name, partitions=partitions,
            coordinator_epoch=coordinator_epoch,
        )  # fmt: skip

    def marker(self, partition: int, committed: bool = True, epoch: int = 0, error_code: int = 0) -> None:
        self._add(
            "n1", "txn-marker", topic=TOPIC, partition=partition, producer_id=7, producer_epoch=epoch,
            committed=committed, coordinator_epoch=0, offset=40 + len(self.events), error_code=error_code,
        )  # fmt: skip

    def found(self) -> list[dict[str, Any]]:
        rows = transaction_invariants(frame(self.events), TOPIC, UNMARKED)
        return [dict(row) for row in rows.to_dict("records")]


def committed(log: Log, epoch: int = 0, marked: tuple[int, ...] = (0, 1)) -> None:
    log.state("Ongoing", epoch)
    log.state("PrepareCommit", epoch)
    for partition in marked:
        log.marker(partition, epoch=epoch)
    log.state("CompleteCommit", epoch + 1)


def test_a_completed_transaction_short_of_a_marker_is_found() -> None:
    log = Log()
    committed(log, marked=(0,))
    [row] = log.found()
    assert (row["kind"], row["partition"], row["value"], row["bound"], row["positions"]) == (
        UNMARKED_TRANSACTION,
        1,
        7,
        0,
        1,
    )
    assert (row["node"], row["prev_node"], row["peer"]) == ("n3", "n3", "tx")
    assert row["seq"] == 3 and row["prev_seq"] == 1  # the CompleteCommit and its PrepareCommit


def test_every_marker_written_or_nothing_completed_is_no_finding() -> None:
    marked = Log()
    committed(marked)
    assert marked.found() == []
    pending = Log()
    pending.state("Ongoing")
    pending.state("PrepareCommit")  # the coordinator has not completed it: markers may still come
    assert pending.found() == []


def test_a_failed_marker_and_an_abort_marker_do_not_count_for_a_commit() -> None:
    log = Log()
    log.state("PrepareCommit")
    log.marker(0)
    log.marker(1, error_code=6)
    log.marker(1, committed=False)
    log.state("CompleteCommit", 1)
    assert [row["partition"] for row in log.found()] == [1]


def test_one_epoch_ending_many_transactions_needs_a_marker_each() -> None:
    """transaction.version=1: the same producer id and epoch end every transaction."""
    log = Log()
    committed(log, epoch=0)
    log.state("Ongoing", 0)
    log.state("PrepareCommit", 0)
    log.marker(0)
    log.state("CompleteCommit", 0)
    [row] = log.found()
    assert (row["partition"], row["positions"]) == (1, 1)


def test_a_reloaded_transaction_completed_again_and_a_marker_written_twice_are_no_finding() -> None:
    """A new coordinator (a higher coordinator epoch) loads PrepareCommit, writes the markers again
    and completes it again; a marker retried after a lost answer is appended twice."""
    log = Log()
    log.state("PrepareCommit")
    log.marker(0)
    log.marker(0)
    log.marker(1)
    log.state("CompleteCommit", 1)
    log.marker(0)
    log.state("CompleteCommit", 1, coordinator_epoch=1, node="n2")
    assert log.found() == []
