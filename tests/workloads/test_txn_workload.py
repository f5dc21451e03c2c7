"""The queue workload's ``--txn`` mode without brokers: the spec's and the CLI's refusals, the
micro-op draw, and what one producer thread records for each way a transaction can end (a fake
transactional producer and consumer stand in for the clients).  The real clients against real
brokers: ``test_txn_workload_cluster.py``."""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cli.errors import UsageError
from testbed.record.history import read_history
from testbed.record.recorder import Recorder
from tests.harness.cli.commands import spec_of
from tests.workloads.txn_history import txn_pairs, workload_problems
from workloads import queue_drain as queue_drain_module
from workloads import txn as txn_module
from workloads import txn_drain as txn_drain_module
from workloads import txn_input as txn_input_module
from workloads.clients import Received
from workloads.queue import QueueSpec, QueueWorkload
from workloads.txn import SEND_P, TxnProducerLoop, TxnSettings, draw_micro_ops
from workloads.txn_clients import TxnAbortable, TxnFatal, TxnSendUnresolved

# ---- the spec and the CLI ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"txn": True, "abort_p": 1.5}, "abort_p (--abort-p) must be in [0, 1], not 1.5"),
        ({"txn": True, "abort_p": -0.1}, "abort_p (--abort-p) must be in [0, 1]"),
        ({"txn": True, "abort_p": "x"}, "abort_p (--abort-p) must be in [0, 1], not 'x'"),
        ({"txn": True, "txn_max_ops": 0}, "txn_max_ops (--txn-max-ops) must be an integer in 1..64, not 0"),
        ({"txn": True, "txn_max_ops": 65}, "txn_max_ops (--txn-max-ops) must be an integer in 1..64, not 65"),
        ({"txn": True, "txn_max_ops": 2.0}, "txn_max_ops (--txn-max-ops) must be an integer"),
        ({"txn": "yes"}, "txn (--txn) must be true or false, not 'yes'"),
        ({"txn_ctp": True}, "txn_ctp (--txn-ctp) needs txn (--txn)"),
        (
            {"txn": True, "txn_ctp": True, "isolation": "read_uncommitted"},
            "txn_ctp (--txn-ctp) needs --isolation read_committed",
        ),
        (
            {"txn": True, "txn_ctp": True, "txn_ctp_via": "both"},
            "txn_ctp_via (--txn-ctp-via) must be one of assign, subscribe",
        ),
        ({"txn": True, "txn_ctp_via": "subscribe"}, "txn_ctp_via (--txn-ctp-via) needs txn_ctp (--txn-ctp)"),
        ({"txn": True, "idempotent": False}, "txn (--txn) needs idempotent producers"),
        ({"txn": True, "acks": "1"}, "txn (--txn) needs --acks all"),
        ({"abort_p": 0.5}, "abort_p (--abort-p) and txn_max_ops (--txn-max-ops) need txn (--txn)"),
        ({"txn_max_ops": 2}, "need txn (--txn)"),
    ],
)
def test_bad_transaction_settings_are_one_line_naming_the_flag(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        QueueSpec(**fields)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_transaction_settings_round_trip_and_default_off() -> None:
    assert not QueueSpec().txn
    spec = QueueSpec(txn=True, abort_p=0.3, txn_max_ops=2)
    assert QueueSpec.from_dict(spec.to_dict()) == spec
    assert QueueSpec(txn=True, abort_p=0, txn_max_ops=1).abort_p == 0  # a TOML integer is a probability


def test_the_cli_flags_reach_the_spec_and_its_refusals_are_usage_errors() -> None:
    workload = spec_of("--txn", "--abort-p", "0.3", "--txn-max-ops", "3", "--rate", "50").workload
    assert (workload.txn, workload.abort_p, workload.txn_max_ops, workload.rate) == (True, 0.3, 3, 50)
    assert not spec_of().workload.txn
    subscribed = spec_of("--txn", "--consume-via", "subscribe").workload  # members read as txn ops
    assert (subscribed.txn, subscribed.consume_via) == (True, "subscribe")
    ctp = spec_of("--txn", "--txn-ctp", "--txn-ctp-via", "subscribe").workload
    assert (ctp.txn_ctp, ctp.txn_ctp_via) == (True, "subscribe")
    assert QueueSpec.from_dict(ctp.to_dict()) == ctp
    with pytest.raises(UsageError, match=r"abort_p \(--abort-p\) must be in \[0, 1\]"):
        spec_of("--txn", "--abort-p", "2")


# ---- the draw ------------------------------------------------------------------------------


def test_the_draw_is_one_to_max_micro_ops_of_fresh_values_on_their_partitions() -> None:
    values = itertools.count(1)
    rng = random.Random(7)
    draws = [draw_micro_ops(rng, 4, 3, values.__next__) for _ in range(2000)]
    assert Counter(len(draw) for draw in draws).keys() == {1, 2, 3, 4}
    sends = [micro for draw in draws for micro in draw if micro["f"] == "send"]
    polls = [micro for draw in draws for micro in draw if micro["f"] == "poll"]
    assert all(poll == {"f": "poll"} for poll in polls)
    assert [send["value"] for send in sends] == list(range(1, len(sends) + 1))  # fresh, unique, in order
    assert {send["partition"] for send in sends} == {0, 1, 2}
    assert all(
        send["key"] == f"k{send['partition']}" and set(send) == {"f", "partition", "key", "value"}
        for send in sends
    )
    assert abs(len(sends) / (len(sends) + len(polls)) - SEND_P) < 0.03
    assert all(len(draw_micro_ops(rng, 1, 3, values.__next__)) == 1 for _ in range(50))


# ---- one producer thread, its clients faked ------------------------------------------------


class FakeProducer:
    """A transactional producer whose failures are scripted: ``fail[call]`` raises once."""

    def __init__(self, transactional_id: str, fail: dict[str, Exception]) -> None:
        self.transactional_id = transactional_id
        self.fail = fail
        self.calls: list[str] = []
        self.offsets: Counter[int] = Counter()

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail.pop(name)

    def begin(self) -> None:
        self._call("begin")

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        self._call("send")
        self.offsets[partition] += 2  # a marker after each record, as transactions leave them
        return self.offsets[partition] - 2

    def commit(self, timeout: float) -> None:
        self._call("commit")

    def abort(self, timeout: float) -> None:
        self._call("abort")

    def close(self) -> None:
        self.calls.append("close")


class FakeConsumer:
    def __init__(self, batches: list[list[Received]]) -> None:
        self.batches = batches

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        assert start_offsets == {0: 0, 1: 0}

    def poll(self, timeout: float) -> list[Received]:
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        pass


class Harness:
    """A :class:`TxnProducerLoop` on fakes; ``fail`` scripts the next producer made."""

    def __init__(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        abort_p: float = 0.0,
        client: str = "kafka-python",
    ) -> None:
        self.history = tmp_path / "history.jsonl"
        self.recorder = Recorder(self.history)
        self.producers: list[FakeProducer] = []
        self.fail: dict[str, Exception] = {}
        self.batches: list[list[Received]] = []

        def make_producer(client: str, bootstrap: str, transactional_id: str, timeout: float) -> FakeProducer:
            self.producers.append(FakeProducer(transactional_id, self.fail))
            return self.producers[-1]

        monkeypatch.setattr(txn_module, "make_txn_producer", make_producer)
        monkeypatch.setattr(txn_input_module, "make_consumer", lambda *_: FakeConsumer(self.batches))
        settings = TxnSettings(client, "b:1", "t", 2, "read_committed", 1.0, abort_p, 4)
        self.loop = TxnProducerLoop(
            settings, self.recorder, 3, itertools.count(100).__next__, itertools.count(1).__next__
        )
        self.stop = threading.Event()

    def run(self, *micro_ops: dict[str, Any]) -> None:
        assert self.loop.ready(self.stop)
        self.loop.transaction(list(micro_ops), self.stop)

    def ops(self) -> list[tuple[Any, Any]]:
        self.recorder.close()
        pairs = txn_pairs(self.history)
        for invoke, completion in pairs:
            assert workload_problems(invoke, completion) == []
        return pairs


SEND0 = {"f": "send", "partition": 0, "key": "k0", "value": 1}
SEND1 = {"f": "send", "partition": 1, "key": "k1", "value": 2}
POLL = {"f": "poll"}
READ = Received(1, 7, "k1", "9")


def test_a_committed_transaction_records_offsets_reads_and_the_commit_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.batches.append([READ])
    harness.run(SEND0, POLL, SEND1)
    [(invoke, ok)] = harness.ops()
    assert (invoke.process, invoke.value, ok.type) == (3, [SEND0, POLL, SEND1], "ok")
    assert ok.value[:3] == [
        {**SEND0, "offset": 0},
        {"f": "poll", "records": [{"partition": 1, "offset": 7, "key": "k1", "value": 9}]},
        {**SEND1, "offset": 0},
    ]
    assert ok.value[3]["f"] == "commit" and invoke.time <= ok.value[3]["time"] <= ok.time
    assert harness.producers[0].calls == ["begin", "send", "send", "commit"]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_chosen_abort_is_fail_abort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str) -> None:
    harness = Harness(tmp_path, monkeypatch, abort_p=1.0, client=client)
    harness.run(SEND0)
    harness.run(SEND1)  # the same producer and process go on: every send was acknowledged
    [(_, fail), (again, _)] = harness.ops()
    assert (fail.type, fail.error, fail.value[-1]["f"]) == ("fail", "abort", "abort")
    assert harness.producers[0].calls == ["begin", "send", "abort"] * 2 and again.process == 3


