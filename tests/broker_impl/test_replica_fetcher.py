"""A follower's fetcher stops for good when its partition stops following (``broker_impl.replica_fetcher``).

The broker cancels a partition's fetcher task before making the partition leader of a newer
epoch.  A cancellation can be lost: ``asyncio.wait_for`` before Python 3.12 (the broker's image
runs 3.11) returns the inner call's result instead of raising when that call had already
completed by the time the cancelled task resumes (CPython gh-86296).  The fetcher then applied
the old leader's answer to a partition that now leads, and went on fetching from the deposed
leader: the new leader of epoch 7 appended epoch-6 records behind its own epoch-7 start, took
the old leader's HW as its own, and its fetches let the zombie old leader count it in its ISR
-- the nightly hunt's truncated-committed pair.  Kafka's AbstractFetcherThread drops a response
for a partition no longer in its fetch states or fetched under another leader epoch.

The tests drive the real :class:`ReplicaFetcher` and the real ``KafkaConnection.call`` (its
``asyncio.wait_for``); only the socket exchange ``_call`` is replaced, and the leadership
change happens while the answer is in hand, the order in which the race loses the cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker_impl import wire
from broker_impl.config import BROKER_KEYS
from broker_impl.events import EventLog
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.records import iterate_batches
from broker_impl.replica_fetcher import ReplicaFetcher
from broker_impl.rules import ReplicationRules

from .batch_builder import make_batch

NEVER = 2**63 - 1
OLD_EPOCH, NEW_EPOCH = 6, 7
HELD, LEADER_END = 3, 5  # the follower holds 3 records of epoch 6, its leader 5


def _replica(tmp_path: Path, node: int) -> Partition:
    return Partition(
        "t",
        0,
        node,
        tmp_path / f"n{node}",
        1 << 20,
        FlushPolicy(NEVER, NEVER),
        0,
        ReplicationRules(min_insync_replicas=2),
        EventLog.disabled(),
    )


def _old_leader(tmp_path: Path) -> Partition:
    """Node 1 leading epoch 6 with five records, all of them committed."""
    leader = _replica(tmp_path, 1)
    leader.become_leader(OLD_EPOCH, 0, [1, 2, 3], [1, 2, 3])
    for _ in range(LEADER_END):
        batch = make_batch([b"x"])
        [(_, header)] = iterate_batches(batch)
        leader.append_as_leader(batch, header)
    leader.high_watermark = LEADER_END
    return leader


def _follower(tmp_path: Path, leader: Partition) -> Partition:
    """Node 2 following node 1 in epoch 6, holding its first three records."""
    follower = _replica(tmp_path, 2)
    follower.become_follower(1, OLD_EPOCH, 0, [1, 2, 3], [1, 2, 3])
    follower.log.append_as_follower(leader.log.read(0, 1 << 20, HELD))
    follower.high_watermark = HELD
    return follower


def _answer(api: str, leader: Partition, message: Any, epoch_end: int) -> Any:
    """The old leader's answer: OffsetsForLeaderEpoch says epoch 6 ends at ``epoch_end``, Fetch
    serves its log and HW."""
    if api == "offset-for-leader-epoch":
        part = SimpleNamespace(error_code=wire.NONE, leader_epoch=OLD_EPOCH, end_offset=epoch_end)
        return SimpleNamespace(topics=[SimpleNamespace(partitions=[part])])
    offset = message.topics[0].partitions[0].fetch_offset
    records = (
        leader.log.read(offset, 1 << 20, leader.log_end_offset) if offset < leader.log_end_offset else b""
    )
    part = SimpleNamespace(error_code=wire.NONE, records=records, high_watermark=leader.high_watermark)
    return SimpleNamespace(error_code=wire.NONE, responses=[SimpleNamespace(partitions=[part])])


class _OldLeaderLink:
    """``_call`` of the fetcher's connection, answering as the old leader; while answering the
    first ``race_api`` request it runs ``elect`` (the broker applying the new epoch).  Requests
    after that election never get an answer, as a long poll the leader does not complete.  In
    the OffsetsForLeaderEpoch race the answer says epoch 6 ends at 2, as a leader that lost its
    tail would: applied, it would cut the new leader's log."""

    def __init__(self, leader: Partition, race_api: str, elect: Callable[[], None]) -> None:
        self.leader, self.race_api, self.elect = leader, race_api, elect
        self.after_election: list[str] = []
        self._elected = False

    async def __call__(self, message: Any, response_class: Any, version: int) -> Any:
        api = "fetch" if response_class is wire.APIS[1].response else "offset-for-leader-epoch"
        if self._elected:
            self.after_election.append(api)
            await asyncio.Event().wait()
        epoch_end = HELD - 1 if self.race_api == "offset-for-leader-epoch" else LEADER_END
        answer = _answer(api, self.leader, message, epoch_end)
        if api == self.race_api:
            self._elected = True
            self.elect()
        return answer


