"""Consumers in child processes (``workloads.hosted_consumers``), without a broker.

Real child processes and real client libraries bootstrapped at a port nobody listens on: an
``assign`` consumer's poll and a group member's poll each wait their timeout there, which is the
window a crash lands in.  What is checked: the records and group events a child's client returns
cross the pipe unchanged (:func:`workloads.group_events.step_to_wire`), offsets keyed by partition
stay keyed by partition numbers; a ``consumer-crash`` kills a consumer and never a producer, its
poll ends as an unknown outcome naming the dead pid; a dead member's commit is ``info`` and its
close returns nothing (it never left the group); and the workload records the crashed poll
``info`` and goes on with a fresh process.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from testbed.record.history import read_history
from testbed.record.recorder import Recorder
from workloads.client_child import answer_of, to_wire
from workloads.client_host import ClientHost
from workloads.clients import IndefiniteFailure, Received
from workloads.group_events import Assigned, CommitDone, Revoked, step_from_wire, step_to_wire
from workloads.hosted_consumers import hosted_consumer, hosted_group_consumer
from workloads.queue import QueueSpec, QueueWorkload

from .test_client_host import NOBODY, TIMEOUT, alive, in_thread, wait_for

POLL = 5.0
"""A poll's own timeout: long enough that a crash lands inside it."""
STEPS = [
    Assigned((0, 2), 4, "member-1"),
    Received(0, 17, "k0", "42"),
    Received(2, 3, None, None),
    CommitDone(9, "info", "no answer within 3 s"),
    Revoked((0, 2), lost=True),
]


def test_records_and_group_events_cross_the_pipe_unchanged() -> None:
    wired = json.loads(json.dumps(to_wire(STEPS)))
    assert [step_from_wire(item) for item in wired] == STEPS
    assert to_wire(("ok", None)) == ["ok", None]
    for bad in ({"step": "rebalance"}, {"partition": 0}, {"step": "record", "partition": 0}, [1]):
        with pytest.raises(ValueError, match=r"record or group event|bad record"):
            step_from_wire(bad)
    assert step_to_wire(STEPS[0]) == {
        "step": "assigned",
        "partitions": (0, 2),
        "generation": 4,
        "member_id": "member-1",
    }


def test_a_child_gets_offsets_keyed_by_partition_numbers_again() -> None:
    class Seen:
        def commit_sync(self, offsets: dict[Any, int], timeout: float) -> tuple[str, None]:
            assert offsets == {0: 5, 12: 9} and timeout == 1.0
            return "ok", None

    request = json.loads(json.dumps({"call": "commit_sync", "args": [{0: 5, 12: 9}, 1.0]}))
    assert answer_of(Seen(), request)[1] == {"ok": ["ok", None]}


def test_a_consumer_crash_kills_a_consumer_mid_poll_and_never_a_producer() -> None:
    host = ClientHost()
    producer = host.producer(1, "confluent-kafka", NOBODY, "all", True, TIMEOUT)
    consumer = hosted_consumer(host, 7, "confluent-kafka", NOBODY, "read_uncommitted", TIMEOUT)
    consumer.assign("t", {0: 0, 1: 5})
    pid = consumer.hosted.pid
    thread, outcome = in_thread(lambda: consumer.poll(POLL))
    report = host.crash(3, "consumer")
    thread.join(10)
    assert report == {
        "process": 7,
        "pid": pid,
        "client": "consumer",
        "in_flight": "poll",
        "interrupted": True,
    }
    error = outcome.get("error")
    assert isinstance(error, IndefiniteFailure), outcome
    assert (
        "crashed mid-poll" in str(error)
        and f"client process {pid} " in str(error)
        and "SIGKILL" in str(error)
    )
    assert not alive(pid) and [hosted.pid for hosted in host.running()] == [producer.hosted.pid]
    with pytest.raises(LookupError, match="no consumer process is running"):
        host.crash(0, "consumer")
    consumer.close()  # a dead client's close does nothing and never raises
    host.shutdown()
    assert wait_for(lambda: not alive(producer.hosted.pid), 10)


def test_a_dead_group_member_commits_info_and_closes_without_leaving() -> None:
    """librdkafka opens without a broker (kafka-python's consumer bootstraps in its constructor)."""
    host = ClientHost()
    member = hosted_group_consumer(
        host, None, ("confluent-kafka", NOBODY, "t", "g", "sync", TIMEOUT, "read_committed")
    )
    assert member.poll(0.2) == []  # no coordinator at that address: nothing happened yet
    assert member.commit_in_flight() is False
    pid = member.hosted.pid
    thread, outcome = in_thread(lambda: member.poll(POLL))
    report = host.crash(0, "consumer")
    thread.join(10)
    assert (
        report["client"] == "group-consumer" and report["process"] is None and report["interrupted"] is True
    )
    assert isinstance(outcome.get("error"), IndefiniteFailure) and f"client process {pid} " in str(
        outcome["error"]
    )
    assert member.commit_in_flight() is True  # nothing more is committed: the next poll finds the death
    outcome_, error = member.commit_sync({0: 3}, TIMEOUT)
    assert outcome_ == "info" and "crashed mid-commit" in str(error)
    assert member.commit_async({0: 3}, 1) == ("info", error)
    assert member.close() == []


def test_the_workload_records_the_crashed_poll_info_and_goes_on_as_a_fresh_process(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history.jsonl")
    spec = QueueSpec(
        producers=0,
        consumers=1,
        partitions=2,
        client="confluent-kafka",
        request_timeout=TIMEOUT,
        client_processes=True,
    )
    workload = QueueWorkload(spec, recorder, NOBODY, "t")
    assert workload.crash_unavailable("consumer") is None
    assert "--producers 0" in str(workload.crash_unavailable("producer"))
    stop = threading.Event()
    thread = threading.Thread(target=workload.run, args=(stop,))
    thread.start()
    try:
        assert wait_for(lambda: any(hosted.kind == "consumer" for hosted in workload._host.running()), 30)  # type: ignore[union-attr]
        report = workload.crash_client(0, "consumer")
        assert wait_for(lambda: len(workload._host.running()) == 1, 30)  # type: ignore[union-attr]  # its successor
    finally:
        stop.set()
        thread.join(30)
    recorder.close()
    assert not thread.is_alive() and workload.errors == []
    ops, skipped = read_history(tmp_path / "history.jsonl")
    assert skipped == []
    [crashed] = [op for op in ops if op.type == "info"]
    assert (crashed.f, crashed.process) == ("poll", report["process"]) and "crashed mid-poll" in str(
        crashed.error
    )
    assert report["in_flight"] == "poll" and report["interrupted"] is True
    assert workload._host is not None and workload._host.running() == []  # the run's end closed the successor
