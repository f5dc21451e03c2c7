"""``slow-link``: its declaration, the schedule drawing and healing it, the script each node runs,
its ops, heal-all's blanket reset, a scenario step's ``rate_kbit`` and ``tidemark shrink`` keeping
the rate -- without containers (the real effect: ``test_slow_link_real.py``)."""

from __future__ import annotations

import itertools

import pytest

from harness.report import plots
from nemesis.broker_acts import NODE_ACTS, VALUE_ACTS
from nemesis.fault_kinds import SLOW_LINK_RATE_KBIT, checked_rate, kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import NETWORK_RESET_SCRIPT, Nemesis, NemesisConfig
from nemesis.plan import Layout, PlanError, schedule
from nemesis.scenario import parse_scenario
from nemesis.shrink import timeline_steps
from nemesis.slow_link import HANDLE, SlowLink, slow_link_heal_script, slow_link_script
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from nemesis.steps import FaultStep, ScenarioError, parse_step
from testbed.record import faults as record
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_mechanism import FakeCluster

PEERS_OF_N1 = ["10.9.0.2", "10.9.0.3", "10.9.0.4"]  # n2, n3 and the controller c of FakeCluster


def nemesis_on(recorded: tuple[Recorder, list[Op]], spec: NemesisSpec | None = None) -> Nemesis:
    return Nemesis(
        spec or NemesisSpec(faults=("slow-link",)),
        FakeCluster(),
        recorded[0],
        NemesisConfig(leader_partitions=[("q", 0)]),
    )


def test_slow_link_is_declared_once_with_its_heal_rate_colour_and_mechanism() -> None:
    kind = kind_of("slow-link")
    assert kind.heal == "slow-link-heal" and kind_of("slow-link-heal").nodes == "optional"
    assert kind.takes("rate_kbit") and f'"rate_kbit": {SLOW_LINK_RATE_KBIT}' in kind.op_value
    assert plots.fault_colour("slow-link") == kind.colour != plots.fault_colour("packet-loss")
    assert {"slow-link", "slow-link-heal"} <= set(MECHANISMS) & set(NODE_ACTS)
    assert "slow-link" in VALUE_ACTS, "the act reads the rate its op names"
    assert record.HEALS["slow-link"] == "slow-link-heal"
    assert "slow-link" in NEMESIS_CHOICES and "slow-link-heal" not in NEMESIS_CHOICES


@pytest.mark.parametrize("bad", [0, 7, -1, 2.5, True, "256"])
def test_a_rate_that_is_a_cut_or_not_a_number_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="rate_kbit must be a whole number >= 8"):
        checked_rate(bad)
    with pytest.raises(ValueError, match="rate_kbit"):
        slow_link_script(["10.9.0.2"], bad)  # type: ignore[arg-type]


def test_the_script_shapes_each_peer_on_its_route_device_and_replaces_only_its_own_qdisc() -> None:
    script = slow_link_script(["10.9.0.3", "10.9.0.2", "10.9.0.3"], 64)
    lines = script.splitlines()
    assert lines[0] == "set -eu"
    assert "for peer in 10.9.0.2 10.9.0.3; do" in lines, "each distinct peer, sorted"
    assert 'ip -o -4 route get "$peer"' in script, "the device is the one the peer is routed through"
    assert f'"qdisc htb {HANDLE}: "*) tc qdisc del dev "$dev" root ;;' in script, "its own qdisc is replaced"
    assert "is not ours" in script and '"qdisc noqueue "*) ;;' in script, "a foreign root qdisc is refused"
    assert f"classid {HANDLE}:2 htb rate 64kbit ceil 64kbit" in script
    assert f'u32 match ip dst "$peer/32" flowid {HANDLE}:2' in script, "only peers' packets are slowed"
    assert f"htb {HANDLE}: " in slow_link_heal_script() and "command -v tc" in slow_link_heal_script()
    assert NETWORK_RESET_SCRIPT.endswith(slow_link_heal_script()), "heal-all removes the qdisc too"


