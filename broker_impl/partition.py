"""One partition replica on one broker: leader and follower state, HW, ISR, waiters.

The rules are Kafka's replication rules (its Partition and ReplicaFetcherThread):

* The leader records each follower's LEO from the ``fetch_offset`` of its Fetch
  requests, and the HW is ``max(HW, min LEO over the ISR)`` -- recomputed on produce,
  follower fetch, ISR change and on becoming leader.  The HW never goes down.
* A follower sets its HW to ``min(leader HW in the fetch response, own LEO)``; so it
  learns a new HW one fetch round after the leader -- the lag behind KIP-101.
* A follower whose fetch offset has not reached the leader's LEO for
  ``replica.lag.time.max.ms`` is removed from the ISR; one whose LEO reached the HW
  (and the start of the current leader epoch, KAFKA-7128) is added back.  Both
  changes go through the controller; until it confirms, the HW is computed over the
  larger of the old and proposed ISR (KIP-497), so a shrink that the controller never
  saw cannot advance the HW.
* The HW does not advance while the ISR has fewer than ``min.insync.replicas`` members
  (strict min ISR, KIP-966): what the HW covers is then on at least min ISR replicas,
  which is what makes the controller's Eligible Leader Replicas safe to elect.
* ``acks=all`` completes when the HW passes the batch.

Three of these rules can be switched back to their historical, buggy form through
:class:`~broker_impl.rules.ReplicationRules` (KAFKA-7415's epoch record on election,
KAFKA-7128's ISR join, KIP-966's strict min ISR); the defaults are the safe rules.

Every decision above is also recorded in the broker's event log (:mod:`broker_impl.events`,
``docs/events.md``) at the moment it is made: ``replica-opened``, ``become-leader``,
``become-follower``, ``hw`` (every HW change, each with the HW last recorded as ``old_hw``),
``isr-proposal``, ``isr-proposal-failed``, ``isr-change`` and ``truncate``; a leader's
transactions and LSO in ``txn-open``, ``txn-close``, ``hw`` and ``become-leader``
(:mod:`broker_impl.txn_events`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from . import txn_events
from .events import NO_EVENTS, EventLog
from .log import FlushPolicy, PartitionLog
from .records import BatchHeader
from .rules import SAFE_RULES, ReplicationRules

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RemoteReplica:
    """What the leader knows of one follower."""

    log_end_offset: int = -1
    last_caught_up: float = 0.0
    last_fetch: float = 0.0
    leader_end_at_last_fetch: int = -1


class AckWaiter:
    __slots__ = ("future", "required_offset")

    def __init__(self, required_offset: int) -> None:
        self.required_offset = required_offset
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()


class Notifier:
    """Wakes every waiter once per :meth:`notify` (a broadcast edge, not a level)."""

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    def waiter(self) -> asyncio.Future[None]:
        if self._future is None or self._future.done():
            self._future = asyncio.get_running_loop().create_future()
        return self._future

    def notify(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        node_id: int,
        directory: Path,
        segment_bytes: int,
        flush_policy: FlushPolicy,
        checkpointed_high_watermark: int,
        rules: ReplicationRules = SAFE_RULES,
        events: EventLog = NO_EVENTS,
    ) -> None:
        self.topic = topic
        self.events = events
        self.rules = rules
        self.index = index
        self.node_id = node_id
        self.log = PartitionLog(directory, segment_bytes, flush_policy)
        self.high_watermark = min(checkpointed_high_watermark, self.log.log_end_offset)
        self.role = "none"  # "leader" | "follower" | "none"
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.pending_isr: list[int] | None = None
        self.remote: dict[int, RemoteReplica] = {}
        self.data_appended = Notifier()  # follower long-polls wait on this
        self.high_watermark_moved = Notifier()  # consumer long-polls wait on this
        self._ack_waiters: list[AckWaiter] = []
        self._recorded_high_watermark = self.high_watermark  # the HW of the last event that named it
        self._emit(
            "replica-opened",
            leo=self.log_end_offset,
            hw=self.high_watermark,
            checkpointed_hw=checkpointed_high_watermark,
            log_start=self.log.log_start_offset,
            epochs=self.log.epochs.entries,
            dropped_bytes=self.log.recovered_bytes_dropped,
        )

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the HW, or the first offset of the oldest open transaction if that is lower
        (:mod:`broker_impl.txn_index`); read_committed fetches stop here."""
        first_unstable = self.log.transactions.first_unstable_offset()
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def append_as_leader(self, batch: bytearray, header: BatchHeader) -> tuple[int, int]:
        """Append a batch as the leader in its current epoch: (first, last) offset.  A batch that
        opens a transaction (``txn-open``) or a marker that closes one (``txn-close``, with the LSO
        it leaves) is recorded: the white-box checks hold every LSO against the open transactions."""
        closing = txn_events.was_open(self.log.transactions, header)
        first, last = self.log.append_as_leader(batch, header, self.leader_epoch)
        if self.events.enabled and header.is_transactional:
            txn_events.record_leader_append(self, header, first, closing)
        return first, last

    # ---- role changes -------------------------------------------------------------------

    def become_leader(self, epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> None:
        previous_role, previous_epoch = self.role, self.leader_epoch
        now = time.monotonic()
        self.role = "leader"
        self.leader = self.node_id
        self.leader_epoch = epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending_isr = None
        # Every follower starts "caught up now" with an unknown LEO, as in Kafka.
        self.remote = {
            r: RemoteReplica(last_caught_up=now, last_fetch=now) for r in replicas if r != self.node_id
        }
        if self.rules.record_epoch_on_election:
            # KAFKA-7415: without this entry a leader that has not appended yet answers
            # OffsetsForLeaderEpoch from an older epoch's end, and followers truncate wrongly.
            self.log.epochs.assign(epoch, self.log.log_end_offset)
        logger.info(
            "%s: leader in epoch %d, LEO %d, HW %d, ISR %s",
            self.name,
            epoch,
            self.log_end_offset,
            self.high_watermark,
            isr,
        )
        self._emit(
            "become-leader",
            epoch=epoch,
            partition_epoch=partition_epoch,
            replicas=self.replicas,
            isr=self.isr,
            leo=self.log_end_offset,
            hw=self.high_watermark,
            epoch_start=self._recorded_epoch_start(),
            previous_role=previous_role,
            previous_epoch=previous_epoch,
            lso=self.last_stable_offset,
            open_transactions=txn_events.open_transactions(self.log.transactions),
        )
        self._recorded_high_watermark = self.high_watermark
        self.maybe_increment_high_watermark()

    def become_follower(
        self, leader: int, epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]
    ) -> None:
        previous_role, previous_epoch = self.role, self.leader_epoch
        self.role = "follower" if leader >= 0 else "none"
        self.leader = leader
        self.leader_epoch = epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending_isr = None
        self.remote = {}
        self.fail_waiters()
        logger.info(
            "%s: follower of %d in epoch %d, LEO %d, HW %d",
            self.name,
            leader,
            epoch,
            self.log_end_offset,
            self.high_watermark,
        )
        self._emit(
            "become-follower",
            leader=leader,
            epoch=epoch,
            partition_epoch=partition_epoch,
            replicas=self.replicas,
            isr=self.isr,
            leo=self.log_end_offset,
            hw=self.high_watermark,
            previous_role=previous_role,
            previous_epoch=previous_epoch,
        )
        self._recorded_high_watermark = self.high_watermark

    def update_isr(self, partition_epoch: int, isr: list[int]) -> None:
        """The controller's ISR for ``partition_epoch`` (ignored unless newer than ours)."""
        if partition_epoch <= self.partition_epoch:
            return
        old_isr, proposal = self.isr, self.pending_isr
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.pending_isr = None
        if sorted(old_isr) != sorted(self.isr):
            own = proposal is not None and sorted(proposal) == sorted(self.isr)
            self._emit(
                "isr-change",
                role=self.role,
                epoch=self.leader_epoch,
                partition_epoch=partition_epoch,
                old_isr=old_isr,
                new_isr=self.isr,
                reason="proposal" if own else "controller",
                hw=self.high_watermark,
                leo=self.log_end_offset,
            )
        if self.role == "leader":
            self.maybe_increment_high_watermark()

    def fail_waiters(self) -> None:
        for waiter in self._ack_waiters:
            if not waiter.future.done():
                waiter.future.set_result(6)  # NOT_LEADER_OR_FOLLOWER
        self._ack_waiters.clear()
        self.data_appended.notify()
        self.high_watermark_moved.notify()

    # ---- leader: HW and ISR -------------------------------------------------------------

    def _isr_for_high_watermark(self) -> list[int]:
        if self.pending_isr is None:
            return self.isr
        return sorted(set(self.isr) | set(self.pending_isr))

    def under_min_isr(self) -> bool:
        """Whether the controller-confirmed ISR is smaller than ``min.insync.replicas``."""
        return len(self.isr) < self.rules.min_insync_replicas

    def maybe_increment_high_watermark(self) -> bool:
        if self.role != "leader":
            return False
        if self.rules.strict_min_isr and self.under_min_isr():
            return False
        ends = [self.log_end_offset]
        for replica in self._isr_for_high_watermark():
            if replica != self.node_id:
                remote = self.remote.get(replica)
                ends.append(remote.log_end_offset if remote is not None else -1)
        candidate = min(ends)
        if candidate <= self.high_watermark:
            return False
        self.high_watermark = candidate
        if self.events.enabled:
            self._record_high_watermark(
                isr=self.isr,
                pending_isr=self.pending_isr,
                min_isr=self.rules.min_insync_replicas,
                epoch_start=self._recorded_epoch_start(),
                lso=self.last_stable_offset,
            )
        self.high_watermark_moved.notify()
        self._complete_ack_waiters()
        return True

    def _complete_ack_waiters(self) -> None:
        remaining = []
        for waiter in self._ack_waiters:
            if self.high_watermark >= waiter.required_offset:
                if not waiter.future.done():
                    waiter.future.set_result(0)
            else:
                remaining.append(waiter)
        self._ack_waiters = remaining

    def add_ack_waiter(self, required_offset: int) -> AckWaiter:
        waiter = AckWaiter(required_offset)
        self._ack_waiters.append(waiter)
        self._complete_ack_waiters()
        return waiter

    def remove_ack_waiter(self, waiter: AckWaiter) -> None:
        if waiter in self._ack_waiters:
            self._ack_waiters.remove(waiter)

    def record_follower_fetch(self, replica: int, fetch_offset: int) -> None:
        """Update the follower's LEO and caught-up time from its fetch (leader side)."""
        now = time.monotonic()
        remote = self.remote.setdefault(replica, RemoteReplica(last_caught_up=0.0))
        leader_end = self.log_end_offset
        if fetch_offset >= leader_end:
            remote.last_caught_up = now
        elif fetch_offset >= remote.leader_end_at_last_fetch >= 0:
            remote.last_caught_up = max(remote.last_caught_up, remote.last_fetch)
        remote.log_end_offset = min(fetch_offset, leader_end)
        remote.last_fetch = now
        remote.leader_end_at_last_fetch = leader_end
        self.maybe_increment_high_watermark()

    def isr_expansion_candidates(self, fetched_within: float = float("inf")) -> list[int]:
        """Followers outside the ISR that caught up to the HW and to this epoch's start.

        With ``isr.join.offset=high-watermark`` (KAFKA-7128 unfixed) reaching the HW is
        enough -- and a new leader's HW may be stale, so the follower can join without
        records the previous leader had already committed.  Only followers that fetched in
        the last ``fetched_within`` seconds count: the LEO the leader remembers of a follower
        that stopped fetching is old news (with strict min ISR the HW stops when that
        follower leaves, so its old LEO would otherwise re-qualify it at once, and the ISR
        would flap while the follower is cut off).
        """
        if self.role != "leader" or self.pending_isr is not None:
            return []
        epoch_start = self._current_epoch_start() if self.rules.isr_join_needs_epoch_start else 0
        now = time.monotonic()
        return [
            replica
            for replica, remote in self.remote.items()
            if replica not in self.isr
            and now - remote.last_fetch <= fetched_within
            and remote.log_end_offset >= self.high_watermark
            and remote.log_end_offset >= epoch_start
        ]

    def isr_shrink_candidates(self, lag_seconds: float) -> list[int]:
        if self.role != "leader" or self.pending_isr is not None:
            return []
        now = time.monotonic()
        return [
            replica
            for replica in self.isr
            if replica != self.node_id
            and now - self.remote.get(replica, RemoteReplica()).last_caught_up > lag_seconds
        ]

    def _current_epoch_start(self) -> int:
        entries = self.log.epochs.entries
        return entries[-1][1] if entries and entries[-1][0] == self.leader_epoch else self.log_end_offset

    # ---- follower -------------------------------------------------------------------------

    def follower_appended(self, leader_high_watermark: int) -> None:
        new_high_watermark = min(leader_high_watermark, self.log_end_offset)
        if new_high_watermark > self.high_watermark:
            self.high_watermark = new_high_watermark
            if self.events.enabled:
                self._record_high_watermark(leader=self.leader, leader_hw=leader_high_watermark)

    def truncate_to(self, offset: int, *, reason: str, **details: Any) -> None:
        """Cut the log at ``offset`` (whole batches: see :meth:`PartitionLog.truncate_to`) and
        record why: ``reason`` and ``details`` go into the ``truncate`` event as they are."""
        before = self.log_end_offset
        old_high_watermark = self.high_watermark
        after = self.log.truncate_to(offset)
        if after < before:
            logger.warning(
                "%s: truncated log from %d to %d (HW %d)", self.name, before, after, self.high_watermark
            )
        # A follower's HW can exceed its LEO after truncation only transiently; clamp it.
        self.high_watermark = min(self.high_watermark, after)
        self._emit(
            "truncate",
            role=self.role,
            epoch=self.leader_epoch,
            leader=self.leader,
            reason=reason,
            target=offset,
            old_leo=before,
            new_leo=after,
            old_hw=old_high_watermark,
            new_hw=self.high_watermark,
            **details,
        )
        self._recorded_high_watermark = self.high_watermark

    # ---- the event log ----------------------------------------------------------------------

    def _emit(self, kind: str, **fields: Any) -> None:
        self.events.emit(kind, topic=self.topic, partition=self.index, **fields)

    def _record_high_watermark(self, **fields: Any) -> None:
        """An ``hw`` event from the HW last recorded to the current one (callers check
        ``events.enabled`` first: this runs once per HW move, on the produce path)."""
        self.events.emit(
            "hw",
            topic=self.topic,
            partition=self.index,
            role=self.role,
            epoch=self.leader_epoch,
            old_hw=self._recorded_high_watermark,
            new_hw=self.high_watermark,
            leo=self.log_end_offset,
            **fields,
        )
        self._recorded_high_watermark = self.high_watermark

    def _recorded_epoch_start(self) -> int | None:
        """The first offset of the current leader epoch, None while no entry records it (with
        ``leader.epoch.lookup=single`` a new leader records its epoch at its first append)."""
        entries = self.log.epochs.entries
        return entries[-1][1] if entries and entries[-1][0] == self.leader_epoch else None

    def propose_isr(self, proposed: list[int], removed: list[int], added: list[int]) -> None:
        """An AlterPartition to ``proposed`` goes out (``removed`` lagging, ``added`` caught up):
        until the controller answers, the HW is computed over the larger of the two ISRs (KIP-497),
        and it is recomputed at once, as at every change of what it is computed over.  Under
        KIP-497's rule that is a no-op; under a rule that let a proposal count (Kafka before
        KIP-497 advanced the HW right after a shrink, once ZooKeeper had taken it) it is the moment
        the proposal would take effect, not the next append or fetch -- which an isolated leader
        may never see."""
        self.pending_isr = list(proposed)
        self.record_isr_proposal(proposed, removed, added)
        self.maybe_increment_high_watermark()

    def drop_isr_proposal(self) -> None:
        """The proposal failed or was answered: the HW is computed over the controller's ISR again.
        Nothing to do when none is pending (``update_isr`` already cleared it and recomputed)."""
        if self.pending_isr is None:
            return
        self.pending_isr = None
        self.maybe_increment_high_watermark()

    def record_isr_proposal(self, proposed: list[int], removed: list[int], added: list[int]) -> None:
        """An ``isr-proposal`` event: what this leader asks the controller, and why -- each
        removed follower with how long ago it was last caught up, each added one with its LEO."""
        if not self.events.enabled:
            return
        now = time.monotonic()
        self._emit(
            "isr-proposal",
            epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.isr,
            proposed=proposed,
            removed=[
                {
                    "replica": replica,
                    "caught_up_ms_ago": round(
                        (now - self.remote.get(replica, RemoteReplica()).last_caught_up) * 1000
                    ),
                }
                for replica in removed
            ],
            added=[
                {"replica": replica, "leo": self.remote.get(replica, RemoteReplica()).log_end_offset}
                for replica in added
            ],
            hw=self.high_watermark,
            leo=self.log_end_offset,
            epoch_start=self._recorded_epoch_start(),
        )

    def record_isr_proposal_failed(self, proposed: list[int], error: str) -> None:
        """An ``isr-proposal-failed`` event: the controller refused or could not be reached."""
        self._emit(
            "isr-proposal-failed",
            epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.isr,
            proposed=proposed,
            error=error,
        )
