"""Transactions in a partition's log (``broker_impl.txn_index``, ``control_records``, the LSO).

Real batches from kafka-python's builder (transactional ones as a transactional producer sends
them) and the broker's own markers, appended to a real :class:`PartitionLog`: the open
transactions and the LSO with interleaved producers, the aborted ranges a read_committed Fetch
returns, markers that are idempotent, fence older epochs and refuse deposed coordinators, and an
index rebuilt the same after a restart and after truncation.
"""

from __future__ import annotations

from pathlib import Path

from broker_impl import records
from broker_impl.control_records import Marker, build_marker_batch, read_marker
from broker_impl.events import EventLog
from broker_impl.log import FlushPolicy, PartitionLog
from broker_impl.partition import Partition
from broker_impl.producer_state import INVALID_PRODUCER_EPOCH
from broker_impl.rules import ReplicationRules
from broker_impl.txn_index import TRANSACTION_COORDINATOR_FENCED, AbortedTransaction

from .batch_builder import make_batch

NEVER = 2**63 - 1
_sequences: dict[int, int] = {}


def open_log(directory: Path) -> PartitionLog:
    return PartitionLog(directory, 1 << 20, FlushPolicy(NEVER, NEVER))


def append(log: PartitionLog, batch: bytearray) -> int:
    first, _ = log.append_as_leader(batch, records.validate(batch), 0)
    return first


def data(log: PartitionLog, producer_id: int, count: int = 1, epoch: int = 0) -> int:
    """Append a transactional batch of ``count`` records of ``producer_id``: its base offset."""
    sequence = _sequences.get(producer_id, 0)
    _sequences[producer_id] = sequence + count
    batch = make_batch(
        [b"v"] * count,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
    )
    return append(log, batch)


def plain(log: PartitionLog) -> int:
    return append(log, make_batch([b"plain"]))


def marker(
    log: PartitionLog, producer_id: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0
) -> int:
    return append(log, build_marker_batch(Marker(producer_id, epoch, committed, coordinator_epoch), 1))


def test_a_marker_batch_is_a_control_batch_clients_can_read() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    batch = build_marker_batch(Marker(7, 3, True, 5), 1_700_000_000_000)
    header = records.validate(batch)  # the recomputed CRC holds
    assert header.is_control and header.is_transactional and header.producer_epoch == 3
    assert read_marker(header, batch) == Marker(7, 3, True, 5)
    assert DefaultRecordBatch(bytes(batch)).is_control_batch


def test_the_first_unstable_offset_follows_interleaved_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.transactions.first_unstable_offset() is None
    plain(log)  # 0
    first_a = data(log, 100)  # 1: A opens
    first_b = data(log, 200)  # 2: B opens
    data(log, 100)  # 3
    plain(log)  # 4
    assert log.transactions.first_unstable_offset() == first_a == 1
    marker(log, 100, committed=True)  # 5: A commits; B still holds the LSO
    assert log.transactions.first_unstable_offset() == first_b == 2
    marker(log, 200, committed=False)  # 6: B aborts
    assert log.transactions.first_unstable_offset() is None
    assert log.transactions.aborted == [AbortedTransaction(200, 2, 6)]


