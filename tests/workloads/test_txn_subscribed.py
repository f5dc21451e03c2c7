"""The subscribed consume-transform-produce input on a fake group member: it follows the
assignment, sends the positions of the assigned partitions with the member's group metadata,
rewinds by seeking to the committed offsets, and a transaction during which the assignment
changed aborts without sending offsets (the real clients: ``test_txn_ctp_cluster.py``)."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from pathlib import Path
from typing import Any

import pytest

from testbed.record.recorder import Recorder
from tests.workloads.test_txn_workload import POLL, CtpProducer, GroupLog, offsets_sent, read_offsets
from tests.workloads.txn_history import txn_pairs, workload_problems
from workloads import txn as txn_module
from workloads import txn_subscribed
from workloads.group_events import Assigned, Revoked
from workloads.txn import TxnProducerLoop, TxnSettings


class FakeKafkaPythonConsumer:
    """The library calls :class:`txn_subscribed._Library` makes on kafka-python's consumer."""

    def __init__(self, log: GroupLog) -> None:
        self.log, self.next = log, 0

    def position(self, tp: Any) -> int:
        return self.next

    def committed(self, tp: Any, timeout_ms: int) -> int | None:
        return self.log.committed.get(tp.partition)

    def seek(self, tp: Any, offset: int) -> None:
        self.next = offset

    def group_metadata(self) -> str:
        return "metadata"


class FakeMember:
    """A group member that is assigned partition 0 at its first poll, then reads two records a
    poll; ``steps`` scripts events to hand out before the records."""

    def __init__(self, log: GroupLog) -> None:
        self.consumer = FakeKafkaPythonConsumer(log)
        self.log = log
        self.steps: list[Any] = [Assigned((0,), 1, "m")]

    def poll(self, timeout: float) -> list[Any]:
        steps, self.steps = self.steps, []
        taken = self.log.records[self.consumer.next : self.consumer.next + 2]
        self.consumer.next += len(taken)
        return steps + taken

    def close(self) -> list[Any]:
        return []


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    log = GroupLog(20)
    members: list[FakeMember] = []
    producers: list[CtpProducer] = []

    def make_member(*_: Any) -> FakeMember:
        members.append(FakeMember(log))
        return members[-1]

    def make_producer(client: str, bootstrap: str, transactional_id: str, timeout: float) -> CtpProducer:
        producers.append(CtpProducer(transactional_id, {}, log))
        return producers[-1]

    monkeypatch.setattr(txn_subscribed, "make_group_consumer", make_member)
    monkeypatch.setattr(txn_module, "make_txn_producer", make_producer)
    settings = TxnSettings("kafka-python", "b:1", "t", 1, "read_committed", 1.0, 0.0, 4, True, 1, "subscribe")
    history = tmp_path / "history.jsonl"
    recorder = Recorder(history)
    loop = TxnProducerLoop(settings, recorder, 0, itertools.count(100).__next__, itertools.count(1).__next__)
    stop = threading.Event()

    class Harness:
        def run(self, *micro_ops: dict[str, Any], abort: bool = False) -> None:
            assert loop.ready(stop)
            loop.settings = dataclasses.replace(loop.settings, abort_p=1.0 if abort else 0.0)
            loop.transaction(list(micro_ops), stop)

        def pairs(self) -> list[Any]:
            recorder.close()
            pairs = txn_pairs(history)
            assert [p for pair in pairs for p in workload_problems(*pair)] == []
            return pairs

    h = Harness()
    h.members, h.log = members, log  # type: ignore[attr-defined]
    return h


def test_a_transaction_that_saw_its_assignment_change_aborts_without_offsets(harness: Any) -> None:
    harness.run(POLL)  # the first poll serves the assignment: this transaction cannot commit
    harness.run(POLL)
    [(_, first), (_, second)] = harness.pairs()
    assert first.type == "fail" and "assignment changed" in str(first.error) and offsets_sent(first) is None
    assert second.type == "ok" and read_offsets(second) == [0, 1]  # rewound: nothing was committed
    assert offsets_sent(second) == [{"partition": 0, "offset": 2}]


def test_after_an_abort_the_assigned_partitions_seek_back_to_the_committed_offsets(harness: Any) -> None:
    harness.run(POLL)  # the assignment: aborted
    harness.run(POLL)  # reads 0, 1 and commits offset 2
    harness.run(POLL, abort=True)  # reads 2, 3, then aborts
    harness.run(POLL)
    *_, (_, aborted), (_, again) = harness.pairs()
    assert (aborted.type, read_offsets(aborted)) == ("fail", [2, 3])
    assert (again.type, read_offsets(again)) == ("ok", [2, 3]) and harness.log.committed == {0: 4}


def test_a_revocation_leaves_no_partition_to_send(harness: Any) -> None:
    harness.run(POLL)
    harness.members[0].steps = [Revoked((0,))]
    harness.run(POLL)
    [_, (_, revoked)] = harness.pairs()
    assert revoked.type == "fail" and "assignment changed" in str(revoked.error)
