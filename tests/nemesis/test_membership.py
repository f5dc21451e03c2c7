"""The ``decommission`` / ``recommission`` plans (:mod:`nemesis.membership`), without a cluster.

:func:`moved_away` is the pure plan of one partition's move.  The :class:`Membership` tests drive
the fault and its heal against a recording stand-in for kafka-python's admin client (the real one
is exercised by ``tests/nemesis/test_membership_real.py`` on a Docker cluster and by
``tests/broker_impl/test_reassignment_cluster.py`` on a local one): which targets are sent, that
the heal sends the original replica sets back, waits for the moves and elects preferred leaders.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest
from kafka import TopicPartition

from nemesis.membership import Membership, moved_away, preferred_of
from nemesis.package_context import ReplicationRules
from nemesis.packages import PackageContext, PackageError, plan_package


def test_a_replica_is_replaced_in_place_by_a_broker_outside_the_set() -> None:
    assert moved_away([1, 2, 3], 1, [1, 2, 3, 4]) == [4, 2, 3]
    assert moved_away([1, 2], 2, [1, 2, 3]) == [1, 3]


def test_without_a_spare_broker_the_replica_is_dropped() -> None:
    assert moved_away([1, 2, 3], 2, [1, 2, 3]) == [1, 3]


def test_a_partition_without_the_broker_or_with_it_alone_is_not_moved() -> None:
    assert moved_away([1, 2, 3], 4, [1, 2, 3, 4]) is None
    assert moved_away([2], 2, [2]) is None  # alone and nowhere to go
    assert moved_away([2], 2, [1, 2]) == [1]


class FakeAdmin:
    """Records the calls; reassignments complete after ``pending_polls`` list calls."""

    def __init__(self, assignments: dict[str, list[list[int]]], pending_polls: int = 2) -> None:
        self.assignments = assignments
        self.altered: list[dict[tuple[str, int], list[int]]] = []
        self.elected: list[Mapping[str, list[int]]] = []
        self.polls = 0
        self.pending_polls = pending_polls
        self.closed = 0

    def list_topics(self) -> list[str]:
        return [*self.assignments, "__consumer_offsets"]

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        assert "__consumer_offsets" not in names  # internal topics are never moved
        return [
            {
                "name": name,
                "partitions": [
                    {"partition_index": index, "replica_nodes": replicas}
                    for index, replicas in enumerate(self.assignments[name])
                ],
            }
            for name in names
        ]

    def alter_partition_reassignments(
        self, moves: Mapping[TopicPartition, list[int]]
    ) -> dict[TopicPartition, None]:
        self.altered.append({(tp.topic, tp.partition): list(t) for tp, t in moves.items()})
        return dict.fromkeys(moves)

    def list_partition_reassignments(self, wanted: list[TopicPartition]) -> dict[TopicPartition, Any]:
        self.polls += 1
        return {} if self.polls > self.pending_polls else {tp: {} for tp in wanted}

    def elect_leaders(
        self, election_type: int, partitions: Mapping[str, list[int]], raise_errors: bool
    ) -> None:
        assert election_type == 0 and not raise_errors
        self.elected.append(partitions)

    def close(self) -> None:
        self.closed += 1


class FakeCluster:
    bootstrap = "unused:9092"
    node_ids: Mapping[str, int] = {"n1": 1, "n2": 2, "n3": 3, "n4": 4}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin({"t": [[1, 2, 3], [2, 3, 4], [3, 4, 1]]})
    monkeypatch.setattr(Membership, "_admin", lambda self: fake)
    return fake


def test_decommission_moves_every_replica_of_the_node_and_recommission_moves_them_back(
    admin: FakeAdmin,
) -> None:
    members = Membership(FakeCluster(), timeout=1.0, settle_timeout=5.0)  # type: ignore[arg-type]
    moved = members.decommission("n1")
    assert moved == {"t-0": [4, 2, 3], "t-2": [3, 4, 2]}
    assert admin.altered == [{("t", 0): [4, 2, 3], ("t", 2): [3, 4, 2]}]
    members.recommission("n1")
    assert admin.altered[-1] == {("t", 0): [1, 2, 3], ("t", 2): [3, 4, 1]}
    assert admin.polls == 3  # waited until no move of them was left
    assert admin.elected == [{"t": [0, 2]}]
    assert admin.closed == 2
    members.recommission("n1")  # nothing left to move back: no call at all
    assert (len(admin.altered), admin.closed) == (2, 2)


def test_recommission_of_a_node_never_decommissioned_does_nothing(admin: FakeAdmin) -> None:
    Membership(FakeCluster(), timeout=1.0).recommission("n2")  # type: ignore[arg-type]
    assert admin.altered == [] and admin.elected == []


def test_an_unknown_node_is_refused(admin: FakeAdmin) -> None:
    with pytest.raises(ValueError, match="n9 is not a broker"):
        Membership(FakeCluster(), timeout=1.0).decommission("n9")  # type: ignore[arg-type]


def test_the_package_decommissions_the_leader_crashes_the_new_one_in_half_the_draws_and_moves_back() -> None:
    context = PackageContext(("n1", "n2", "n3", "n4"), 1, 3, metadata_delay=True)
    plans = [plan_package("decommission-leader-crash", random.Random(seed), context) for seed in range(40)]
    for steps in plans:
        faults = [step["fault"] for step in steps if "fault" in step]
        assert faults[0] == "decommission" and faults[-1] == "recommission"
        assert steps[-1] == {"wait": "in-isr", "node": "L", "partition": 0, "timeout": 60}
    crashed = [any(step.get("fault") == "kill" for step in steps) for steps in plans]
    assert 0 < sum(crashed) < len(plans)


@pytest.mark.parametrize(
    "name", ["decommission-leader-crash", "lagging-preferred-election", "recommission-late-metadata"]
)
def test_the_package_needs_a_controller_node(name: str) -> None:
    context = PackageContext(("n1", "n2", "n3"), 1, 3, metadata_delay=False)
    with pytest.raises(PackageError, match="needs a controller node"):
        plan_package(name, random.Random(1), context)


def test_each_return_comes_with_the_newcomer_leading_and_the_metadata_late_for_all_but_the_returner() -> None:
    """L goes, the newcomer X is elected in its place; L comes back while the controller's links
    to the replica set it rejoins -- leader M and followers F1, F2 -- are slow, not to L itself."""
    context = PackageContext(("n1", "n2", "n3", "n4"), 2, 3, metadata_delay=True)
    cycles = set()
    for seed in range(20):
        steps = plan_package("recommission-late-metadata", random.Random(seed), context)
        actions = [step.get("fault") or step.get("wait") or next(iter(step)) for step in steps]
        cycle = [
            "bind", "decommission", "leader-is-not", "bind", "elect-preferred", "leader-is", "sleep",
            "bind", "slow-link", "recommission", "in-isr", "slow-link-heal",
        ]  # fmt: skip
        assert actions[0] == "caught-up" and (len(actions) - 1) % len(cycle) == 0
        cycles.add((len(actions) - 1) // len(cycle))
        assert actions[1:] == cycle * ((len(actions) - 1) // len(cycle))
        p = steps[0]["partition"]
        assert steps[8] == {
            "bind": {"M": f"leader-of:{p}", "F1": f"follower-of:{p}#1", "F2": f"follower-of:{p}#2"}
        }
        assert steps[9] == {
            "fault": "slow-link",
            "node": "controller",
            "peers": ["M", "F1", "F2"],
            "rate_kbit": 32,
        }
        assert steps[10] == {"fault": "recommission", "node": "L"} and steps[12]["node"] == "controller"
    assert cycles == {2, 3}
    shrunk = plan_package(
        "recommission-late-metadata",
        random.Random(1),
        PackageContext(("n1", "n2", "n3"), 1, 3, metadata_delay=True),
    )
    assert shrunk[9]["peers"] == ["M", "F1"], "no newcomer: L's departure leaves two replicas"
    with pytest.raises(PackageError, match="needs a replication factor of at least 2"):
        plan_package(
            "recommission-late-metadata",
            random.Random(1),
            PackageContext(("n1", "n2"), 1, 1, metadata_delay=True),
        )


def test_the_preferred_replica_is_made_a_follower_then_cut_out_of_the_isr_before_its_election() -> None:
    """The election must find the preferred replica alive and lagging: a follower (a leader needs
    no election), cut off from the leader only (it heartbeats the controller), out of the ISR."""
    context = PackageContext(
        ("n1", "n2", "n3"), 2, 3, metadata_delay=True, rules=ReplicationRules(isr_lag_seconds=3.0)
    )
    for seed in range(20):
        steps = plan_package("lagging-preferred-election", random.Random(seed), context)
        actions = [step.get("fault") or step.get("wait") or next(iter(step)) for step in steps]
        assert actions == [
            "caught-up", "bind", "kill", "leader-is-not", "start", "in-isr", "bind", "partition",
            "not-in-isr", "sleep", "elect-preferred", "sleep", "heal", "in-isr",
        ]  # fmt: skip
        p = steps[0]["partition"]
        assert steps[1] == {"bind": {"P": f"preferred-of:{p}"}} and steps[6] == {
            "bind": {"L": f"leader-of:{p}"}
        }
        assert steps[7]["grudge"] == {"L": ["P"], "P": ["L"]} and steps[10] == {
            "fault": "elect-preferred",
            "node": "P",
        }
        assert steps[8] == {"wait": "not-in-isr", "node": "P", "timeout": 40, "partition": p}


def test_elect_preferred_asks_for_the_partitions_whose_first_replica_is_the_node_and_moves_nothing(
    admin: FakeAdmin,
) -> None:
    assert preferred_of({("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("u", 4): [1]}, 1) == {"t": [0], "u": [4]}
    assert preferred_of({("t", 0): [2, 1]}, 1) == {}
    members = Membership(FakeCluster(), timeout=1.0)  # type: ignore[arg-type]
    assert members.elect_preferred("n3") == {"t": [2]}  # t: [1,2,3], [2,3,4], [3,4,1]
    assert admin.elected == [{"t": [2]}] and admin.altered == [] and admin.closed == 1
    members.elect_preferred("n4")  # the preferred replica of nothing: no election asked
    assert admin.elected == [{"t": [2]}] and admin.closed == 2
