"""The leader's side of AlterPartition: when an ISR change is proposed, what stays in force while
it is unanswered, and how the answer -- or the metadata -- settles it.

Kafka's rules (``Partition.scala``'s pending states, KIP-497; ``AlterPartitionManager``), which
this module keeps in one place for the bundled broker:

* **When.** Every :data:`MAINTENANCE_SECONDS` each leader looks for followers that lag past
  ``replica.lag.time.max.ms`` (shrink) and -- only after a follower's fetch made it due, never on
  a timer alone -- caught-up followers outside the ISR (expansion), and proposes one change at a
  time per partition: none while one is pending.
* **While pending.** The HW is computed over the larger of the committed and the proposed ISR
  (:meth:`broker_impl.partition.Partition.propose_isr`), so a write is acknowledged only once
  every replica the controller may count as in sync has it.
* **An answer** settles it: the controller's ISR is applied when the answer names this leader in
  its epoch (a refusal carries the current state too).  An answer that names another leader --
  the change completed a reassignment and elected one (Kafka's ``NEW_LEADER_ELECTED``) -- leaves
  the proposal in force until the metadata says this replica follows.
* **A refusal without a state** (an unknown partition, an ISR outside the replicas: the request
  itself was wrong) drops the proposal; the next look proposes again from the metadata.
* **No answer** (the connection failed, the controller died): the controller may have applied
  the change.  The proposal stays in force and is sent again every :data:`RETRY_SECONDS` until an
  answer or the metadata settles it, as Kafka's ``AlterPartitionManager`` retries -- dropping it
  would compute the HW over the old ISR while the controller's may be the larger one, so that a
  replica it may elect lacks what was acknowledged.  Each failed attempt asks for the metadata
  (a heartbeat) first: an applied change that moved the partition shows there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from .partition import Partition
from .rpc import RpcError

logger = logging.getLogger("broker_impl.isr_proposals")

MAINTENANCE_SECONDS = 0.05
"""How often each leader's ISR is looked at."""
RETRY_SECONDS = 0.5
"""How long an unanswered AlterPartition waits before it is sent again."""

Key = tuple[str, int]


class ControllerLink(Protocol):
    """The part of the broker's controller client a proposal uses (an RPC call)."""

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any: ...


class IsrProposals:
    """One broker's AlterPartition proposals (see the module docstring).

    ``controller`` gives the broker's controller link at each call (tests replace it on the
    broker); ``heartbeat`` asks the controller for newer metadata and applies it.
    """

    def __init__(
        self,
        node_id: int,
        partitions: Mapping[Key, Partition],
        controller: Callable[[], ControllerLink],
        heartbeat: Callable[[], Awaitable[None]],
        lag_seconds: float,
    ) -> None:
        self.node_id = node_id
        self.partitions = partitions
        self.controller = controller
        self.heartbeat = heartbeat
        self.lag_seconds = lag_seconds
        self._expansion_due: set[Key] = set()
        self._resend_at: dict[Key, float] = {}
        """When to send again the pending proposal of each partition whose last one went unanswered
        (an entry lives only while that proposal is pending: any other outcome removes it)."""

    def fetched(self, partition: Partition) -> None:
        """A follower fetched from ``partition``'s leader: an expansion may be due."""
        if partition.isr_expansion_candidates():
            self._expansion_due.add((partition.topic, partition.index))

    async def maintain_forever(self) -> None:
        while True:
            await asyncio.sleep(MAINTENANCE_SECONDS)
            await self.maintain_once(time.monotonic())

    async def maintain_once(self, now: float) -> None:
        """One look at every leader: resend what is unanswered and due, else propose what is needed."""
        due, self._expansion_due = self._expansion_due, set()
        for key, partition in list(self.partitions.items()):
            if partition.role != "leader":
                self._resend_at.pop(key, None)
                continue
            if partition.pending_isr is not None:
                if now >= self._resend_at.get(key, float("inf")):
                    await self.resend(partition)
                continue
            self._resend_at.pop(key, None)  # settled by the metadata
            shrink = partition.isr_shrink_candidates(self.lag_seconds)
            grow = partition.isr_expansion_candidates(fetched_within=self.lag_seconds) if key in due else []
            if shrink or grow:
                new_isr = sorted((set(partition.isr) - set(shrink)) | set(grow))
                await self.propose(partition, new_isr, shrink, grow)

    async def resend(self, partition: Partition) -> None:
        """The pending proposal, unanswered so far, sent again as it stands."""
        assert partition.pending_isr is not None
        proposed = list(partition.pending_isr)
        removed = sorted(set(partition.isr) - set(proposed))
        added = sorted(set(proposed) - set(partition.isr))
        await self.propose(partition, proposed, removed, added)

    async def propose(
        self, partition: Partition, new_isr: list[int], shrink: list[int], grow: list[int]
    ) -> None:
        """AlterPartition to ``new_isr`` (``shrink`` lagging, ``grow`` caught up); the HW is computed
        over the larger ISR until the answer or the metadata settles it (module docstring)."""
        key = (partition.topic, partition.index)
        logger.info("%s: proposing ISR %s (was %s)", partition.name, new_isr, partition.isr)
        partition.propose_isr(new_isr, shrink, grow)
        try:
            reply = await self.controller().call(
                "alter_partition",
                {
                    "topic": partition.topic,
                    "partition": partition.index,
                    "leader": self.node_id,
                    "leader_epoch": partition.leader_epoch,
                    "partition_epoch": partition.partition_epoch,
                    "isr": new_isr,
                },
            )
        except ConnectionError as error:
            logger.info("%s: ISR change unanswered, kept and sent again: %s", partition.name, error)
            partition.record_isr_proposal_failed(new_isr, f"{type(error).__name__}: {error}")
            self._resend_at[key] = time.monotonic() + RETRY_SECONDS
            await self.heartbeat()  # an applied change that moved the partition shows here
            return
        except RpcError as error:  # an answer: the controller refused the request as malformed
            logger.info("%s: ISR change refused: %s", partition.name, error)
            partition.record_isr_proposal_failed(new_isr, f"{type(error).__name__}: {error}")
            self._resend_at.pop(key, None)
            partition.drop_isr_proposal()
            await self.heartbeat()
            return
        self._resend_at.pop(key, None)
        state = reply["state"]
        if "error" in reply:
            partition.record_isr_proposal_failed(new_isr, str(reply["error"]))
        if (state["leader"], state["leader_epoch"]) == (self.node_id, partition.leader_epoch):
            # The controller's ISR before pending_isr goes: the isr-change event knows if it was ours.
            partition.update_isr(state["partition_epoch"], state["isr"])
            partition.drop_isr_proposal()
        # Else another leader was elected -- by this change, if it completed a reassignment (Kafka's
        # NEW_LEADER_ELECTED): the HW stays over the larger ISR, the new leader's, until we follow.
        await self.heartbeat()
