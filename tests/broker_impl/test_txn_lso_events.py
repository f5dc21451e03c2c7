"""Every change of a leader's LSO is in its event log when it happens (``broker_impl.txn_events``).

A real :class:`Partition` leading with a follower (the HW moves only when the follower fetches), real
transactional batches and markers, a real :class:`EventLog`: the LSO a marker's *append* leaves --
the HW has not moved -- is on ``txn-close``; the transactions a new leader inherits from the batches
it replicated, and its first LSO, are on ``become-leader``.  Replaying ``become-leader``, ``hw`` and
``txn-close`` in ``seq`` order gives every LSO the leader served, each equal to
``Partition.last_stable_offset`` at that moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_impl import records
from broker_impl.control_records import Marker, build_marker_batch
from broker_impl.events import EventLog
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.rules import ReplicationRules
from testbed.record.events import read_events

from .batch_builder import make_batch

NEVER = 2**63 - 1


def replica(directory: Path, node: int, events: EventLog) -> Partition:
    return Partition(
        "t",
        0,
        node,
        directory / f"n{node}",
        1 << 20,
        FlushPolicy(NEVER, NEVER),
        0,
        ReplicationRules(),
        events,
    )


class Producers:
    """Transactional batches, each producer id with its own sequence."""

    def __init__(self) -> None:
        self.sequences: dict[int, int] = {}

    def batch(self, producer_id: int) -> bytearray:
        sequence = self.sequences.get(producer_id, 0)
        self.sequences[producer_id] = sequence + 1
        return make_batch(
            [b"v"], producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True
        )


def lead(partition: Partition, batch: bytearray) -> int:
    first, _ = partition.append_as_leader(batch, records.validate(batch))
    return first


def marker(producer_id: int, committed: bool) -> bytearray:
    return build_marker_batch(Marker(producer_id, 0, committed, 0), 1)


def lsos(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["kind"], e["lso"]) for e in events if "lso" in e]


def test_a_marker_moves_the_lso_at_its_append_and_txn_close_records_it(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    leader = replica(tmp_path, 1, EventLog(path, 1))
    leader.become_leader(1, 0, [1, 2], [1, 2])
    producers = Producers()
    assert lead(leader, producers.batch(7)) == 0  # opens 7's transaction at 0
    lead(leader, make_batch([b"plain"]))  # 1
    leader.record_follower_fetch(2, 2)  # the HW moves to 2; the LSO stays at 0
    assert (leader.high_watermark, leader.last_stable_offset) == (2, 0)
    assert lead(leader, marker(7, committed=False)) == 2  # aborts it
    assert (leader.high_watermark, leader.last_stable_offset) == (2, 2)  # the HW did not move
    lead(leader, marker(7, committed=True))  # 3: nothing open -- nothing closed, nothing recorded

    found = read_events(path)
    assert [e["kind"] for e in found] == ["replica-opened", "become-leader", "txn-open", "hw", "txn-close"]
    close = found[-1]
    assert {
        k: close[k] for k in ("epoch", "producer_id", "committed", "first_offset", "offset", "hw", "lso")
    } == {
        "epoch": 1,
        "producer_id": 7,
        "committed": False,
        "first_offset": 0,
        "offset": 2,
        "hw": 2,
        "lso": 2,
    }
    assert lsos(found) == [("become-leader", 0), ("hw", 0), ("txn-close", 2)]
    leader.record_follower_fetch(2, 4)
    assert lsos(read_events(path))[-1] == ("hw", 4) and leader.last_stable_offset == 4


def test_a_new_leader_records_the_open_transactions_it_inherited_and_its_lso(tmp_path: Path) -> None:
    old = replica(tmp_path, 1, EventLog.disabled())
    old.become_leader(1, 0, [1, 2], [1, 2])
    producers = Producers()
    lead(old, producers.batch(5))  # 0: 5 opens
    lead(old, producers.batch(6))  # 1: 6 opens
    lead(old, marker(6, committed=True))  # 2: 6 commits
    lead(old, producers.batch(8))  # 3: 8 opens
    path = tmp_path / "n2.jsonl"
    new = replica(tmp_path, 2, EventLog(path, 2))
    new.become_follower(1, 1, 0, [1, 2], [1, 2])
    new.log.append_as_follower(old.log.read(0, 1 << 20, old.log_end_offset))
    new.follower_appended(3)
    new.become_leader(2, 1, [1, 2], [2])  # alone in the ISR: its HW moves to its LEO, 4

    found = read_events(path)
    election = next(e for e in found if e["kind"] == "become-leader")
    assert (election["open_transactions"], election["hw"], election["lso"]) == ([[5, 0], [8, 3]], 3, 0)
    assert lsos(found) == [("become-leader", 0), ("hw", 0)]
    lead(new, marker(5, committed=True))  # 4: closes 5; 8 holds the LSO at 3
    assert lsos(read_events(path))[-1] == ("txn-close", 3) == ("txn-close", new.last_stable_offset)


def test_no_transaction_no_transaction_events(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    leader = replica(tmp_path, 1, EventLog(path, 1))
    leader.become_leader(1, 0, [1], [1])
    lead(leader, make_batch([b"plain"]))
    leader.maybe_increment_high_watermark()
    found = read_events(path)
    assert [e["kind"] for e in found] == ["replica-opened", "become-leader", "hw"]
    assert found[1]["open_transactions"] == [] and lsos(found) == [("become-leader", 0), ("hw", 1)]