def test_a_node_slows_its_links_to_every_peer_but_itself() -> None:
    cluster = FakeCluster()
    link = SlowLink(Layout(tuple(cluster.brokers), "c"), cluster.ip, lambda node, script: None)
    assert link.script("n1", 64) == slow_link_script(PEERS_OF_N1, 64)
    assert link.script("n1") == slow_link_script(PEERS_OF_N1, SLOW_LINK_RATE_KBIT)
    cluster.addresses["n3"] = "fe80::1"
    with pytest.raises(PlanError, match="slow-link: address of node n3: 'fe80::1' is IPv6"):
        link.script("n1")


def test_slow_link_and_its_heal_are_ops_carrying_the_rate(recorded: tuple[Recorder, list[Op]]) -> None:
    _, ops = recorded
    nemesis = nemesis_on(recorded)
    cluster = nemesis.cluster
    assert isinstance(cluster, FakeCluster)
    assert nemesis.apply(FaultStep("slow-link", ("n1",), rate_kbit=64)).type == "ok"
    assert cluster.remotes["n1"].scripts == [slow_link_script(PEERS_OF_N1, 64)]
    assert nemesis.active_faults() == ["slow-link n1"]
    assert nemesis.apply(FaultStep("slow-link-heal")).type == "ok"  # no node: every broker
    assert [(op.f, op.type, op.value) for op in ops] == [
        ("slow-link", "invoke", {"nodes": ["n1"], "rate_kbit": 64}),
        ("slow-link", "ok", {"nodes": ["n1"], "rate_kbit": 64}),
        ("slow-link-heal", "invoke", {"nodes": ["n1", "n2", "n3"]}),
        ("slow-link-heal", "ok", {"nodes": ["n1", "n2", "n3"]}),
    ]
    assert cluster.remotes["n2"].scripts == [slow_link_heal_script()]
    assert nemesis.active_faults() == []


