"""The members of a consumer group and what its state machine answers them.

:class:`Member` is what the coordinator knows of one member (its timeouts, the protocols it
offered with their metadata, its assignment, the requests it has waiting).  The state machine
(:mod:`broker_impl.group_state`) answers a JoinGroup with a :class:`JoinOutcome` and a SyncGroup
with a :class:`SyncOutcome`, at once or later through a :class:`Reply` for the request's ticket,
and asks for writes with :class:`StoreGroup`.  :func:`select_protocol` is the vote that picks a
generation's protocol.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from .group_records import GroupRecord


@dataclasses.dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    session_deadline: float
    assignment: bytes = b""
    join_ticket: Hashable | None = None
    sync_ticket: Hashable | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")


@dataclasses.dataclass(frozen=True)
class JoinOutcome:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, bytes], ...] = ()


@dataclasses.dataclass(frozen=True)
class SyncOutcome:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclasses.dataclass(frozen=True)
class Reply:
    ticket: Hashable
    outcome: JoinOutcome | SyncOutcome


@dataclasses.dataclass(frozen=True)
class StoreGroup:
    """Write ``record`` (the group in ``generation``) to the log, then call :meth:`Group.stored`."""

    generation: int
    record: GroupRecord


Effect = Reply | StoreGroup


def select_protocol(members: list[Member]) -> str | None:
    """The protocol every member supports that most members list first among those; a tie
    goes to the one the first member (the longest-standing) prefers."""
    if not members:
        return None
    candidates = [name for name, _ in members[0].protocols]
    for member in members[1:]:
        names = {name for name, _ in member.protocols}
        candidates = [name for name in candidates if name in names]
    if not candidates:
        return None
    votes = dict.fromkeys(candidates, 0)
    for member in members:
        choice = next(name for name, _ in member.protocols if name in votes)
        votes[choice] += 1
    return max(candidates, key=lambda name: votes[name])  # max keeps the first on ties