UNRESOLVED = TxnSendUnresolved("NoDeliveryReport: no delivery report within 2 s")
TIMED_OUT = TxnAbortable(
    'IndefiniteFailure: KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}'
)


@pytest.mark.parametrize(
    ("client", "failure", "process", "producers"),
    [
        ("kafka-python", UNRESOLVED, 3, 1),
        ("confluent-kafka", TIMED_OUT, 3, 1),
        ("confluent-kafka", UNRESOLVED, 100, 2),
    ],
    ids=["kafka-python-unresolved", "confluent-kafka-timed-out", "confluent-kafka-unresolved"],
)
def test_a_failed_send_aborts_and_the_rest_never_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    failure: TxnAbortable,
    process: int,
    producers: int,
) -> None:
    """After the abort the producer goes on -- unless it is librdkafka's and the send went
    unresolved (its next message could take that send's sequence:
    ``workloads.txn_clients.REUSES_SEQUENCES``): then it is replaced and the thread goes on as a
    fresh process.  A send librdkafka timed out itself leaves it usable (the timeout bumped its epoch)."""
    harness = Harness(tmp_path, monkeypatch, client=client)
    harness.fail["send"] = failure
    harness.run(SEND0, POLL, SEND1)
    harness.run(SEND1)
    [(_, fail), (again, ok)] = harness.ops()
    assert fail.type == "fail" and fail.error == str(failure)
    assert fail.value[:3] == [SEND0, {"f": "poll", "records": []}, SEND1]
    assert fail.value[3]["f"] == "abort"
    assert (again.process, ok.type, len(harness.producers)) == (process, "ok", producers)
    assert harness.producers[0].calls[-2:] == (["abort", "close"] if producers == 2 else ["send", "commit"])


