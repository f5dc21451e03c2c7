"""The group state machine without a network: joins, syncs, heartbeats, leaves, deadlines.

Each test drives :class:`broker_impl.group_state.Group` the way the coordinator does -- calls with
tickets and explicit times, then reads the effects (replies and store requests) -- and checks the
rules Kafka's classic coordinator follows: MEMBER_ID_REQUIRED before the first join (KIP-394),
the initial rebalance delay, a rebalance that waits for every known member up to the rebalance
timeout, the leader alone receiving the member list, an assignment handed out only after it was
stored, and the error each client acts on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker_impl import wire
from broker_impl.group_members import JoinOutcome, Member, Reply, StoreGroup, SyncOutcome, select_protocol
from broker_impl.group_records import decode_group, encode_value
from broker_impl.group_state import Group, GroupSettings, GroupState

SETTINGS = GroupSettings(
    initial_rebalance_delay=3.0, min_session_timeout_ms=6000, max_session_timeout_ms=300000
)
NO_DELAY = dataclasses.replace(SETTINGS, initial_rebalance_delay=0.0)
RANGE = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]


class Ticket:
    """A stand-in for the coordinator's futures: an identity the replies are matched by."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Ticket({self.name})"


def join(group: Group, now: float, member_id: str = "", ticket: Any = None, **overrides: Any) -> Any:
    request: dict[str, Any] = {
        "member_id": member_id,
        "client_id": "client",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 30000,
        "protocol_type": "consumer",
        "protocols": RANGE,
        "require_known_member_id": True,
        "ticket": ticket if ticket is not None else Ticket(member_id or "new"),
        "now": now,
    }
    request.update(overrides)
    return group.join(**request)


def new_member(group: Group, now: float, client: str = "client", **overrides: Any) -> tuple[str, Ticket]:
    """KIP-394: the first join gets MEMBER_ID_REQUIRED and an id; the second parks."""
    first = join(group, now, client_id=client, **overrides)
    assert isinstance(first, JoinOutcome) and first.error == wire.MEMBER_ID_REQUIRED
    assert first.member_id.startswith(f"{client}-")
    ticket = Ticket(first.member_id)
    assert join(group, now, first.member_id, ticket, client_id=client, **overrides) is None
    return first.member_id, ticket


def replies(group: Group) -> dict[Any, JoinOutcome | SyncOutcome]:
    return {effect.ticket: effect.outcome for effect in group.take_effects() if isinstance(effect, Reply)}


def sync(group: Group, member_id: str, now: float, assignments: dict[str, bytes] | None = None) -> Any:
    ticket = Ticket(f"sync-{member_id}")
    outcome = group.sync(
        member_id=member_id,
        generation_id=group.generation,
        protocol_type="consumer",
        protocol_name=group.protocol_name,
        assignments=assignments or {},
        ticket=ticket,
        now=now,
    )
    return outcome if outcome is not None else ticket


def stable_group(members: int = 1) -> tuple[Group, list[str]]:
    """A group whose ``members`` joined together and whose leader's assignment was stored."""
    group = Group("g", SETTINGS)
    ids = [new_member(group, 0.0, client=f"c{index}")[0] for index in range(members)]
    group.tick(3.0)
    assert group.state is GroupState.COMPLETING_REBALANCE
    group.take_effects()
    tickets = [sync(group, member_id, 3.1, {m: m.encode() for m in ids}) for member_id in ids]
    (store,) = [effect for effect in group.take_effects() if isinstance(effect, StoreGroup)]
    group.stored(store.generation, wire.NONE, 3.2)
    answered = replies(group)
    assert {answered[ticket].assignment for ticket in tickets} == {m.encode() for m in ids}  # type: ignore[union-attr]
    assert group.state is GroupState.STABLE
    return group, ids


# ---- joining --------------------------------------------------------------------------------------


