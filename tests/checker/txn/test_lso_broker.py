"""lso-past-open-transaction on a real broker's event log: the bundled broker's :class:`Partition`
and :class:`EventLog` (no containers) run interleaved transactions of two producers, and the check
reads the file the broker wrote.  The safe broker gives nothing; with mutant 13 applied
(``bench/mutants/13-lso-newest-open-transaction.patch``: the LSO stops at the newest open
transaction) this test fails -- the check finds the older transaction passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_impl import records
from broker_impl.control_records import Marker, build_marker_batch
from broker_impl.events import EventLog
from checker.definitions import LSO_PAST_OPEN_TRANSACTION
from checker.txn.white_box import transaction_invariants
from testbed.record.events import read_events
from tests.broker_impl.test_txn_lso_events import Producers, replica
from tests.checker.txn.test_white_box import TOPIC, frame

LSO = frozenset({LSO_PAST_OPEN_TRANSACTION})


def run_interleaved(directory: Path) -> list[dict[str, Any]]:
    """Two producers' transactions overlapping on one partition led by broker 1 alone; the HW
    follows each append.  The rows the check finds in the event log it leaves."""
    path = directory / "broker-events.jsonl"
    leader = replica(directory, 1, EventLog(path, 1))
    leader.become_leader(1, 0, [1], [1])
    producers = Producers()

    def append(batch: bytearray) -> None:
        leader.append_as_leader(batch, records.validate(batch))
        leader.maybe_increment_high_watermark()

    for _ in range(3):
        append(producers.batch(1))  # 1's transaction opens first ...
        append(producers.batch(2))  # ... 2's inside it
        append(build_marker_batch(Marker(2, 0, True, 0), 1))  # 2 commits
        append(build_marker_batch(Marker(1, 0, False, 0), 1))  # 1 aborts
    assert leader.topic == TOPIC
    events = [{**event, "node_name": "n1"} for event in read_events(path)]
    rows = transaction_invariants(frame(events), TOPIC, LSO)
    return [dict(row) for row in rows.to_dict("records")]


def test_the_safe_broker_holds_the_lso_at_the_oldest_open_transaction(tmp_path: Path) -> None:
    """Fails with mutant 13: its LSO passes producer 1's open transaction when 2's opens above it."""
    assert run_interleaved(tmp_path) == []
