"""A group member's ops, from scripted client answers: the order, the processes, the outcomes.

:class:`workloads.group_member.GroupMember` turns what a group consumer client reported (records
and rebalance / commit events, in order) into ops.  A scripted client feeds it each situation a
real client produces -- a first join, a rebalance, a commit answered, refused or never answered,
a client failure -- and every history is also pushed through the history converter, which
rejects any op that breaks the op model (two ops pending in one process, an invoke by a process
whose op ended ``info``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from testbed.record.history import convert_history
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from workloads.clients import Received
from workloads.group_events import Assigned, CommitDone, CommitMode, Outcome, Revoked, Step
from workloads.group_member import GroupMember


class ScriptedClient:
    """A group consumer client answering from a script (see the module docstring)."""

    def __init__(self) -> None:
        self.polls: list[list[Step] | BaseException] = []
        self.sync_answers: list[tuple[Outcome, str | None]] = []
        self.async_answers: list[tuple[Outcome, str | None] | None] = []
        self.in_flight = False
        self.on_close: list[Step] = []
        self.closed = False
        self.sync_commits: list[dict[int, int]] = []
        self.async_commits: list[tuple[dict[int, int], int]] = []

    def poll(self, timeout: float) -> list[Step]:
        answer = self.polls.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        self.sync_commits.append(dict(offsets))
        return self.sync_answers.pop(0)

    def commit_in_flight(self) -> bool:
        return self.in_flight

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        self.async_commits.append((dict(offsets), token))
        return self.async_answers.pop(0) if self.async_answers else None

    def close(self) -> list[Step]:
        self.closed = True
        return self.on_close


@pytest.fixture
def history(tmp_path: Path) -> Iterator[tuple[Recorder, list[Op], Path]]:
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path)
    ops: list[Op] = []
    recorder.listeners.append(ops.append)
    yield recorder, ops, path
    recorder.close()


def member(
    history: tuple[Recorder, list[Op], Path], client: ScriptedClient, commit: CommitMode = "sync"
) -> GroupMember:
    fresh = itertools.count(100)
    return GroupMember(7, client, history[0], lambda: next(fresh), 3, commit, 5.0)


def records(partition: int, *offsets: int) -> list[Step]:
    return [Received(partition, offset, f"k{partition}", str(offset * 10)) for offset in offsets]


def summary(ops: list[Op]) -> list[tuple[Any, str, str]]:
    """(process, type, f) of every op, for order assertions."""
    return [(op.process, op.type, op.f) for op in ops]


def well_formed(history: tuple[Recorder, list[Op], Path]) -> None:
    """The converter accepts the history (it enforces the op model) and no invoke is left open."""
    recorder, ops, path = history
    recorder.close()
    convert_history(path, path.with_suffix(".parquet"))
    pending: dict[Any, Op] = {}
    for op in ops:
        if op.type == "invoke":
            pending[op.process] = op
        else:
            pending.pop(op.process)
    assert not pending, f"invokes never completed: {pending}"


def test_a_process_is_one_assignment_with_its_polls_and_commits(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [
        [Revoked(()), Assigned((0, 2), 4, "m-1"), *records(0, 5, 6), *records(2, 9)],
        [Revoked((0, 2)), Assigned((2,), 5, "m-1"), *records(2, 10)],
    ]
    client.sync_answers = [("ok", None), ("ok", None)]
    consumer = member(history, client)
    consumer.poll(0.5)
    consumer.poll(0.5)
    _, ops, _ = history
    assert summary(ops) == [
        (3, "invoke", "assign"), (3, "ok", "assign"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (3, "invoke", "commit"), (3, "ok", "commit"),
        (3, "invoke", "revoke"), (3, "ok", "revoke"),
        (100, "invoke", "assign"), (100, "ok", "assign"),
        (100, "invoke", "poll"), (100, "ok", "poll"),
        (100, "invoke", "commit"), (100, "ok", "commit"),
    ]  # fmt: skip
    assert ops[1].value == {"partitions": [0, 2], "generation": 4, "member_id": "m-1", "consumer": 7}
    assert ops[3].value == [
        {"partition": 0, "offset": 5, "key": "k0", "value": 50},
        {"partition": 0, "offset": 6, "key": "k0", "value": 60},
        {"partition": 2, "offset": 9, "key": "k2", "value": 90},
    ]
    assert ops[5].value == {"offsets": {"0": 7, "2": 10}, "generation": 4, "polled_by": 3}
    assert ops[7].value == {"partitions": [0, 2], "lost": False, "generation": 4, "consumer": 7}
    # The new assignment's process commits only what it read itself, in its own generation.
    assert ops[13].value == {"offsets": {"2": 11}, "generation": 5, "polled_by": 100}
    assert client.sync_commits == [{0: 7, 2: 10}, {2: 11}]
    well_formed(history)


def test_an_assignment_that_keeps_a_partition_starts_its_positions_afresh(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [
        [Assigned((0, 1), 1, "m"), *records(0, 1), *records(1, 1)],
        [Revoked((0, 1)), Assigned((0, 1), 2, "m"), *records(0, 2)],
    ]
    client.sync_answers = [("ok", None), ("ok", None)]
    consumer = member(history, client)
    consumer.poll(0.5)
    consumer.poll(0.5)
    assert client.sync_commits == [{0: 2, 1: 2}, {0: 3}]  # partition 1 was not read since the rebalance
    well_formed(history)


def test_records_of_a_partition_not_assigned_are_recorded_but_never_committed(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), *records(0, 4), *records(1, 8)]]
    client.sync_answers = [("ok", None)]
    consumer = member(history, client)
    consumer.poll(0.5)
    assert client.sync_commits == [{0: 5}]
    assert [record["partition"] for record in history[1][3].value] == [0, 1]


def test_a_commit_without_an_answer_hands_the_assignment_to_a_fresh_process(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((1,), 2, "m"), *records(1, 0)], records(1, 1)]
    client.sync_answers = [("info", "no answer within 5 s"), ("fail", "ILLEGAL_GENERATION")]
    consumer = member(history, client)
    consumer.poll(0.5)
    consumer.poll(0.5)
    _, ops, _ = history
    assert summary(ops) == [
        (3, "invoke", "assign"), (3, "ok", "assign"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (3, "invoke", "commit"), (3, "info", "commit"),
        (100, "invoke", "assign"), (100, "ok", "assign"),
        (100, "invoke", "poll"), (100, "ok", "poll"),
        (100, "invoke", "commit"), (100, "fail", "commit"),
    ]  # fmt: skip
    assert ops[5].error == "no answer within 5 s"
    assert ops[7].value == {
        "partitions": [1], "generation": 2, "member_id": "m", "consumer": 7, "takeover": 3,
    }  # fmt: skip
    # The successor keeps the position: its commit carries the offset its own poll moved to.
    assert ops[11].value == {"offsets": {"1": 2}, "generation": 2, "polled_by": 100}
    assert ops[11].error == "ILLEGAL_GENERATION"
    well_formed(history)


def test_while_an_unanswered_commit_is_in_flight_no_other_is_sent(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((1,), 2, "m"), *records(1, 0)]]
    client.in_flight = True
    consumer = member(history, client)
    consumer.poll(0.5)
    assert client.sync_commits == []
    assert [op.f for op in history[1]] == ["assign", "assign", "poll", "poll"]


def test_auto_commit_records_no_commit_op(history: tuple[Recorder, list[Op], Path]) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), *records(0, 0, 1)]]
    consumer = member(history, client, "auto")
    consumer.poll(0.5)
    assert [op.f for op in history[1]] == ["assign", "assign", "poll", "poll"]
    assert client.sync_commits == [] and client.async_commits == []


def test_async_commits_belong_to_a_committer_process_one_in_flight_at_a_time(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [
        [Assigned((0,), 3, "m"), *records(0, 0)],
        records(0, 1),  # the first commit is unanswered: nothing sent
        [CommitDone(1, "ok"), *records(0, 2)],
        [Revoked((0,)), CommitDone(2, "fail", "REBALANCE_IN_PROGRESS"), Assigned((0,), 4, "m")],
    ]
    consumer = member(history, client, "async")
    for _ in range(4):
        consumer.poll(0.5)
    _, ops, _ = history
    assert summary(ops) == [
        (3, "invoke", "assign"), (3, "ok", "assign"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (100, "invoke", "commit"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (100, "ok", "commit"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (100, "invoke", "commit"),
        (3, "invoke", "revoke"), (3, "ok", "revoke"),
        (100, "fail", "commit"),
        (101, "invoke", "assign"), (101, "ok", "assign"),
    ]  # fmt: skip
    assert ops[4].value == {"offsets": {"0": 1}, "generation": 3, "polled_by": 3}
    assert ops[10].value == {"offsets": {"0": 3}, "generation": 3, "polled_by": 3}
    assert client.async_commits == [({0: 1}, 1), ({0: 3}, 2)]
    well_formed(history)


def test_an_async_commit_unanswered_at_close_ends_info_and_its_committer_retires(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), *records(0, 0)]]
    client.on_close = [Revoked((0,))]
    consumer = member(history, client, "async")
    consumer.poll(0.5)
    consumer.close()
    _, ops, _ = history
    assert summary(ops)[-3:] == [(3, "invoke", "revoke"), (3, "ok", "revoke"), (100, "info", "commit")]
    assert ops[-1].error == "no answer before the consumer closed"
    assert consumer.committer is None and client.closed
    well_formed(history)


def test_an_async_commit_refused_at_once_is_completed_at_once(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), *records(0, 0)], records(0, 1)]
    client.async_answers = [("info", "KafkaConnectionError: lost"), None]
    consumer = member(history, client, "async")
    consumer.poll(0.5)
    consumer.poll(0.5)
    _, ops, _ = history
    commits = [(op.process, op.type) for op in ops if op.f == "commit"]
    assert commits == [(100, "invoke"), (100, "info"), (101, "invoke")]  # the committer retired
    assert consumer.pending is not None


def test_a_failed_poll_ends_its_process_and_closes_the_client_without_a_revoke(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), *records(0, 0)], RuntimeError("broker gone")]
    client.on_close = [Revoked((0,)), CommitDone(1, "ok")]
    consumer = member(history, client, "async")
    consumer.poll(0.5)
    with pytest.raises(RuntimeError) as raised:
        consumer.poll(0.5)
    consumer.poll_failed(raised.value)
    _, ops, _ = history
    assert summary(ops) == [
        (3, "invoke", "assign"), (3, "ok", "assign"),
        (3, "invoke", "poll"), (3, "ok", "poll"),
        (100, "invoke", "commit"),
        (3, "invoke", "poll"), (3, "info", "poll"),
        (100, "ok", "commit"),  # answered during the close; process 3's revoke is not recorded
    ]  # fmt: skip
    assert ops[6].error == "RuntimeError: broker gone"
    assert client.closed and consumer.process == 101
    well_formed(history)


def test_a_new_assignment_without_a_revoke_still_starts_a_new_process(
    history: tuple[Recorder, list[Op], Path],
) -> None:
    client = ScriptedClient()
    client.polls = [[Assigned((0,), 1, "m"), Assigned((1,), 2, "m"), *records(1, 0)]]
    client.sync_answers = [("ok", None)]
    consumer = member(history, client)
    consumer.poll(0.5)
    assign_processes = [op.process for op in history[1] if op.f == "assign" and op.type == "ok"]
    assert assign_processes == [3, 100]
    well_formed(history)
