"""The group's members as threads, and consumer churn, with fake clients (no broker).

A fake client joins a fake group on its first poll (an ``assign`` of the partitions the group
hands it), then polls nothing until it is closed (a ``revoke``).  The tests drive
:class:`workloads.group_fleet.ConsumerFleet` through a run and through churn, and wait on the
recorded ops (conditions with deadlines) rather than on time.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from nemesis.consumer_churn import ConsumerChurn
from testbed.record.history import convert_history
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from workloads.group_events import Assigned, Outcome, Revoked, Step
from workloads.group_fleet import ConsumerFleet
from workloads.queue import QueueSpec, QueueWorkload

POLL_SECONDS = 0.02
"""How long a fake poll blocks, as a real poll blocks up to its timeout when nothing arrives."""


class FakeGroup:
    """Hands each new client partition ``n`` (its number) and keeps every client made."""

    def __init__(self) -> None:
        self.clients: list[FakeClient] = []
        self.failures_to_make = 0
        self._lock = threading.Lock()

    def new_client(self) -> FakeClient:
        with self._lock:
            if self.failures_to_make:
                self.failures_to_make -= 1
                raise ConnectionError("no broker answers yet")
            client = FakeClient(len(self.clients))
            self.clients.append(client)
            return client


class FakeClient:
    def __init__(self, number: int) -> None:
        self.partition = number
        self.joined = False
        self.closed = threading.Event()
        self.polls = 0
        self.fail_next_poll = False
        self._idle = threading.Event()

    def poll(self, timeout: float) -> list[Step]:
        self.polls += 1
        if self.fail_next_poll:
            self.fail_next_poll = False
            raise ConnectionError("client broke")
        if not self.joined:
            self.joined = True
            return [Assigned((self.partition,), 1, f"member-{self.partition}")]
        self._idle.wait(POLL_SECONDS)
        return []

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        return "ok", None

    def commit_in_flight(self) -> bool:
        return False

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        return None

    def close(self) -> list[Step]:
        self.closed.set()
        return [Revoked((self.partition,))] if self.joined else []


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Recorder, list[Op], Path]]:
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path)
    ops: list[Op] = []
    recorder.listeners.append(ops.append)
    yield recorder, ops, path
    recorder.close()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        threading.Event().wait(0.01)


def completed(ops: list[Op], f: str) -> list[Op]:
    return [op for op in ops if op.f == f and op.type != "invoke"]


class Running:
    """A fleet running in a thread over a fake group, stopped and joined on exit."""

    def __init__(self, recorded: tuple[Recorder, list[Op], Path], members: int = 3) -> None:
        self.group = FakeGroup()
        fresh = itertools.count(50)
        self.fleet = ConsumerFleet(recorded[0], lambda: next(fresh), self.group.new_client, "sync", 1.0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.fleet.run, args=(list(range(10, 10 + members)), self.stop))
        self.ops = recorded[1]

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the fleet did not stop"


def test_members_join_and_all_leave_at_the_end(recorded: tuple[Recorder, list[Op], Path]) -> None:
    with Running(recorded) as running:
        wait_for(lambda: len(completed(running.ops, "assign")) == 3, "three members to join")
    assert all(client.closed.is_set() for client in running.group.clients)
    assert sorted(op.process for op in completed(running.ops, "revoke")) == [10, 11, 12]
    recorded[0].close()
    convert_history(recorded[2], recorded[2].with_suffix(".parquet"))


def test_churn_by_leaving_closes_the_victim_and_a_newcomer_joins(
    recorded: tuple[Recorder, list[Op], Path],
) -> None:
    with Running(recorded) as running:
        wait_for(lambda: len(completed(running.ops, "assign")) == 3, "three members to join")
        by_client = {op.value["consumer"]: op.process for op in completed(running.ops, "assign")}
        report = running.fleet.churn("leave", 4)  # 4 modulo 3 running: the second slot started
        victim = report["stopped"]
        assert report["stop"] == "leave" and "error" not in report
        assert victim["process"] == 11 and by_client[victim["consumer"]] == 11
        assert running.group.clients[victim["consumer"]].closed.is_set()  # closed before churn returned
        assert [op.process for op in completed(running.ops, "revoke")] == [11]
        newcomer = report["started"]["process"]
        assert newcomer >= 50  # a fresh process id
        wait_for(lambda: newcomer in [op.process for op in completed(running.ops, "assign")], "the newcomer")
        assert len(running.group.clients) == 4
    assert sorted(op.process for op in completed(running.ops, "revoke")) == [10, 11, 12, newcomer]


def test_churn_by_stalling_stops_polling_and_closes_only_later(
    recorded: tuple[Recorder, list[Op], Path],
) -> None:
    with Running(recorded) as running:
        running.fleet.stall_seconds = 3600.0  # stays open until the run ends
        wait_for(lambda: len(completed(running.ops, "assign")) == 3, "three members to join")
        report = running.fleet.churn("stall", 0)
        stalled = running.group.clients[report["stopped"]["consumer"]]
        polls = stalled.polls
        assert not stalled.closed.is_set()  # open, as a stuck application leaves it
        wait_for(
            lambda: len(running.group.clients) == 4 and running.group.clients[3].polls > 3, "newcomer polls"
        )
        assert stalled.polls == polls  # and no longer polled
        assert completed(running.ops, "revoke") == []
        again = running.fleet.churn("leave", 0)  # the stalled member is no longer a candidate
        assert again["stopped"]["process"] != report["stopped"]["process"]
    assert stalled.closed.is_set()  # closed once the run stopped, and its revoke recorded then
    assert report["stopped"]["process"] in [op.process for op in completed(running.ops, "revoke")]


def test_a_stalled_member_is_closed_after_its_stall(recorded: tuple[Recorder, list[Op], Path]) -> None:
    with Running(recorded) as running:
        running.fleet.stall_seconds = 0.1
        wait_for(lambda: len(completed(running.ops, "assign")) == 3, "three members to join")
        report = running.fleet.churn("stall", 2)
        stalled = running.group.clients[report["stopped"]["consumer"]]
        wait_for(stalled.closed.is_set, "the stalled member to be closed after its stall")
        wait_for(lambda: len(completed(running.ops, "revoke")) == 1, "its revoke")


def test_churn_is_refused_when_nothing_runs(recorded: tuple[Recorder, list[Op], Path]) -> None:
    fleet = ConsumerFleet(recorded[0], itertools.count(50).__next__, FakeGroup().new_client, "sync", 1.0)
    with pytest.raises(LookupError, match="not running"):
        fleet.churn("leave", 0)
    with pytest.raises(ValueError, match="unknown way"):
        fleet.churn("explode", 0)
    with Running(recorded, members=0) as running:
        wait_for(lambda: running.fleet._stop is not None, "the fleet to start")
        with pytest.raises(LookupError, match="no consumer"):
            running.fleet.churn("leave", 0)


def test_a_client_that_fails_is_replaced_under_a_fresh_process(
    recorded: tuple[Recorder, list[Op], Path],
) -> None:
    with Running(recorded, members=1) as running:
        running.group.failures_to_make = 2  # the first two attempts to start a client fail: no op
        wait_for(lambda: len(completed(running.ops, "assign")) == 1, "the member to join")
        assert completed(running.ops, "assign")[0].process == 10
        running.group.clients[0].fail_next_poll = True
        wait_for(lambda: len(running.group.clients) == 2, "a new client after the failure")
        wait_for(lambda: len(completed(running.ops, "assign")) == 2, "the new client to join")
        second = completed(running.ops, "assign")[1]
    polls = completed(running.ops, "poll")
    assert [(op.process, op.type) for op in polls] == [(10, "info")]
    assert second.process >= 50 and second.value["consumer"] == 1
    assert running.group.clients[0].closed.is_set()


def test_the_queue_workload_churns_only_under_subscribe(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history.jsonl")
    try:
        assigned = QueueWorkload(QueueSpec(), recorder, "127.0.0.1:1", "t")
        assert "--consume-via subscribe" in (assigned.churn_unavailable() or "")
        with pytest.raises(LookupError, match="--consume-via subscribe"):
            assigned.churn_consumer("leave", 0)
        grouped = QueueWorkload(QueueSpec(consume_via="subscribe"), recorder, "127.0.0.1:1", "t")
        assert grouped.churn_unavailable() is None
        assert isinstance(grouped, ConsumerChurn)  # the nemesis's protocol, met structurally
        with pytest.raises(LookupError, match="not running"):
            grouped.churn_consumer("leave", 0)
        with pytest.raises(LookupError, match="unknown way"):
            grouped.churn_consumer("explode", 0)
    finally:
        recorder.close()
