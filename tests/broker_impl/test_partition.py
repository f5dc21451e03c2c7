"""A leader replica's high watermark while an ISR change is in flight (``broker_impl.partition``).

KIP-497: until the controller commits an AlterPartition, the leader computes the HW over the
larger of the committed and the proposed ISR.  A shrink nobody has accepted must not advance
the HW, nor acknowledge the acks=all writes that wait for the followers it would drop -- those
followers may still be the ones elected.  Only the commit may (``update_isr``), and then at once.
Nor may an answer that elected another leader, or none at all, end the proposal before the metadata
says this replica follows; an unanswered one is sent again until it is answered
(:mod:`broker_impl.isr_proposals`, driven with controller stand-ins).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker_impl.broker import Broker
from broker_impl.events import EventLog
from broker_impl.isr_proposals import RETRY_SECONDS
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.records import iterate_batches
from broker_impl.rpc import RpcError
from broker_impl.rules import ReplicationRules

from .batch_builder import make_batch
from .test_unclean_shutdown import broker_settings

NEVER = 2**63 - 1


def _leader(tmp_path: Path, appended: int) -> Partition:
    """Node 1 leading partition t-0 with ISR [1, 2, 3] and ``appended`` records of its own."""
    replica = Partition(
        "t",
        0,
        1,
        tmp_path / "t-0",
        1 << 20,
        FlushPolicy(NEVER, NEVER),
        0,
        ReplicationRules(),
        EventLog.disabled(),
    )
    replica.become_leader(1, 0, [1, 2, 3], [1, 2, 3])
    append(replica, appended)
    return replica


def append(leader: Partition, records: int) -> None:
    for _ in range(records):
        batch = make_batch([b"x"])
        [(_, header)] = iterate_batches(batch)
        leader.log.append_as_leader(batch, header, leader.leader_epoch)


def test_a_pending_shrink_neither_advances_the_hw_nor_acknowledges_until_committed(tmp_path: Path) -> None:
    async def scenario() -> None:
        replica = _leader(tmp_path, 5)
        replica.record_follower_fetch(2, 5)
        replica.record_follower_fetch(3, 2)  # follower 3 lags: the HW is its LEO
        assert replica.high_watermark == 2
        waiter = replica.add_ack_waiter(5)  # an acks=all write up to offset 5

        replica.propose_isr([1, 2], [3], [])
        replica.record_follower_fetch(2, 5)  # a fetch recomputes the HW too
        assert replica.high_watermark == 2, "a proposed shrink advanced the HW before its commit"
        assert not waiter.future.done(), "a proposed shrink acknowledged a write 3 lacks"

        replica.update_isr(1, [1, 2])  # the controller commits the shrink
        assert replica.high_watermark == 5
        assert waiter.future.done() and waiter.future.result() == 0

    asyncio.run(scenario())


def test_a_refused_proposal_leaves_the_hw_to_the_committed_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        replica = _leader(tmp_path, 4)
        replica.record_follower_fetch(2, 4)
        replica.record_follower_fetch(3, 1)
        replica.propose_isr([1, 2], [3], [])
        replica.drop_isr_proposal()
        assert replica.pending_isr is None and replica.high_watermark == 1
        replica.record_follower_fetch(3, 4)
        assert replica.high_watermark == 4

    asyncio.run(scenario())


async def expanding_broker(tmp_path: Path, controller: Any) -> tuple[Broker, Partition]:
    """Broker 1 leading t-0 in epoch 7 (replicas [1, 2, 3, 4], ISR [1, 3, 4]) with 3 records every
    follower has -- 2, the reassignment's newcomer, caught up -- once it proposed to add 2 to the
    ISR through ``controller``: the broker and its leader replica."""
    broker = Broker(broker_settings(tmp_path / "data"))
    broker.controller = controller
    leader = broker.partitions[("t", 0)] = broker._new_partition(("t", 0), 0)
    leader.become_leader(7, 10, [1, 2, 3, 4], [1, 3, 4])
    append(leader, 3)
    for follower in (2, 3, 4):
        leader.record_follower_fetch(follower, 3)
    await broker.isr_proposals.propose(leader, [1, 2, 3, 4], [], [2])
    return broker, leader


async def expanding_leader(tmp_path: Path, controller: Any) -> Partition:
    """The leader replica of :func:`expanding_broker`."""
    return (await expanding_broker(tmp_path, controller))[1]


class ReassigningController:
    """Stands in for the broker's controller link: accepts an ISR expansion that completes a
    reassignment removing the proposing leader, so the answer's state has another leader in a newer
    epoch (Kafka's NEW_LEADER_ELECTED); heartbeats bring no metadata -- it is still on its way."""

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        if method != "alter_partition":
            return {"version": 0}
        state = {"leader": 2, "leader_epoch": params["leader_epoch"] + 1, "isr": [2, 3, 4]}
        return {"state": {**state, "partition_epoch": params["partition_epoch"] + 2, "replicas": [2, 3, 4]}}


def test_a_leader_whose_expansion_elected_another_keeps_its_hw_over_the_larger_isr(tmp_path: Path) -> None:
    """Seen in a nightly membership hunt (2026-12-01): the recommissioned broker 2 joined the ISR of
    leader 1, which completed the reassignment, and the controller elected 2; leader 1, told so,
    dropped its proposal, computed the HW over [1, 3, 4] again and acknowledged a write 2 never had
    in the 8 ms before it learned it followed -- 2 led without it (lost-write)."""

    async def scenario() -> None:
        leader = await expanding_leader(tmp_path, ReassigningController())
        append(leader, 2)
        leader.record_follower_fetch(3, 5)
        leader.record_follower_fetch(4, 5)
        assert leader.pending_isr == [1, 2, 3, 4], "the proposal was dropped before the metadata came"
        assert leader.high_watermark == 3, "acknowledged past the LEO of the replica the controller elected"

    asyncio.run(scenario())


class UnansweringController:
    """Stands in for the controller link: an AlterPartition gets no answer (the connection fails
    after the controller applied it, completing a reassignment that elected broker 2); the next
    heartbeat brings that metadata."""

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        if method == "alter_partition":
            raise ConnectionError("the answer was lost")
        state = {
            "leader": 2,
            "leader_epoch": 8,
            "partition_epoch": 12,
            "replicas": [1, 2, 3, 4],
            "isr": [2, 3, 4],
        }
        return {"metadata": {"version": 9, "brokers": {}, "topics": {"t": {"partitions": [state]}}}}


def test_an_unanswered_proposal_is_dropped_only_after_the_metadata_was_asked_for(tmp_path: Path) -> None:
    """The answer lost, the change may have been applied: the leader learns from a heartbeat that
    it follows before it drops the proposal, so the HW never goes back to the old ISR meanwhile."""

    async def scenario() -> None:
        leader = await expanding_leader(tmp_path, UnansweringController())
        assert (leader.role, leader.leader, leader.leader_epoch) == ("follower", 2, 8)
        assert leader.high_watermark == 3

    asyncio.run(scenario())


class UnreachableController:
    """Stands in for the controller link: unreachable (every call fails to connect) for its first
    ``unanswered`` AlterPartitions and the heartbeats among them, then it answers the next one
    as applied -- ISR [1, 2, 3, 4] in partition epoch 11 -- and heartbeats bring no metadata."""

    def __init__(self, unanswered: int) -> None:
        self.unanswered = unanswered
        self.proposals: list[list[int]] = []

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        if method == "alter_partition":
            self.proposals.append(params["isr"])
        if len(self.proposals) <= self.unanswered:
            raise ConnectionError("the controller is unreachable")
        if method != "alter_partition":
            return {"version": 0}
        state = {"leader": 1, "leader_epoch": 7, "partition_epoch": 11, "isr": params["isr"]}
        return {"state": {**state, "replicas": [1, 2, 3, 4]}}


def test_an_unanswered_proposal_stays_in_force_and_is_sent_again_until_answered(tmp_path: Path) -> None:
    """Kafka's AlterPartitionManager retries an unanswered AlterPartition: the controller may have
    applied it, and the replica it added may be elected.  Until 2026-12-02 the bundled leader dropped
    it after half a second and a failed heartbeat, and computed the HW over [1, 3, 4] again --
    acknowledging writes 2 lacked, which 2, in the controller's ISR, could lead without."""

    async def scenario() -> None:
        controller = UnreachableController(unanswered=2)
        broker, leader = await expanding_broker(tmp_path, controller)
        proposals = broker.isr_proposals
        append(leader, 2)  # offsets 3 and 4, which 3 and 4 fetch and 2 does not
        leader.record_follower_fetch(3, 5)
        leader.record_follower_fetch(4, 5)
        start = time.monotonic()
        await proposals.maintain_once(start)
        assert controller.proposals == [[1, 2, 3, 4]], "sent again before its back-off"
        for attempt in (1, 2):
            assert leader.pending_isr == [1, 2, 3, 4], (
                f"the unanswered proposal was dropped (attempt {attempt})"
            )
            assert leader.high_watermark == 3, "acknowledged past what 2, maybe in the controller's ISR, has"
            await proposals.maintain_once(start + attempt * (RETRY_SECONDS + 0.1))
        assert controller.proposals == [[1, 2, 3, 4]] * 3, "the same proposal, sent again as it stands"
        assert leader.pending_isr is None and (leader.isr, leader.partition_epoch) == ([1, 2, 3, 4], 11)
        assert leader.high_watermark == 3
        leader.record_follower_fetch(2, 5)
        assert leader.high_watermark == 5

    asyncio.run(scenario())


class RefusingController:
    """Stands in for the controller link: it answers every AlterPartition with an error and no state
    (the request was malformed: an ISR outside the replicas its metadata holds)."""

    def __init__(self) -> None:
        self.proposals = 0

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        if method != "alter_partition":
            return {"version": 0}
        self.proposals += 1
        raise RpcError(f"invalid ISR {params['isr']}")


def test_a_refused_proposal_is_dropped_not_sent_again(tmp_path: Path) -> None:
    """A refusal is an answer: nothing was applied, so the HW goes back to the committed ISR and
    the proposal is not resent as one the controller may have taken."""

    async def scenario() -> None:
        controller = RefusingController()
        broker, leader = await expanding_broker(tmp_path, controller)
        assert leader.pending_isr is None and leader.isr == [1, 3, 4]
        await broker.isr_proposals.maintain_once(time.monotonic() + 10 * RETRY_SECONDS)
        assert controller.proposals == 1, "a refused proposal was sent again"

    asyncio.run(scenario())
