"""One consumer group's membership state machine (Kafka's classic, eager rebalance protocol).

Pure: no I/O, no asyncio, time passed in (``now``, monotonic seconds).  A request that must wait
(a JoinGroup until the rebalance completes, a SyncGroup until the leader's assignment is
stored) hands in a ``ticket`` -- any object -- and the answer later appears in the group's
effects as :class:`Reply` ``(ticket, outcome)``; a write the coordinator must make appears as
:class:`StoreGroup`, whose result comes back through :meth:`Group.stored`.  The coordinator
drains :meth:`Group.take_effects` after every call.  Members, outcomes and effects are defined in
:mod:`broker_impl.group_members`.

States and the rules that move between them (Kafka's GroupCoordinator):

* **Empty** -- no members.  A JoinGroup starts a rebalance.
* **PreparingRebalance** -- waiting for every known member to (re)join.  Completes when all
  members have a JoinGroup waiting (and no member id handed out by MEMBER_ID_REQUIRED is still
  unused), or at the rebalance deadline (the largest rebalance timeout of the members), when
  the members that did not rejoin are removed.  A rebalance from Empty first waits
  ``group.initial.rebalance.delay.ms``, extended by each member that joins meanwhile, up to the
  rebalance timeout, so that consumers started together land in one generation.  Completion
  bumps the generation, picks the protocol (the one most members prefer among those all
  support), and answers every JoinGroup; the leader's answer carries every member's metadata.
  With no member left the group becomes Empty in the new generation.
* **CompletingRebalance** -- waiting for the leader's SyncGroup.  Its assignment is stored
  (:class:`StoreGroup`, acks=all) before anyone receives it; then every waiting SyncGroup is
  answered and the group is **Stable**.  A failed store answers the error and rebalances.
* A member joining or leaving, a member whose session timed out, or the leader (or a member
  with new subscription metadata) rejoining moves a Stable or CompletingRebalance group back to
  PreparingRebalance; waiting SyncGroups then get REBALANCE_IN_PROGRESS.

Heartbeats: UNKNOWN_MEMBER_ID for a member the group does not know, ILLEGAL_GENERATION for
another generation, REBALANCE_IN_PROGRESS while preparing (the member must rejoin), else none.
Every accepted heartbeat, join, sync or commit pushes the member's session deadline; a member
waiting in JoinGroup or SyncGroup is never expired (the rebalance deadline governs it).

JoinGroup v4+ (KIP-394): a member without an id gets MEMBER_ID_REQUIRED and a fresh id, and
must rejoin with it within its session timeout; older versions get the id with the join.
Static membership (KIP-345) and cooperative rebalancing on the broker are not implemented:
the eager protocol is enough for the clients' range/roundrobin assignors, which run in the
group leader.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Hashable

from .group_members import Effect, JoinOutcome, Member, Reply, StoreGroup, SyncOutcome, select_protocol
from .group_records import GroupRecord, MemberRecord
from .wire import (
    COORDINATOR_NOT_AVAILABLE,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass(frozen=True)
class GroupSettings:
    initial_rebalance_delay: float
    """``group.initial.rebalance.delay.ms``, in seconds."""
    min_session_timeout_ms: int
    max_session_timeout_ms: int


class Group:
    def __init__(self, group_id: str, settings: GroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: dict[str, float] = {}  # member id -> deadline to rejoin with it
        self.join_deadline = 0.0
        self._initial_join_limit: float | None = None  # set while the initial delay runs
        self._storing: int | None = None  # generation whose assignment is being stored
        self._assignment: dict[str, bytes] = {}
        self._effects: list[Effect] = []

    # ---- loading (a new coordinator) -----------------------------------------------------

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord, settings: GroupSettings, now: float) -> Group:
        """The group as the log last stored it: Stable with its members, or Empty.  Every
        member gets a fresh session from ``now``: it carries on if it heartbeats in time."""
        group = cls(group_id, settings)
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        if record.members:
            group.state = GroupState.STABLE
            group.protocol_name = record.protocol
            group.leader = record.leader
            for stored in record.members:
                group.members[stored.member_id] = Member(
                    member_id=stored.member_id,
                    client_id=stored.client_id,
                    client_host=stored.client_host,
                    session_timeout_ms=stored.session_timeout_ms,
                    rebalance_timeout_ms=stored.rebalance_timeout_ms,
                    protocols=[(record.protocol or "", stored.subscription)],
                    session_deadline=now + stored.session_timeout_ms / 1000,
                    assignment=stored.assignment,
                )
            if group.leader not in group.members:
                group.leader = next(iter(group.members))
        return group

    def record(self, timestamp: int, assignment: dict[str, bytes] | None = None) -> GroupRecord:
        """The group's stored form; ``assignment`` overrides the members' current one."""
        chosen = (
            assignment if assignment is not None else {m: self.members[m].assignment for m in self.members}
        )
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader,
            state_timestamp=timestamp,
            members=tuple(
                MemberRecord(
                    member_id=member.member_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    session_timeout_ms=member.session_timeout_ms,
                    subscription=member.metadata_for(self.protocol_name),
                    assignment=chosen.get(member.member_id, b""),
                )
                for member in self.members.values()
            ),
        )

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    # ---- JoinGroup --------------------------------------------------------------------------

    def join(
        self,
        *,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        ticket: Hashable,
        now: float,
    ) -> JoinOutcome | None:
        """Answer at once, or ``None``: the answer comes as a :class:`Reply` for ``ticket``."""
        if self.state is GroupState.DEAD:
            return JoinOutcome(COORDINATOR_NOT_AVAILABLE, member_id)
        if (
            not self.settings.min_session_timeout_ms
            <= session_timeout_ms
            <= self.settings.max_session_timeout_ms
        ):
            return JoinOutcome(INVALID_SESSION_TIMEOUT, member_id)
        if not self._supports(member_id, protocol_type, protocols):
            return JoinOutcome(INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member_id:
                self.pending_members[member_id] = now + session_timeout_ms / 1000
                return JoinOutcome(MEMBER_ID_REQUIRED, member_id)
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
        elif member_id not in self.members:
            return JoinOutcome(UNKNOWN_MEMBER_ID, member_id)
        member = self.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                list(protocols),
                now + session_timeout_ms / 1000,
            )
            self.members[member_id] = member
            self.leader = self.leader or member_id
            self.protocol_type = protocol_type
            self._await_join(member, ticket)
            if self._initial_join_limit is not None:
                self.join_deadline = min(
                    now + self.settings.initial_rebalance_delay, self._initial_join_limit
                )
            self._rebalance_or_complete(now)
            return None
        unchanged = member.protocols == list(protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_deadline = now + session_timeout_ms / 1000
        if self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            return self._join_answer(member)  # a resent JoinGroup of this generation
        if self.state is GroupState.STABLE and unchanged and member_id != self.leader:
            return self._join_answer(member)  # a follower rejoining changes nothing
        member.protocols = list(protocols)
        self._await_join(member, ticket)
        self._rebalance_or_complete(now)
        return None

    def _supports(self, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member offering ``protocols`` can be in the group: at least one of them
        must be supported by every other member (and the protocol type must match)."""
        if not protocol_type or not protocols:
            return False
        others = [member for member in self.members.values() if member.member_id != member_id]
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        common = {name for name, _ in protocols}
        for member in others:
            common &= {name for name, _ in member.protocols}
        return bool(common)

    def _await_join(self, member: Member, ticket: Hashable) -> None:
        if member.join_ticket is not None:  # the client gave up on its earlier JoinGroup
            self._reply(member.join_ticket, JoinOutcome(REBALANCE_IN_PROGRESS, member.member_id))
        member.join_ticket = ticket

    def _rebalance_or_complete(self, now: float) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(now)
        self._maybe_complete_join(now)

    def _prepare_rebalance(self, now: float) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._answer_syncs(lambda _member: SyncOutcome(REBALANCE_IN_PROGRESS))
        self._storing = None
        self._assignment = {}
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        delay = self.settings.initial_rebalance_delay
        if self.state is GroupState.EMPTY and delay > 0:
            self._initial_join_limit = now + timeout
            self.join_deadline = min(now + delay, self._initial_join_limit)
        else:
            self._initial_join_limit = None
            self.join_deadline = now + timeout
        self.state = GroupState.PREPARING_REBALANCE

    def _maybe_complete_join(self, now: float) -> None:
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._initial_join_limit is None
            and not self.pending_members
            and all(member.join_ticket is not None for member in self.members.values())
        ):
            self._complete_join(now)

    def _complete_join(self, now: float) -> None:
        for member in list(self.members.values()):
            if member.join_ticket is None:
                self._remove(member)
        self._initial_join_limit = None
        self.generation += 1
        if not self.members:
            self.state = GroupState.EMPTY
            self.protocol_name = None
            self.leader = None
            self._effects.append(StoreGroup(self.generation, self.record(0)))
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.protocol_name = select_protocol(list(self.members.values()))
        self.state = GroupState.COMPLETING_REBALANCE
        for member in self.members.values():
            member.session_deadline = now + member.session_timeout_ms / 1000
            ticket, member.join_ticket = member.join_ticket, None
            if ticket is not None:
                self._reply(ticket, self._join_answer(member))

    def _join_answer(self, member: Member) -> JoinOutcome:
        members: tuple[tuple[str, bytes], ...] = ()
        if member.member_id == self.leader:
            members = tuple((m.member_id, m.metadata_for(self.protocol_name)) for m in self.members.values())
        return JoinOutcome(
            NONE,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader or "",
            members,
        )

    # ---- SyncGroup --------------------------------------------------------------------------

    def sync(
        self,
        *,
        member_id: str,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes] | None,
        ticket: Hashable,
        now: float,
    ) -> SyncOutcome | None:
        """Answer at once, or ``None`` (answered later for ``ticket``).  ``assignments`` is
        the leader's (None or empty from followers)."""
        error = self._check_member(member_id, generation_id)
        if error:
            return SyncOutcome(error)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return SyncOutcome(INCONSISTENT_GROUP_PROTOCOL)
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncOutcome(REBALANCE_IN_PROGRESS)
        member = self.members[member_id]
        member.session_deadline = now + member.session_timeout_ms / 1000
        if self.state is GroupState.STABLE:
            return self._sync_answer(member)
        if member.sync_ticket is not None:
            self._reply(member.sync_ticket, SyncOutcome(REBALANCE_IN_PROGRESS))
        member.sync_ticket = ticket
        if member_id == self.leader and assignments is not None and self._storing is None:
            self._storing = self.generation
            self._assignment = {m: assignments.get(m, b"") for m in self.members}
            self._effects.append(StoreGroup(self.generation, self.record(0, self._assignment)))
        return None

    def stored(self, generation: int, error: int, now: float) -> None:
        """The outcome of a :class:`StoreGroup`: on success the waiting SyncGroups get their
        assignments and the group is Stable; on failure they get ``error`` and it rebalances.
        A result for a generation the group has left is ignored."""
        if self._storing != generation or self.generation != generation:
            return
        self._storing = None
        if self.state is not GroupState.COMPLETING_REBALANCE:
            return
        if error == NONE:
            for member_id, assignment in self._assignment.items():
                if member_id in self.members:
                    self.members[member_id].assignment = assignment
            self.state = GroupState.STABLE
            self._answer_syncs(self._sync_answer)
            return
        self._answer_syncs(lambda _member: SyncOutcome(error))
        self._rebalance_or_complete(now)

    def _sync_answer(self, member: Member) -> SyncOutcome:
        return SyncOutcome(NONE, member.assignment, self.protocol_type, self.protocol_name)

    def _answer_syncs(self, answer: Callable[[Member], SyncOutcome]) -> None:
        for member in self.members.values():
            ticket, member.sync_ticket = member.sync_ticket, None
            if ticket is not None:
                self._reply(ticket, answer(member))

    # ---- Heartbeat, LeaveGroup, OffsetCommit ---------------------------------------------------

    def _check_member(self, member_id: str, generation_id: int) -> int:
        if self.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != self.generation:
            return ILLEGAL_GENERATION
        return NONE

    def heartbeat(self, member_id: str, generation_id: int, now: float) -> int:
        error = self._check_member(member_id, generation_id)
        if error:
            return error
        member = self.members[member_id]
        member.session_deadline = now + member.session_timeout_ms / 1000
        return REBALANCE_IN_PROGRESS if self.state is GroupState.PREPARING_REBALANCE else NONE

    def leave(self, member_id: str, now: float) -> int:
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._maybe_complete_join(now)
            return NONE
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        self._remove(member)
        self._rebalance_or_complete(now)
        return NONE

    def check_commit(self, member_id: str, generation_id: int, now: float) -> int:
        """Whether an OffsetCommit may be stored.  Generation < 0 on an Empty group is a
        consumer that only stores offsets here (``assign()``); otherwise the committer must be
        a member of the current generation, and not between JoinGroup and SyncGroup."""
        if self.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return NONE
        error = self._check_member(member_id, generation_id)
        if error:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        member = self.members[member_id]
        member.session_deadline = now + member.session_timeout_ms / 1000
        return NONE

    def _remove(self, member: Member) -> None:
        """Drop ``member``, answering any request it has waiting; the caller rebalances."""
        del self.members[member.member_id]
        if member.join_ticket is not None:
            self._reply(member.join_ticket, JoinOutcome(UNKNOWN_MEMBER_ID, member.member_id))
        if member.sync_ticket is not None:
            self._reply(member.sync_ticket, SyncOutcome(UNKNOWN_MEMBER_ID))
        member.join_ticket = member.sync_ticket = None
        if self.leader == member.member_id:
            self.leader = next(iter(self.members), None)

    # ---- time ---------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Apply every deadline that passed: rebalance completion, unused member ids, sessions."""
        for member_id, deadline in list(self.pending_members.items()):
            if now >= deadline:
                del self.pending_members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE and now >= self.join_deadline:
            self._complete_join(now)
        expired = [
            member
            for member in self.members.values()
            if member.join_ticket is None and member.sync_ticket is None and now >= member.session_deadline
        ]
        for member in expired:
            self._remove(member)
        if expired:
            self._rebalance_or_complete(now)
        else:
            self._maybe_complete_join(now)

    def forgive(self, seconds: float) -> None:
        """Move every deadline on by ``seconds``: the coordinator was stalled for that long and
        read no request meanwhile, so that time counts against no member (see
        :mod:`broker_impl.stall`)."""
        for member in self.members.values():
            member.session_deadline += seconds
        self.pending_members = {member_id: at + seconds for member_id, at in self.pending_members.items()}
        self.join_deadline += seconds
        if self._initial_join_limit is not None:
            self._initial_join_limit += seconds

    def shut_down(self, error: int) -> None:
        """The coordinator gives the group up (it lost the partition): answer every waiting
        request with ``error``; the group is Dead to whoever still holds it."""
        for member in self.members.values():
            if member.join_ticket is not None:
                self._reply(member.join_ticket, JoinOutcome(error, member.member_id))
            if member.sync_ticket is not None:
                self._reply(member.sync_ticket, SyncOutcome(error))
            member.join_ticket = member.sync_ticket = None
        self.state = GroupState.DEAD

    def _reply(self, ticket: Hashable, outcome: JoinOutcome | SyncOutcome) -> None:
        self._effects.append(Reply(ticket, outcome))