def test_a_commit_with_a_fatal_error_is_info_and_the_thread_goes_on_as_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.fail["commit"] = TxnFatal("commit did not end within 2 s")
    harness.run(SEND0)
    harness.run(SEND1)
    [(first, info), (second, ok)] = harness.ops()
    assert (info.type, info.value[-1]["f"], first.process) == ("info", "commit", 3)
    assert (second.process, ok.type) == (100, "ok")
    assert harness.producers[0].calls[-1] == "close"
    assert [p.transactional_id for p in harness.producers] == [
        "tidemark-t-3"
    ] * 2  # the new one fences the old


@pytest.mark.parametrize(("abort_fails", "outcome"), [(False, "fail"), (True, "info")])
def test_a_refused_commit_is_aborted_and_fail_only_when_the_abort_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abort_fails: bool, outcome: str
) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.fail["commit"] = TxnAbortable("must abort")
    if abort_fails:
        harness.fail["abort"] = TxnFatal("fenced")
    harness.run(SEND0)
    [(_, completion)] = harness.ops()
    assert (completion.type, completion.value[-1]["f"]) == (outcome, "abort")
    assert completion.error.startswith("commit refused: must abort")
    assert harness.producers[0].calls[:4] == ["begin", "send", "commit", "abort"]


def test_a_failed_begin_is_fail_without_an_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.fail["begin"] = TxnFatal("begin_transaction: fatal")
    harness.run(SEND0, POLL)
    [(_, fail)] = harness.ops()
    assert (fail.type, fail.value) == ("fail", [SEND0, {"f": "poll", "records": []}])
    assert harness.loop.process == 100