async def _race(
    leader: Partition, follower: Partition, race_api: str, change: Callable[[], None]
) -> tuple[asyncio.Task[None], _OldLeaderLink]:
    """A fetcher of ``follower`` from the old leader; while the first ``race_api`` answer is in
    hand, the broker's order: cancel the fetcher, then ``change`` the partition.  Returns once the
    fetcher ended, or after 5 s (the caller cancels and awaits the task)."""
    settings = {key.name: key.default for key in BROKER_KEYS}
    fetcher = ReplicaFetcher(follower, 2, ("n1", 9092), settings)
    task: asyncio.Task[None] | None = None

    def cancel_then_change() -> None:
        assert task is not None
        task.cancel()
        change()

    link = _OldLeaderLink(leader, race_api, cancel_then_change)
    fetcher.connection._call = link  # type: ignore[method-assign]
    task = asyncio.create_task(fetcher.run())
    await asyncio.wait({task}, timeout=5.0)
    return task, link


@pytest.mark.parametrize("race_api", ["fetch", "offset-for-leader-epoch"])
def test_an_answer_that_arrives_after_the_follower_became_leader_is_dropped(
    tmp_path: Path, race_api: str
) -> None:
    async def scenario() -> None:
        leader = _old_leader(tmp_path)
        follower = _follower(tmp_path, leader)

        def elect() -> None:  # Broker._apply_partition_state: stop the fetcher, then lead
            follower.become_leader(NEW_EPOCH, 1, [1, 2, 3], [2, 3])

        task, link = await _race(leader, follower, race_api, elect)
        try:
            assert task.done(), f"the fetcher went on after the election, sending {link.after_election}"
            assert link.after_election == []
            assert follower.log_end_offset == HELD, "the new leader applied the deposed leader's answer"
            assert follower.log.epochs.entries[-1] == (NEW_EPOCH, HELD)
            assert follower.high_watermark == HELD
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            leader.log.close()
            follower.log.close()

    asyncio.run(scenario())


def test_an_answer_that_arrives_after_the_replica_was_reassigned_away_is_dropped(tmp_path: Path) -> None:
    """A replica reassigned away (``Broker._drop_replica``: the fetcher cancelled, the partition a
    follower of the same leader in the same epoch, its log closed and deleted) keeps its leader and
    epoch: the closed log is what stops an orphaned fetcher, before it appends to it."""

    async def scenario() -> None:
        leader = _old_leader(tmp_path)
        follower = _follower(tmp_path, leader)

        def drop() -> None:
            follower.become_follower(1, OLD_EPOCH, 1, [1, 3, 4], [1, 3])
            follower.log.close()

        task, link = await _race(leader, follower, "fetch", drop)
        try:
            assert task.done(), f"the fetcher went on after the drop, sending {link.after_election}"
            assert task.cancelled() or task.exception() is None, "the fetcher failed on the closed log"
            assert link.after_election == []
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            leader.log.close()

    asyncio.run(scenario())
