"""A leader replica's high watermark while an ISR change is in flight (``broker_impl.partition``).

KIP-497: until the controller commits an AlterPartition, the leader computes the HW over the
larger of the committed and the proposed ISR.  A shrink nobody has accepted must not advance
the HW, nor acknowledge the acks=all writes that wait for the followers it would drop -- those
followers may still be the ones elected.  Only the commit may (``update_isr``), and then at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_impl.events import EventLog
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.records import iterate_batches
from broker_impl.rules import ReplicationRules

from .batch_builder import make_batch

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
    for _ in range(appended):
        batch = make_batch([b"x"])
        [(_, header)] = iterate_batches(batch)
        replica.log.append_as_leader(batch, header, replica.leader_epoch)
    return replica


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