def test_polls_alone_are_read_only_ops_recorded_only_when_they_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.run(POLL, POLL)  # nothing to read: nothing recorded
    harness.batches.append([READ])
    harness.run(POLL, POLL)
    [(invoke, ok)] = harness.ops()
    assert (invoke.value, ok.type) == ([POLL, POLL], "ok")
    assert ok.value == [{"f": "poll", "records": [READ.to_json()]}, {"f": "poll", "records": []}]
    assert harness.producers[0].calls == []  # no Kafka transaction began


def test_a_stopping_run_aborts_the_open_transaction_and_settles_a_dropped_producer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(tmp_path, monkeypatch)
    harness.fail["send"] = TxnAbortable("no ack")
    harness.fail["abort"] = TxnFatal("fenced")
    harness.run(SEND0)  # the producer is dropped
    harness.stop.set()
    assert harness.loop.ready(harness.stop)
    harness.loop.transaction([SEND0, SEND1], harness.stop)
    harness.loop.run(harness.stop, txn_module.Pacer(0, 1))  # stopped: only closes and settles
    [(_, fail), (_, stopped)] = harness.ops()
    assert fail.type == "fail" and "abort: fenced" in fail.error
    assert (stopped.type, stopped.error) == ("fail", "abort: the run is stopping")
    assert stopped.value[:2] == [{**SEND0, "offset": 0}, SEND1]
    assert [p.calls for p in harness.producers] == [
        ["begin", "send", "abort", "close"],
        ["begin", "send", "abort", "close"],
    ]


# ---- the drain waits for open transactions -------------------------------------------------


class FakeLog:
    """One partition: records at offsets below ``high``; a transaction open from ``stable`` on
    until ``queries_to_settle`` end-offset questions have been asked (never when negative)."""

    def __init__(self, stable: int, high: int, queries_to_settle: int) -> None:
        self.stable, self.high, self.queries_to_settle = stable, high, queries_to_settle

    def end(self, isolation: str) -> int:
        if isolation == "read_uncommitted":
            return self.high
        self.queries_to_settle -= 1
        if self.queries_to_settle == 0:
            self.stable = self.high  # the transaction ended
        return self.stable