def test_first_join_needs_a_member_id_then_waits_out_the_initial_delay() -> None:
    group = Group("g", SETTINGS)
    member_id, ticket = new_member(group, 10.0)
    assert group.state is GroupState.PREPARING_REBALANCE
    group.tick(12.9)
    assert replies(group) == {}  # the initial delay is not over: nothing answered yet
    group.tick(13.0)
    outcome = replies(group)[ticket]
    assert outcome == JoinOutcome(
        wire.NONE, member_id, 1, "consumer", "range", member_id, ((member_id, b"sub-range"),)
    )
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_each_join_during_the_initial_delay_extends_it_and_all_land_in_one_generation() -> None:
    group = Group("g", SETTINGS)
    first, first_ticket = new_member(group, 0.0, client="a")
    second, second_ticket = new_member(group, 2.0, client="b")
    group.tick(3.5)
    assert replies(group) == {}
    group.tick(5.0)
    answered = replies(group)
    leader, follower = answered[first_ticket], answered[second_ticket]
    assert isinstance(leader, JoinOutcome) and isinstance(follower, JoinOutcome)
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == follower.leader == first
    assert [member_id for member_id, _ in leader.members] == [first, second]
    assert follower.members == ()  # only the leader computes the assignment


def test_the_initial_delay_never_outlasts_the_rebalance_timeout() -> None:
    group = Group("g", SETTINGS)
    _, ticket = new_member(group, 0.0, rebalance_timeout_ms=4000)
    for second in (2.5, 3.5):  # members keep arriving just inside each extension
        new_member(group, second, client=f"late-{second}")
    group.tick(4.0)
    assert isinstance(replies(group)[ticket], JoinOutcome)


def test_without_initial_delay_a_lone_member_completes_at_once() -> None:
    group = Group("g", NO_DELAY)
    _member_id, ticket = new_member(group, 0.0)
    assert replies(group)[ticket].error == wire.NONE  # type: ignore[union-attr]
    assert group.generation == 1


def test_old_join_versions_get_their_member_id_with_the_join() -> None:
    group = Group("g", NO_DELAY)
    ticket = Ticket("v3")
    assert join(group, 0.0, ticket=ticket, require_known_member_id=False) is None
    outcome = replies(group)[ticket]
    assert isinstance(outcome, JoinOutcome) and outcome.error == wire.NONE and outcome.member_id


def test_a_new_member_rebalances_a_stable_group_and_waits_for_the_others() -> None:
    group, (old,) = stable_group()
    _newcomer, newcomer_ticket = new_member(group, 20.0, client="new")
    assert group.state is GroupState.PREPARING_REBALANCE
    assert replies(group) == {}
    assert group.heartbeat(old, 1, 20.5) == wire.REBALANCE_IN_PROGRESS  # tells the old member to rejoin
    old_ticket = Ticket("old-rejoin")
    assert join(group, 21.0, old, old_ticket) is None
    answered = replies(group)
    assert answered[old_ticket].generation_id == answered[newcomer_ticket].generation_id == 2  # type: ignore[union-attr]
    assert answered[old_ticket].leader == old  # type: ignore[union-attr]


def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_deadline() -> None:
    group, (old,) = stable_group()
    _, ticket = new_member(group, 20.0, client="new", rebalance_timeout_ms=30000)
    for second in range(21, 50, 3):  # the old member stays alive but never rejoins
        assert group.heartbeat(old, 1, float(second)) == wire.REBALANCE_IN_PROGRESS
        group.tick(float(second))
    group.tick(49.9)
    assert replies(group) == {}
    group.tick(50.0)  # 30 s after the rebalance began
    outcome = replies(group)[ticket]
    assert isinstance(outcome, JoinOutcome) and outcome.error == wire.NONE and outcome.generation_id == 2
    assert old not in group.members
    assert outcome.leader == outcome.member_id  # leadership moved to a member that is still there
    assert group.heartbeat(old, 1, 50.1) == wire.UNKNOWN_MEMBER_ID