def test_fetch_ranges_get_the_aborted_transactions_they_overlap(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data(log, 1)  # 0
    marker(log, 1, committed=False)  # 1
    data(log, 2, count=3)  # 2-4
    data(log, 3)  # 5
    marker(log, 2, committed=False)  # 6
    marker(log, 3, committed=True)  # 7
    data(log, 4)  # 8
    marker(log, 4, committed=False)  # 9
    index = log.transactions
    assert index.aborted_between(0, 10) == [
        AbortedTransaction(1, 0, 1),
        AbortedTransaction(2, 2, 6),
        AbortedTransaction(4, 8, 9),
    ]
    assert index.aborted_between(2, 8) == [AbortedTransaction(2, 2, 6)]
    assert index.aborted_between(7, 8) == []  # 2's marker is below 7, 4's batch at 8 is beyond
    assert index.aborted_between(7, 9) == [AbortedTransaction(4, 8, 9)]


def test_markers_are_idempotent(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data(log, 9)
    marker(log, 9, committed=False)
    marker(log, 9, committed=False)  # a retried marker: appended, changes nothing
    marker(log, 9, committed=True)  # nor does a marker with no open transaction
    assert log.transactions.aborted == [AbortedTransaction(9, 0, 1)]
    assert log.transactions.first_unstable_offset() is None
    assert log.log_end_offset == 4


def test_a_marker_of_a_newer_epoch_fences_the_older_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data(log, 5, epoch=0)
    marker(log, 5, committed=False, epoch=1)  # the coordinator aborted with a bumped epoch
    late = make_batch([b"late"], producer_id=5, producer_epoch=0, base_sequence=1, transactional=True)
    assert log.check_producer(records.validate(late)) == (INVALID_PRODUCER_EPOCH, None)
    fresh = make_batch([b"new"], producer_id=5, producer_epoch=1, base_sequence=0, transactional=True)
    assert log.check_producer(records.validate(fresh)) == (0, None)


def test_a_marker_of_a_deposed_coordinator_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data(log, 5)
    marker(log, 5, committed=True, coordinator_epoch=4)
    assert log.transactions.check_marker(5, 3) == TRANSACTION_COORDINATOR_FENCED
    assert log.transactions.check_marker(5, 4) == 0
    assert log.transactions.check_marker(6, 0) == 0


def test_the_index_is_rebuilt_on_reopen_and_after_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data(log, 1)  # 0
    marker(log, 1, committed=False)  # 1
    data(log, 2)  # 2
    before = (list(log.transactions.aborted), dict(log.transactions.open))
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.transactions.aborted, reopened.transactions.open) == before
    reopened.truncate_to(1)  # the abort marker goes: transaction 1 is open again
    assert (reopened.transactions.aborted, reopened.transactions.open) == ([], {1: 0})


def lone_leader(tmp_path: Path, events: EventLog) -> Partition:
    """Partition t-0 led by broker 1, its only replica, recording to ``events``."""
    replica = Partition(
        "t", 0, 1, tmp_path / "t-0", 1 << 20, FlushPolicy(NEVER, NEVER), 0, ReplicationRules(), events
    )
    replica.become_leader(1, 0, [1], [1])
    return replica


def test_the_lso_is_the_hw_without_transactions_and_stops_at_an_open_one(tmp_path: Path) -> None:
    replica = lone_leader(tmp_path, EventLog.disabled())
    plain(replica.log)
    plain(replica.log)
    replica.maybe_increment_high_watermark()
    assert replica.last_stable_offset == replica.high_watermark == 2
    data(replica.log, 42)  # 2
    plain(replica.log)  # 3
    replica.maybe_increment_high_watermark()
    assert (replica.high_watermark, replica.last_stable_offset) == (4, 2)
    marker(replica.log, 42, committed=True)  # 4
    assert replica.last_stable_offset == 4  # the HW has not passed the marker yet
    replica.maybe_increment_high_watermark()
    assert replica.last_stable_offset == replica.high_watermark == 5


def test_the_dump_shows_markers_producers_and_the_lso_only_when_asked(tmp_path: Path) -> None:
    import io
    import json

    from broker_impl import dump

    log = open_log(tmp_path / "t-0")
    data(log, 31)  # 0
    marker(log, 31, committed=False, coordinator_epoch=2)  # 1
    plain(log)  # 2
    data(log, 32)  # 3: still open
    log.flush()
    plain_output, txn_output = io.StringIO(), io.StringIO()
    dump.dump(tmp_path, plain_output)
    dump.dump(tmp_path, txn_output, transactions=True)
    plain_lines = [json.loads(line) for line in plain_output.getvalue().splitlines()]
    assert [line["type"] for line in plain_lines] == ["record", "record", "record", "partition"]
    assert all("producer_id" not in line for line in plain_lines)  # the default lines are unchanged
    lines = [json.loads(line) for line in txn_output.getvalue().splitlines()]
    assert [line["type"] for line in lines] == ["record", "control", "record", "record", "partition"]
    assert lines[0]["producer_id"] == 31 and lines[0]["transactional"] is True
    assert "producer_id" not in lines[2]
    control = lines[1]
    assert (control["offset"], control["marker"], control["producer_id"], control["coordinator_epoch"]) == (
        1,
        "ABORT",
        31,
        2,
    )
    summary = lines[-1]
    assert summary["open_transactions"] == {"32": 3}
    assert summary["aborted_transactions"] == [[31, 0, 1]]
    assert summary["last_stable_offset"] == 0  # the HW checkpoint is absent: HW 0


def test_a_leader_records_each_transaction_it_opens_and_the_lso_of_every_hw_move(tmp_path: Path) -> None:
    """``txn-open`` once per transaction (not per batch), ``hw`` events carry the LSO: the
    white-box checks hold every LSO against the open transactions' first offsets."""
    from testbed.record.events import read_events

    path = tmp_path / "events.jsonl"
    replica = lone_leader(tmp_path, EventLog(path, 1))

    def lead(batch: bytearray) -> int:
        first, _ = replica.append_as_leader(batch, records.validate(batch))
        replica.maybe_increment_high_watermark()
        return first

    def txn_batch(producer_id: int) -> bytearray:
        sequence = _sequences.get(producer_id, 0)
        _sequences[producer_id] = sequence + 1
        return make_batch(
            [b"v"], producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True
        )

    lead(make_batch([b"plain"]))  # 0
    lead(txn_batch(77))  # 1 opens 77's transaction
    lead(txn_batch(77))  # 2 belongs to it
    lead(build_marker_batch(Marker(77, 0, True, 0), 1))  # 3 commits it
    opened = [e for e in read_events(path) if e["kind"] == "txn-open"]
    assert [(e["producer_id"], e["producer_epoch"], e["first_offset"]) for e in opened] == [(77, 0, 1)]
    moves = [(e["new_hw"], e["lso"]) for e in read_events(path) if e["kind"] == "hw"]
    assert moves == [(1, 1), (2, 1), (3, 1), (4, 4)]
