"""Pure planning: node targets, grudge shapes, and the seeded schedule -- no containers, no clock."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemesis.plan import (
    Layout,
    PlanError,
    PlannedStep,
    bridge,
    complete_grudge,
    describe_grudge,
    grudge_for,
    grudge_to_json,
    halves,
    isolate,
    isolate_one,
    majorities_ring,
    majority,
    metadata_source,
    minority_size,
    resolve_leader_step,
    schedule,
    sees,
    select_nodes,
    union_grudges,
)
from nemesis.spec import NemesisSpec

NODES5 = ("n1", "n2", "n3", "n4", "n5")
node_lists = st.integers(min_value=2, max_value=9).map(lambda count: [f"n{i}" for i in range(1, count + 1)])
seeds = st.integers(min_value=0, max_value=2**32)


def assert_symmetric(grudge: dict[str, frozenset[str]]) -> None:
    for node, dropped in grudge.items():
        for other in dropped:
            assert node in grudge[other], f"{node} drops {other} but {other} does not drop {node}"


# --------------------------------------------------------------------------- sizes and targets


@pytest.mark.parametrize(
    ("count", "expected_majority", "expected_minority"),
    [(1, 1, 0), (2, 2, 0), (3, 2, 1), (4, 3, 1), (5, 3, 2), (6, 4, 2), (7, 4, 3)],
)
def test_majority_and_minority_sizes(count: int, expected_majority: int, expected_minority: int) -> None:
    assert majority(count) == expected_majority
    assert minority_size(count) == expected_minority
    assert count - minority_size(count) >= majority(count), "losing a minority must leave a majority"


@pytest.mark.parametrize(("target", "size"), [("one", 1), ("minority", 2), ("majority", 3), ("all", 5)])
def test_random_targets_pick_the_right_number_of_distinct_brokers_in_cluster_order(
    target: str, size: int
) -> None:
    for seed in range(50):
        chosen = select_nodes(target, NODES5, random.Random(seed))
        assert len(chosen) == size and len(set(chosen)) == size
        assert list(chosen) == [node for node in NODES5 if node in chosen]


def test_random_targets_reach_every_broker_and_follow_the_seed() -> None:
    hits = Counter(node for seed in range(200) for node in select_nodes("one", NODES5, random.Random(seed)))
    assert set(hits) == set(NODES5)
    assert select_nodes("minority", NODES5, random.Random(7)) == select_nodes(
        "minority", NODES5, random.Random(7)
    )


def test_leader_and_followers_targets_split_on_the_leader() -> None:
    assert select_nodes("leader", NODES5, leader="n3") == ("n3",)
    assert select_nodes("followers", NODES5, leader="n3") == ("n1", "n2", "n4", "n5")


@pytest.mark.parametrize(
    ("target", "brokers", "leader", "message"),
    [
        ("leader", NODES5, None, "needs the leader"),
        ("followers", NODES5, "n9", "needs the leader"),
        ("minority", ("n1", "n2"), None, "selects no broker out of 2"),
        ("followers", ("n1",), "n1", "selects no broker out of 1"),
        ("some", NODES5, None, "unknown node target"),
        ("one", NODES5, None, "needs a random generator"),
    ],
)
def test_targets_that_cannot_be_met_raise_a_plan_error(
    target: str, brokers: tuple[str, ...], leader: str | None, message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        select_nodes(target, brokers, None, leader)


# --------------------------------------------------------------------------- grudges


def test_complete_grudge_drops_everything_outside_each_component() -> None:
    grudge = complete_grudge([["a"], ["b", "c"], ["d"]])
    assert grudge == {"a": {"b", "c", "d"}, "b": {"a", "d"}, "c": {"a", "d"}, "d": {"a", "b", "c"}}
    with pytest.raises(PlanError, match="overlap on b"):
        complete_grudge([["a", "b"], ["b", "c"]])


def test_isolate_cuts_one_node_from_all_others_both_ways() -> None:
    grudge = isolate(NODES5, "n2")
    assert grudge["n2"] == {"n1", "n3", "n4", "n5"}
    assert all(grudge[node] == {"n2"} for node in NODES5 if node != "n2")
    with pytest.raises(PlanError, match="not one of"):
        isolate(NODES5, "n9")


@given(node_lists, seeds)
def test_isolate_one_isolates_exactly_one_random_node(nodes: list[str], seed: int) -> None:
    grudge = isolate_one(nodes, random.Random(seed))
    loners = [node for node in nodes if sees(grudge, node, nodes) == {node}]
    assert len(loners) == 1 or len(nodes) == 2
    assert_symmetric(grudge)


@given(node_lists, seeds)
def test_halves_split_into_two_sides_that_drop_each_other(nodes: list[str], seed: int) -> None:
    grudge = halves(nodes, random.Random(seed))
    sides = {sees(grudge, node, nodes) for node in nodes}
    assert len(sides) == 2
    small, large = sorted(sides, key=len)
    assert (len(small), len(large)) == (len(nodes) // 2, len(nodes) - len(nodes) // 2)
    assert small | large == set(nodes) and not small & large
    for node in nodes:
        assert grudge[node] == (large if node in small else small)


@given(node_lists.filter(lambda nodes: len(nodes) >= 3), seeds)
def test_bridge_keeps_one_node_connected_to_both_sides(nodes: list[str], seed: int) -> None:
    grudge = bridge(nodes, random.Random(seed))
    bridges = [node for node in nodes if sees(grudge, node, nodes) == set(nodes)]
    assert len(bridges) == 1
    go_between = bridges[0]
    assert all(go_between not in dropped for dropped in grudge.values())
    others = [node for node in nodes if node != go_between]
    sides = {sees(grudge, node, others) for node in others}
    assert len(sides) == 2, "without the bridge the rest falls into two sides"
    a, b = sides
    assert not a & b and a | b == set(others) and a and b
    assert_symmetric(grudge)


@given(node_lists.filter(lambda nodes: len(nodes) >= 4), seeds)
def test_majorities_ring_gives_each_node_its_own_majority(nodes: list[str], seed: int) -> None:
    grudge = majorities_ring(nodes, random.Random(seed))
    views = [sees(grudge, node, nodes) for node in nodes]
    for node, view in zip(nodes, views, strict=True):
        assert node in view
        assert len(view) >= majority(len(nodes)), f"{node} sees only {sorted(view)}"
        assert len(view) < len(nodes), f"{node} sees everyone: not a partition"
    assert len(set(views)) == len(nodes), "two nodes share the same majority"
    assert_symmetric(grudge)


def test_partitions_refuse_clusters_too_small_for_their_shape() -> None:
    rng = random.Random(1)
    with pytest.raises(PlanError, match="majorities-ring needs at least 4 nodes"):
        majorities_ring(["a", "b", "c"], rng)
    with pytest.raises(PlanError, match="bridge needs at least 3 nodes"):
        bridge(["a", "b"], rng)
    with pytest.raises(PlanError, match="halves needs at least 2 nodes"):
        halves(["a"], rng)
    with pytest.raises(PlanError, match="unknown partition kind"):
        grudge_for("quarters", NODES5, rng)


def test_grudges_follow_the_seed() -> None:
    for kind in ("isolate-one", "halves", "bridge", "majorities-ring"):
        assert grudge_for(kind, NODES5, random.Random(3)) == grudge_for(kind, NODES5, random.Random(3))
    assert len({tuple(sorted(halves(NODES5, random.Random(seed))["n1"])) for seed in range(30)}) > 1


def test_union_json_and_description() -> None:
    merged = union_grudges({"a": frozenset({"b"})}, {"a": frozenset({"c"}), "b": frozenset({"a"})})
    assert merged == {"a": {"b", "c"}, "b": {"a"}}
    assert grudge_to_json(isolate(["n2", "n1", "n3"], "n1")) == {
        "n1": ["n2", "n3"],
        "n2": ["n1"],
        "n3": ["n1"],
    }
    assert describe_grudge(isolate(["n1", "n2", "n3"], "n1")) == "n1 | n2,n3"
    assert describe_grudge(complete_grudge([["n1"], ["n2"], ["n3"]])) == "n1 | n2 | n3"
    ring = {"a": frozenset({"c"}), "b": frozenset(), "c": frozenset({"a"})}
    assert describe_grudge(ring) == "a-xc c-xa"


# --------------------------------------------------------------------------- layout and schedule


def test_layout_universe_depends_on_the_scope() -> None:
    assert Layout(("n1", "n2"), "c").partition_nodes == ("n1", "n2")
    assert Layout(("n1", "n2"), "c", "all").partition_nodes == ("n1", "n2", "c")
    assert Layout(("n1", "n2"), "c").all_nodes == ("n1", "n2", "c")
    with pytest.raises(PlanError, match="needs a controller"):
        Layout(("n1",), None, "all")
    with pytest.raises(PlanError, match="repeated: n1"):
        Layout(("n1", "n1"))


LAYOUT3 = Layout(("n1", "n2", "n3"), "c")
TOPIC = [("queue", 0), ("queue", 1)]


def first(spec: NemesisSpec, layout: Layout = LAYOUT3, count: int = 60) -> list[PlannedStep]:
    return list(itertools.islice(schedule(spec, layout, TOPIC), count))


def test_schedule_is_determined_by_the_seed() -> None:
    spec = NemesisSpec(faults=("kill", "pause", "partition"), seed=42)
    assert first(spec) == first(spec)
    assert first(spec) != first(NemesisSpec(faults=("kill", "pause", "partition"), seed=43))


def test_schedule_alternates_quiet_and_fault_periods_without_overlap() -> None:
    steps = first(
        NemesisSpec(faults=("kill", "partition"), interval_seconds=10, fault_seconds=4, seed=1), count=200
    )
    previous_heal = 0.0
    for step in steps:
        assert 5 <= step.at_seconds - previous_heal <= 15, "quiet period outside interval * [0.5, 1.5]"
        assert 2 <= step.heal_at_seconds - step.at_seconds <= 6, (
            "fault period outside fault_seconds * [0.5, 1.5]"
        )
        previous_heal = step.heal_at_seconds


def test_schedule_without_jitter_is_periodic() -> None:
    steps = first(
        NemesisSpec(faults=("pause",), interval_seconds=3, fault_seconds=2, jitter=0, seed=5), count=4
    )
    assert [(step.at_seconds, step.heal_at_seconds) for step in steps] == [
        (3, 5),
        (8, 10),
        (13, 15),
        (18, 20),
    ]


def test_schedule_draws_every_fault_and_target_of_the_mix_and_nothing_else() -> None:
    steps = first(NemesisSpec(faults=("kill", "partition"), targets=("one", "leader"), seed=9), count=300)
    assert {step.fault for step in steps} == {"kill", "partition"}
    assert {step.target for step in steps if step.fault == "kill"} == {"one", "leader"}
    # Default partition shapes for 3 brokers: everything but majorities-ring (needs 4 nodes).
    assert {step.target for step in steps if step.fault == "partition"} == {
        "isolate-one",
        "isolate-leader",
        "halves",
        "bridge",
    }


def test_scheduled_steps_carry_concrete_nodes_or_grudges_unless_they_follow_the_leader() -> None:
    layout = Layout(("n1", "n2", "n3"), "c", "all")
    for step in first(
        NemesisSpec(faults=("kill", "pause", "partition"), partition_scope="all", seed=3), layout, 300
    ):
        if step.target in ("leader", "followers", "isolate-leader"):
            assert step.needs_leader and step.leader_of in TOPIC and not step.nodes and step.grudge is None
        elif step.fault == "partition":
            assert step.grudge is not None and set(step.grudge) == {"n1", "n2", "n3", "c"}
        else:
            assert step.nodes and set(step.nodes) <= {"n1", "n2", "n3"}, (
                "node faults never hit the controller"
            )


def test_leader_steps_resolve_from_the_leader_seen_when_they_start() -> None:
    layout = Layout(("n1", "n2", "n3"), "c", "all")
    kill_leader = PlannedStep(1, 2, "kill", "leader", leader_of=("queue", 0))
    pause_followers = PlannedStep(1, 2, "pause", "followers", leader_of=("queue", 0))
    isolate_leader = PlannedStep(1, 2, "partition", "isolate-leader", leader_of=("queue", 0))
    assert resolve_leader_step(kill_leader, layout, "n2").nodes == ("n2",)
    assert resolve_leader_step(pause_followers, layout, "n2").nodes == ("n1", "n3")
    assert resolve_leader_step(isolate_leader, layout, "n2").grudge == isolate(["n1", "n2", "n3", "c"], "n2")
    with pytest.raises(PlanError, match="not one of the brokers"):
        resolve_leader_step(kill_leader, layout, "c")
    concrete = PlannedStep(1, 2, "kill", "one", nodes=("n1",))
    assert resolve_leader_step(concrete, layout, "n2") is concrete


def test_defaults_keep_only_what_fits_and_explicit_misfits_are_errors() -> None:
    two = Layout(("n1", "n2"))
    steps = list(
        itertools.islice(schedule(NemesisSpec(faults=("kill", "partition"), seed=1), two, TOPIC), 200)
    )
    assert "minority" not in {step.target for step in steps}
    assert {step.target for step in steps if step.fault == "partition"} == {
        "isolate-one",
        "isolate-leader",
        "halves",
    }
    with pytest.raises(PlanError, match="'minority' selects no broker in a cluster of 2"):
        next(schedule(NemesisSpec(faults=("kill",), targets=("minority",)), two))
    with pytest.raises(
        PlanError, match="'majorities-ring' needs at least 4 nodes, the partition scope 'brokers' has 3"
    ):
        next(schedule(NemesisSpec(faults=("partition",), partitions=("majorities-ring",)), LAYOUT3))
    with pytest.raises(PlanError, match="no partition shape fits 1 node"):
        next(schedule(NemesisSpec(faults=("partition",)), Layout(("n1",))))
    with pytest.raises(PlanError, match="need a topic partition"):
        next(schedule(NemesisSpec(faults=("kill",), targets=("leader",)), LAYOUT3, ()))


def test_majorities_ring_joins_the_default_mix_when_the_controller_makes_four() -> None:
    layout = Layout(("n1", "n2", "n3"), "c", "all")
    steps = list(
        itertools.islice(
            schedule(NemesisSpec(faults=("partition",), partition_scope="all", seed=2), layout, TOPIC), 200
        )
    )
    assert "majorities-ring" in {step.target for step in steps}


def test_no_faults_means_an_empty_schedule() -> None:
    assert list(schedule(NemesisSpec(), LAYOUT3)) == []


# --------------------------------------------------------------------------- metadata delay


def test_metadata_delay_is_planned_like_the_node_faults_with_its_heal() -> None:
    spec = NemesisSpec(faults=("metadata-delay", "partition"), seed=17)
    steps = first(spec, count=300)
    assert first(spec, count=300) == steps, "seeded"
    delays = [step for step in steps if step.fault == "metadata-delay"]
    assert delays and {step.heal_f for step in delays} == {"metadata-heal"}
    assert {step.heal_f for step in steps if step.fault == "partition"} == {"heal"}
    assert {step.target for step in delays} == {"one", "minority", "majority", "all", "leader", "followers"}
    for step in delays:
        assert step.heal_at_seconds > step.at_seconds and step.grudge is None
        if step.target in ("leader", "followers"):
            assert step.needs_leader and step.leader_of in TOPIC
        else:
            assert step.nodes and set(step.nodes) <= {"n1", "n2", "n3"}, "brokers only, never the controller"
    followers = next(step for step in delays if step.target == "followers")
    assert resolve_leader_step(followers, LAYOUT3, "n2").nodes == ("n1", "n3")
    leader = next(step for step in delays if step.target == "leader")
    assert resolve_leader_step(leader, LAYOUT3, "n3").nodes == ("n3",)


def test_metadata_delay_draws_its_brokers_like_any_node_fault_and_only_when_asked_for() -> None:
    assert "metadata-delay" not in {
        step.fault for step in first(NemesisSpec(faults=("kill", "pause"), seed=3))
    }
    assert [
        step.nodes for step in first(NemesisSpec(faults=("metadata-delay",), targets=("one",), seed=3))
    ] == [step.nodes for step in first(NemesisSpec(faults=("kill",), targets=("one",), seed=3))], (
        "the same draws as any node fault"
    )


def test_metadata_delay_needs_a_controller_node() -> None:
    assert metadata_source(LAYOUT3) == "c"
    external = Layout(("n1", "n2", "n3"))
    with pytest.raises(
        PlanError, match=r"metadata-delay drops the controller's packets .* no controller node"
    ):
        metadata_source(external)
    with pytest.raises(PlanError, match="no controller node"):
        next(schedule(NemesisSpec(faults=("kill", "metadata-delay")), external, TOPIC))
    assert next(schedule(NemesisSpec(faults=("kill",)), external, TOPIC)).fault == "kill"


def test_a_weighted_name_is_drawn_as_often_as_its_weight_says_and_weights_of_one_change_nothing() -> None:
    weighted = NemesisSpec(faults=("kill", "partition"), weights=(("kill", 4),), seed=3)
    drawn = Counter(step.fault for step in first(weighted, count=2000))
    assert 0.75 <= drawn["kill"] / 2000 <= 0.85, drawn  # 4/5 expected
    uniform = NemesisSpec(faults=("kill", "partition"), seed=3)
    assert first(dataclasses.replace(uniform, weights=(("kill", 1),))) == first(uniform), (
        "a mix whose weights are all 1 keeps the seed's schedule of a mix without weights"
    )


def test_a_fault_without_a_heal_is_scheduled_with_no_duration() -> None:
    # elect-preferred does its whole change in its op: its heal time is its start, so the next
    # quiet period starts right after it, and no duration is drawn for it.
    steps = first(NemesisSpec(faults=("elect-preferred", "kill"), seed=7))
    elections = [step for step in steps if step.fault == "elect-preferred"]
    kills = [step for step in steps if step.fault == "kill"]
    assert elections and kills
    assert all(
        step.heal_at_seconds == step.at_seconds and (step.nodes or step.leader_of) for step in elections
    )
    assert all(step.heal_at_seconds > step.at_seconds for step in kills)
    with pytest.raises(ValueError, match="no heal op"):
        _ = elections[0].heal_f


def test_a_controller_kill_is_drawn_on_the_controller_node_without_a_target_and_healed_by_its_start() -> None:
    steps = first(NemesisSpec(faults=("kill", "controller-kill"), seed=11), count=200)
    controller_kills = [step for step in steps if step.fault == "controller-kill"]
    assert 70 <= len(controller_kills) <= 130, "drawn like any other name of the mix"
    assert all(
        (step.target, step.nodes, step.leader_of, step.heal_f)
        == ("controller", ("c",), None, "controller-start")
        for step in controller_kills
    )
    assert all(step.heal_at_seconds > step.at_seconds for step in controller_kills), "a fault with a duration"
    assert all(set(step.nodes) <= {"n1", "n2", "n3"} for step in steps if step.fault == "kill" and step.nodes)
    with pytest.raises(PlanError, match="controller-kill needs a controller node, and this cluster has none"):
        next(schedule(NemesisSpec(faults=("kill", "controller-kill")), Layout(("n1", "n2", "n3")), TOPIC))