def test_a_follower_rejoining_a_stable_group_changes_nothing() -> None:
    group, (_leader, follower) = stable_group(2)
    outcome = join(group, 5.0, follower)
    assert isinstance(outcome, JoinOutcome) and outcome.generation_id == 1 and outcome.members == ()
    assert group.state is GroupState.STABLE


def test_the_leader_rejoining_or_new_metadata_rebalances() -> None:
    group, (leader, follower) = stable_group(2)
    assert join(group, 5.0, leader) is None
    assert group.state is GroupState.PREPARING_REBALANCE
    group, (leader, follower) = stable_group(2)
    assert join(group, 5.0, follower, protocols=[("range", b"new-subscription")]) is None
    assert group.state is GroupState.PREPARING_REBALANCE


def test_a_repeated_join_answers_the_abandoned_one() -> None:
    group = Group("g", SETTINGS)
    member_id, first_ticket = new_member(group, 0.0)
    second_ticket = Ticket("again")
    assert join(group, 1.0, member_id, second_ticket) is None
    assert replies(group) == {first_ticket: JoinOutcome(wire.REBALANCE_IN_PROGRESS, member_id)}


def test_an_unused_member_id_holds_a_rebalance_only_until_its_session_timeout() -> None:
    group, (old,) = stable_group()
    pending = join(group, 20.0, client_id="slow")
    assert pending.error == wire.MEMBER_ID_REQUIRED
    old_ticket = Ticket("old")
    assert join(group, 20.1, old, old_ticket) is None  # the leader's rejoin starts a rebalance
    assert replies(group) == {}  # the id handed out may still come back
    group.tick(30.0)  # its 10 s session ran out
    assert replies(group)[old_ticket].error == wire.NONE  # type: ignore[union-attr]
    assert pending.member_id not in group.members


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"session_timeout_ms": 5999}, wire.INVALID_SESSION_TIMEOUT),
        ({"session_timeout_ms": 300001}, wire.INVALID_SESSION_TIMEOUT),
        ({"protocol_type": ""}, wire.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocols": []}, wire.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_join_refusals(overrides: dict[str, Any], error: int) -> None:
    assert join(Group("g", SETTINGS), 0.0, **overrides).error == error


def test_a_member_must_share_a_protocol_and_the_protocol_type() -> None:
    group, _ = stable_group()
    assert join(group, 5.0, protocols=[("sticky", b"")]).error == wire.INCONSISTENT_GROUP_PROTOCOL
    assert join(group, 5.0, protocol_type="connect").error == wire.INCONSISTENT_GROUP_PROTOCOL
    assert join(group, 5.0, "nobody-knows-me").error == wire.UNKNOWN_MEMBER_ID


# ---- syncing ----------------------------------------------------------------------------------------


def test_followers_wait_for_the_leader_and_everyone_waits_for_the_store() -> None:
    group = Group("g", SETTINGS)
    leader, _ = new_member(group, 0.0, client="a")
    follower, _ = new_member(group, 0.0, client="b")
    group.tick(3.0)
    group.take_effects()
    follower_ticket = sync(group, follower, 3.1)
    assert isinstance(follower_ticket, Ticket) and group.take_effects() == []
    leader_ticket = sync(group, leader, 3.2, {leader: b"A", follower: b"B"})
    (store,) = group.take_effects()
    assert isinstance(store, StoreGroup) and store.generation == 1
    assert {m.member_id: m.assignment for m in store.record.members} == {leader: b"A", follower: b"B"}
    assert decode_group(encode_value(store.record)) == store.record
    assert group.state is GroupState.COMPLETING_REBALANCE  # not handed out before it is stored
    group.stored(1, wire.NONE, 3.3)
    answered = replies(group)
    assert answered[follower_ticket] == SyncOutcome(wire.NONE, b"B", "consumer", "range")
    assert answered[leader_ticket] == SyncOutcome(wire.NONE, b"A", "consumer", "range")
    assert sync(group, follower, 4.0) == SyncOutcome(wire.NONE, b"B", "consumer", "range")  # Stable: at once


def test_a_failed_store_answers_the_error_and_rebalances() -> None:
    group = Group("g", NO_DELAY)
    leader, _ = new_member(group, 0.0)
    group.take_effects()
    ticket = sync(group, leader, 0.1, {leader: b"A"})
    group.take_effects()
    group.stored(1, wire.NOT_COORDINATOR, 0.2)
    assert replies(group)[ticket] == SyncOutcome(wire.NOT_COORDINATOR)
    assert group.state is GroupState.PREPARING_REBALANCE


def test_a_store_result_for_an_old_generation_is_ignored() -> None:
    group = Group("g", NO_DELAY)
    leader, _ = new_member(group, 0.0)
    sync(group, leader, 0.1, {leader: b"A"})
    group.take_effects()
    join(group, 0.2, leader, protocols=[("range", b"changed")])  # generation 2 before the store returns
    group.take_effects()
    group.stored(1, wire.NONE, 0.3)
    assert group.generation == 2 and group.members[leader].assignment == b""


def test_sync_errors() -> None:
    group, (member,) = stable_group()
    ask = dict(protocol_type="consumer", protocol_name="range", assignments={}, ticket=Ticket("s"), now=5.0)
    assert group.sync(member_id="x", generation_id=1, **ask) == SyncOutcome(wire.UNKNOWN_MEMBER_ID)  # type: ignore[arg-type]
    assert group.sync(member_id=member, generation_id=7, **ask) == SyncOutcome(wire.ILLEGAL_GENERATION)  # type: ignore[arg-type]
    wrong = {**ask, "protocol_name": "roundrobin"}
    assert group.sync(member_id=member, generation_id=1, **wrong) == SyncOutcome(
        wire.INCONSISTENT_GROUP_PROTOCOL
    )  # type: ignore[arg-type]
    new_member(group, 6.0, client="new")
    assert group.sync(member_id=member, generation_id=1, **ask) == SyncOutcome(wire.REBALANCE_IN_PROGRESS)  # type: ignore[arg-type]


def test_a_rebalance_during_the_sync_answers_waiting_syncs_with_rebalance_in_progress() -> None:
    group = Group("g", NO_DELAY)
    leader, _ = new_member(group, 0.0, client="a")
    group.take_effects()
    ticket = sync(group, leader, 0.1)  # the leader's sync, but pretend it is a follower's: no store yet
    group.take_effects()
    new_member(group, 0.2, client="b")
    assert replies(group)[ticket] == SyncOutcome(wire.REBALANCE_IN_PROGRESS)


# ---- heartbeats, sessions, leaving ----------------------------------------------------------------


def test_heartbeat_errors_tell_the_member_what_to_do() -> None:
    group, (member,) = stable_group()
    assert group.heartbeat(member, 1, 5.0) == wire.NONE
    assert group.heartbeat(member, 0, 5.0) == wire.ILLEGAL_GENERATION
    assert group.heartbeat("stranger", 1, 5.0) == wire.UNKNOWN_MEMBER_ID
    assert Group("empty", SETTINGS).heartbeat(member, 1, 5.0) == wire.UNKNOWN_MEMBER_ID


def test_a_silent_member_expires_and_the_group_rebalances_without_it() -> None:
    group, (quiet, chatty) = stable_group(2)
    for second in range(4, 16, 3):
        assert group.heartbeat(chatty, 1, float(second)) == wire.NONE
        group.tick(float(second))
    assert quiet in group.members  # its session began at the sync, 3.1 s: it lasts until 13.1 s
    group.tick(13.2)
    assert quiet not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(chatty, 1, 13.3) == wire.REBALANCE_IN_PROGRESS


def test_a_member_waiting_in_join_group_is_not_expired() -> None:
    group, (old,) = stable_group()
    new_member(group, 20.0, client="new", session_timeout_ms=6000, rebalance_timeout_ms=60000)
    for second in range(21, 41, 3):  # far past the newcomer's 6 s session, inside its rebalance timeout
        group.heartbeat(old, 1, float(second))
        group.tick(float(second))
    assert len(group.members) == 2 and group.state is GroupState.PREPARING_REBALANCE


def test_the_last_member_leaving_empties_the_group_in_a_new_generation() -> None:
    group, (member,) = stable_group()
    assert group.leave(member, 5.0) == wire.NONE
    assert group.state is GroupState.EMPTY and group.generation == 2 and not group.members
    (store,) = group.take_effects()
    assert isinstance(store, StoreGroup) and store.record.members == () and store.record.generation == 2
    assert group.leave(member, 5.0) == wire.UNKNOWN_MEMBER_ID


def test_leaving_during_a_rebalance_can_complete_it() -> None:
    group, (leader, follower) = stable_group(2)
    ticket = Ticket("leader-rejoin")
    assert join(group, 5.0, leader, ticket) is None
    group.leave(follower, 6.0)
    outcome = replies(group)[ticket]
    assert isinstance(outcome, JoinOutcome) and outcome.generation_id == 2
    assert [member_id for member_id, _ in outcome.members] == [leader]


# ---- commits --------------------------------------------------------------------------------------


def test_commit_rules() -> None:
    empty = Group("g", SETTINGS)
    assert empty.check_commit("", -1, 0.0) == wire.NONE  # assign() consumers store offsets only
    group, (member,) = stable_group()
    assert group.check_commit("", -1, 5.0) == wire.UNKNOWN_MEMBER_ID
    assert group.check_commit(member, 1, 5.0) == wire.NONE
    assert group.check_commit(member, 0, 5.0) == wire.ILLEGAL_GENERATION
    new_member(group, 6.0, client="new")
    assert group.check_commit(member, 1, 6.0) == wire.NONE  # preparing: commit before rejoining is fine
    join(group, 6.1, member)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.check_commit(member, 2, 6.2) == wire.REBALANCE_IN_PROGRESS


# ---- protocol choice and reloading ---------------------------------------------------------------


def member_with(*names: str) -> Member:
    return Member("m", "c", "h", 10000, 30000, [(name, b"") for name in names], 0.0)


def test_protocol_selection_by_vote_among_the_common_ones() -> None:
    assert (
        select_protocol([member_with("range", "roundrobin"), member_with("roundrobin", "range")]) == "range"
    )
    assert select_protocol([member_with("sticky", "range"), member_with("range")]) == "range"
    three = [
        member_with("range", "roundrobin"),
        member_with("roundrobin"),
        member_with("roundrobin", "range"),
    ]
    assert select_protocol(three) == "roundrobin"
    assert select_protocol([member_with("a"), member_with("b")]) is None
    assert select_protocol([]) is None


def test_a_group_reloaded_from_its_record_carries_on_in_the_same_generation() -> None:
    group, ids = stable_group(2)
    record = decode_group(encode_value(group.record(1234)))
    loaded = Group.from_record("g", record, SETTINGS, 100.0)
    assert loaded.state is GroupState.STABLE and loaded.generation == 1 and loaded.leader == ids[0]
    assert {m: loaded.members[m].assignment for m in ids} == {m: m.encode() for m in ids}
    assert loaded.heartbeat(ids[1], 1, 101.0) == wire.NONE
    assert loaded.check_commit(ids[0], 1, 101.0) == wire.NONE
    loaded.tick(110.5)  # ids[0] (committed at 101 s) is alive; ids[1] last seen at 101 s too
    assert set(loaded.members) == set(ids)
    loaded.tick(111.5)
    assert not loaded.members and loaded.state is GroupState.EMPTY  # nobody came back: both expired


def test_shutting_down_answers_every_waiting_request() -> None:
    group = Group("g", SETTINGS)
    member_id, ticket = new_member(group, 0.0)
    group.shut_down(wire.NOT_COORDINATOR)
    assert replies(group) == {ticket: JoinOutcome(wire.NOT_COORDINATOR, member_id)}
    assert group.state is GroupState.DEAD
    assert group.heartbeat(member_id, 0, 1.0) == wire.COORDINATOR_NOT_AVAILABLE