def test_heal_all_heals_a_slow_link_by_its_own_heal_then_resets_every_node(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis = nemesis_on(recorded)
    cluster = nemesis.cluster
    assert isinstance(cluster, FakeCluster)
    nemesis.apply(FaultStep("slow-link", ("n2",)))
    assert cluster.remotes["n2"].scripts == [slow_link_script(["10.9.0.1", "10.9.0.3", "10.9.0.4"], 256)]
    healed = nemesis.heal_all()
    assert [(op.f, op.type) for op in healed] == [("slow-link-heal", "ok"), ("heal", "ok"), ("resume", "ok")]
    assert cluster.remotes["n2"].scripts[-2:] == [slow_link_heal_script(), NETWORK_RESET_SCRIPT]
    assert nemesis.active_faults() == [] and nemesis.heal_all() == []


def test_the_schedule_draws_slow_links_on_targets_and_heals_them() -> None:
    spec = NemesisSpec(faults=("slow-link", "kill"), seed=3, targets=("one", "majority", "all"))
    steps = list(itertools.islice(schedule(spec, Layout(("n1", "n2", "n3"), "c")), 40))
    slow = [step for step in steps if step.fault == "slow-link"]
    assert slow and {step.heal_f for step in slow} == {"slow-link-heal"}
    assert all(step.heal_at_seconds > step.at_seconds for step in slow)


def scenario_with(step: dict[str, object]) -> None:
    parse_scenario({"name": "x", "step": [{"fault": "slow-link", "node": "n1", **step}]}, "x.toml")


def test_a_scenario_step_names_its_rate_and_a_bad_one_is_refused_naming_the_step() -> None:
    scenario_with({"rate_kbit": 64})
    with pytest.raises(ScenarioError, match=r"x\.toml.*step 1.*rate_kbit must be a whole number >= 8, not 4"):
        scenario_with({"rate_kbit": 4})
    with pytest.raises(ScenarioError, match="rate_kbit is for slow-link only, not kill"):
        parse_scenario({"name": "x", "step": [{"fault": "kill", "node": "n1", "rate_kbit": 64}]}, "x.toml")


def op(index: int, at: float, kind: str, f: str, value: dict[str, object]) -> Op:
    return Op(index, int(at * 1e9), NEMESIS_PROCESS, kind, f, value)  # type: ignore[arg-type]


def test_shrink_replays_a_slow_link_at_the_rate_it_had() -> None:
    ops = [
        op(0, 10.0, "invoke", "slow-link", {"nodes": ["n1"], "target": "one", "rate_kbit": 64}),
        op(1, 10.1, "ok", "slow-link", {"nodes": ["n1"], "target": "one", "rate_kbit": 64}),
        op(2, 15.0, "invoke", "slow-link-heal", {"nodes": ["n1"]}),
        op(3, 15.1, "ok", "slow-link-heal", {"nodes": ["n1"]}),
    ]
    steps = [step for step in timeline_steps(ops) if "fault" in step]
    assert steps == [
        {"fault": "slow-link", "node": "n1", "rate_kbit": 64},
        {"fault": "slow-link-heal", "node": "n1"},
    ]
    parse_scenario({"name": "x", "step": steps}, "shrunk")


def test_a_slow_link_towards_named_peers_shapes_only_those_and_refuses_strangers() -> None:
    cluster = FakeCluster()
    link = SlowLink(Layout(tuple(cluster.brokers), "c"), cluster.ip, lambda node, script: None)
    assert link.script("c", 32, ["n3", "n1"]) == slow_link_script(["10.9.0.1", "10.9.0.3"], 32)
    with pytest.raises(PlanError, match="slow-link: n4 is no peer of c in this cluster"):
        link.script("c", 32, ["n1", "n4"])
    with pytest.raises(PlanError, match="slow-link: c is no peer of c"):
        link.script("c", 32, ["c"])


def test_the_controller_slows_its_metadata_to_some_brokers_and_the_heal_takes_it_off(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    """The controller node's own egress, towards the brokers a step names: the metadata reaches
    them late, and the others on time (the recommission-late-metadata package's tool)."""
    _, ops = recorded
    nemesis = nemesis_on(recorded)
    cluster = nemesis.cluster
    assert isinstance(cluster, FakeCluster)
    assert nemesis.apply(FaultStep("slow-link", ("c",), rate_kbit=32, peers=("n2", "n3"))).type == "ok"
    assert cluster.remotes["c"].scripts == [slow_link_script(["10.9.0.2", "10.9.0.3"], 32)]
    assert ops[-1].value == {"nodes": ["c"], "rate_kbit": 32, "peers": ["n2", "n3"]}
    assert nemesis.active_faults() == ["slow-link c"]
    assert nemesis.apply(FaultStep("slow-link-heal", ("c",))).type == "ok"
    assert cluster.remotes["c"].scripts[-1] == slow_link_heal_script()
    assert nemesis.active_faults() == []
    with pytest.raises(ValueError, match="not brokers of this cluster: c"):
        nemesis.apply(FaultStep("kill", ("c",)))  # only the kinds that say so act on the controller


def test_a_scenario_step_names_its_peers_by_role_and_only_slow_link_takes_them() -> None:
    table = {"fault": "slow-link", "node": "controller", "peers": ["n2", "L"]}
    parse_scenario({"name": "x", "step": [table]}, "x.toml")
    step = parse_step(table, "x.toml: step 1")
    assert isinstance(step, FaultStep) and step.peers == ("n2", "L")
    assert step.resolved({"controller": "c", "L": "n1", "n2": "n2"}.__getitem__).peers == ("n2", "n1")
    with pytest.raises(
        ScenarioError, match=r"x\.toml.*step 1.*peers = \[\.\.\.\] is for slow-link only, not kill"
    ):
        parse_scenario({"name": "x", "step": [{"fault": "kill", "node": "n1", "peers": ["n2"]}]}, "x.toml")
    with pytest.raises(ScenarioError, match="peers must be a non-empty list of node names, not 'n2'"):
        scenario_with({"peers": "n2"})


def test_shrink_replays_a_slow_link_towards_the_peers_it_had() -> None:
    value = {"nodes": ["c"], "rate_kbit": 32, "peers": ["n2", "n3"]}
    ops = [
        op(0, 10.0, "invoke", "slow-link", value),
        op(1, 10.1, "ok", "slow-link", value),
        op(2, 15.0, "invoke", "slow-link-heal", {"nodes": ["c"]}),
        op(3, 15.1, "ok", "slow-link-heal", {"nodes": ["c"]}),
    ]
    steps = [step for step in timeline_steps(ops) if "fault" in step]
    assert steps[0] == {"fault": "slow-link", "node": "c", "rate_kbit": 32, "peers": ["n2", "n3"]}
    parse_scenario({"name": "x", "step": steps}, "shrunk")