class FakeReader:
    def __init__(self, log: FakeLog, isolation: str) -> None:
        self.log, self.isolation, self.position_ = log, isolation, 0

    def end_offsets(self, topic: str, partitions: Any, timeout: float) -> dict[int, int]:
        return dict.fromkeys(partitions, self.log.end(self.isolation))

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        self.position_ = start_offsets[0]

    def poll(self, timeout: float) -> list[Received]:
        limit = self.log.stable if self.isolation == "read_committed" else self.log.high
        received = [Received(0, offset, "k0", str(offset + 1)) for offset in range(self.position_, limit)]
        self.position_ = max(self.position_, limit)
        return received

    def position(self, topic: str, partition: int) -> int:
        return self.position_

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("queries_to_settle", "complete"), [(3, True), (-1, False)])
def test_the_drain_waits_for_open_transactions_and_is_never_complete_below_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queries_to_settle: int, complete: bool
) -> None:
    """A transaction that ends in time: the drain reads to the high watermark, complete.  One
    that never ends: the drain reads what is stable and does not claim the partition complete."""
    log = FakeLog(stable=3, high=5, queries_to_settle=queries_to_settle)
    monkeypatch.setattr(
        txn_drain_module, "make_consumer", lambda client, bootstrap, isolation: FakeReader(log, isolation)
    )
    monkeypatch.setattr(
        queue_drain_module, "make_consumer", lambda client, bootstrap, isolation: FakeReader(log, isolation)
    )
    recorder = Recorder(tmp_path / "history.jsonl")
    workload = QueueWorkload(QueueSpec(partitions=1, txn=True), recorder, "b:1", "t")
    assert workload.drain(time.monotonic() + 1.0) == {0: complete}
    recorder.close()
    ops, _ = read_history(tmp_path / "history.jsonl")
    [drain] = [op for op in ops if op.f == "drain" and op.type == "ok"]
    assert drain.value["complete"] is complete
    assert [record["offset"] for record in drain.value["records"]] == list(range(5 if complete else 3))


# ---- consume-transform-produce (``txn_ctp``) --------------------------------------------------


class GroupLog:
    """One partition's records and the group's committed offset, shared by the fakes: a producer's
    ``send_offsets`` holds offsets pending until its commit applies them (an abort drops them)."""

    def __init__(self, records: int) -> None:
        self.records = [Received(0, offset, "k0", str(1000 + offset)) for offset in range(records)]
        self.committed: dict[int, int] = {}
        self.pending: dict[int, int] = {}
        self.consumers_made = 0


class CtpProducer(FakeProducer):
    def __init__(self, transactional_id: str, fail: dict[str, Exception], log: GroupLog) -> None:
        super().__init__(transactional_id, fail)
        self.log = log

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any, timeout: float) -> None:
        self._call("send_offsets")
        assert group_metadata == "metadata"
        self.log.pending = dict(offsets)

    def commit(self, timeout: float) -> None:
        super().commit(timeout)
        self.log.committed.update(self.log.pending)
        self.log.pending = {}

    def abort(self, timeout: float) -> None:
        super().abort(timeout)
        self.log.pending = {}


class GroupConsumer:
    """Reads the log from the offset assigned, two records a poll."""

    def __init__(self, log: GroupLog, group: str | None) -> None:
        assert group == "tidemark-t-ctp"
        self.log, self.next = log, 0
        log.consumers_made += 1

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        assert list(start_offsets) == [0]
        self.next = start_offsets[0]

    def committed(self, topic: str, partitions: list[int], timeout: float) -> dict[int, int]:
        return {p: o for p, o in self.log.committed.items() if p in partitions}

    def group_metadata(self) -> str:
        return "metadata"

    def poll(self, timeout: float) -> list[Received]:
        taken = self.log.records[self.next : self.next + 2]
        self.next += len(taken)
        return taken

    def position(self, topic: str, partition: int) -> int:
        return self.next

    def close(self) -> None:
        pass


class CtpHarness(Harness):
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(tmp_path, monkeypatch)
        self.log = GroupLog(20)

        def make_producer(client: str, bootstrap: str, transactional_id: str, timeout: float) -> CtpProducer:
            producer = CtpProducer(transactional_id, self.fail, self.log)
            self.producers.append(producer)
            return producer

        def make_consumer(
            client: str, bootstrap: str, isolation: str, group: str | None = None
        ) -> GroupConsumer:
            return GroupConsumer(self.log, group)

        monkeypatch.setattr(txn_module, "make_txn_producer", make_producer)
        monkeypatch.setattr(txn_input_module, "make_consumer", make_consumer)
        settings = TxnSettings("kafka-python", "b:1", "t", 2, "read_committed", 1.0, 0.0, 4, True, 2)
        self.loop = TxnProducerLoop(
            settings, self.recorder, 0, itertools.count(100).__next__, itertools.count(1).__next__
        )


def offsets_sent(completion: Any) -> list[dict[str, int]] | None:
    [micro] = [m for m in completion.value if m["f"] == "send-offsets"]
    sent: list[dict[str, int]] | None = micro.get("offsets")
    return sent


def read_offsets(completion: Any) -> list[int]:
    return [r["offset"] for m in completion.value if m["f"] == "poll" for r in m["records"]]


def test_ctp_thread_owns_its_partitions_and_commits_the_next_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread 0 of 2 owns partition 0 of 2; a transaction of a send and a poll ends with a
    send-offsets micro-op of the group's next offset, and the group's offset moves only at the
    commit."""
    harness = CtpHarness(tmp_path, monkeypatch)
    harness.run(SEND0, POLL)
    harness.run(POLL)  # a draw of polls only is a transaction too: it commits what it read
    [(invoke, first), (_, second)] = harness.ops()
    assert invoke.value[-1] == {"f": "send-offsets", "group": "tidemark-t-ctp"}
    assert (first.type, read_offsets(first), offsets_sent(first)) == (
        "ok",
        [0, 1],
        [{"partition": 0, "offset": 2}],
    )
    assert (second.type, read_offsets(second), offsets_sent(second)) == (
        "ok",
        [2, 3],
        [{"partition": 0, "offset": 4}],
    )
    assert harness.producers[0].calls == ["begin", "send", "send_offsets", "commit"] * 1 + [
        "begin",
        "send_offsets",
        "commit",
    ]
    assert harness.log.committed == {0: 4}


def test_ctp_after_an_abort_reads_again_from_the_committed_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an aborted transaction read is read again by the next one -- the planted bug of the
    checker's ``consumed-skipped`` is a workload that does not rewind here."""
    harness = CtpHarness(tmp_path, monkeypatch)
    harness.run(POLL)
    harness.loop.settings = dataclasses.replace(harness.loop.settings, abort_p=1.0)
    harness.run(POLL)
    harness.loop.settings = dataclasses.replace(harness.loop.settings, abort_p=0.0)
    harness.run(POLL)
    [(_, first), (_, aborted), (_, third)] = harness.ops()
    assert (first.type, read_offsets(first)) == ("ok", [0, 1])
    assert (aborted.type, aborted.error, read_offsets(aborted)) == ("fail", "abort", [2, 3])
    assert (third.type, read_offsets(third), offsets_sent(third)) == (
        "ok",
        [2, 3],
        [{"partition": 0, "offset": 4}],
    )


def test_ctp_a_transaction_whose_consumer_was_replaced_aborts_without_sending_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer replaced mid-transaction resumed at the committed offsets, so its position no
    longer follows the transaction's reads: committing it could skip or repeat records."""
    harness = CtpHarness(tmp_path, monkeypatch)
    assert harness.loop.ready(harness.stop)
    harness.loop.input.close()  # as a failed poll does
    harness.loop.transaction([POLL], harness.stop)
    [(_, completion)] = harness.ops()
    assert completion.type == "fail" and "changed during the transaction" in str(completion.error)
    assert offsets_sent(completion) is None
    assert "send_offsets" not in harness.producers[0].calls
