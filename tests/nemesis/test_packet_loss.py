"""``packet-loss``, the first fault kind added through the registry alone: its declaration, the
schedule drawing and healing it, the exact iptables argv each node runs, its ops and fault
windows in the history, heal-all taking its chain away, and ``tidemark shrink`` keeping or
dropping it -- all without containers (the real effect: ``test_packet_loss_real.py``)."""

from __future__ import annotations

import itertools
import shlex

import pytest

from harness.report import plots
from nemesis import iptables
from nemesis.broker_acts import NODE_ACTS
from nemesis.fault_declaration import NODE_CONTROL
from nemesis.fault_kinds import PACKET_LOSS_PROBABILITY, kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import NETWORK_RESET_SCRIPT, Nemesis, NemesisConfig
from nemesis.packet_loss import LOSS_PROBABILITY, PacketLoss
from nemesis.plan import Layout, PlanError, schedule
from nemesis.scenario import parse_scenario
from nemesis.shrink import Step, fault_count, shrink, timeline_steps, units_of, without_units
from nemesis.spec import FAULT_KINDS, NEMESIS_CHOICES, NODE_FAULT_KINDS, NemesisSpec, parse_name_list
from nemesis.steps import FaultStep
from testbed.record import faults as record
from testbed.record.faults import NemesisRow, fault_windows, nemesis_events
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_mechanism import FakeCluster

SECOND = 1_000_000_000
PEERS_OF_N1 = ["10.9.0.2", "10.9.0.3", "10.9.0.4"]  # n2, n3 and the controller c of FakeCluster


def nemesis_on(recorded: tuple[Recorder, list[Op]], spec: NemesisSpec | None = None) -> Nemesis:
    recorder, _ = recorded
    return Nemesis(
        spec or NemesisSpec(faults=("packet-loss",)),
        FakeCluster(),
        recorder,
        NemesisConfig(leader_partitions=[("q", 0)]),
    )


# --------------------------------------------------------------------------- the registry entry


def test_packet_loss_is_declared_once_with_its_heal_needs_colour_and_mechanism() -> None:
    kind = kind_of("packet-loss")
    assert kind.heal == "packet-loss-heal" and kind_of("packet-loss-heal").heal_name is None
    assert (kind.drawn_as, kind.nodes, kind.needs) == ("node-target", "required", frozenset({NODE_CONTROL}))
    assert kind_of("packet-loss-heal").nodes == "optional", "no node named: every broker, as metadata-heal"
    assert plots.fault_colour("packet-loss") == kind.colour != plots.fault_colour("kill")
    assert {"packet-loss", "packet-loss-heal"} <= set(MECHANISMS) & set(NODE_ACTS)
    assert '"probability"' in kind.op_value and f"{PACKET_LOSS_PROBABILITY:g}" in kind.doc
    assert LOSS_PROBABILITY == PACKET_LOSS_PROBABILITY == 0.3


def test_packet_loss_joins_the_random_nemesis_and_the_record_pairs_it() -> None:
    assert "packet-loss" in NODE_FAULT_KINDS and "packet-loss" in FAULT_KINDS
    assert "packet-loss" in NEMESIS_CHOICES and "packet-loss-heal" not in NEMESIS_CHOICES
    assert parse_name_list("kill,packet-loss", NEMESIS_CHOICES, "--nemesis") == ("kill", "packet-loss")
    assert record.HEALS["packet-loss"] == "packet-loss-heal" and "packet-loss" in record.FAULT_KINDS


# --------------------------------------------------------------------------- the plan


def test_the_schedule_draws_packet_loss_on_targets_and_heals_it() -> None:
    spec = NemesisSpec(faults=("packet-loss", "kill"), seed=7, targets=("one", "minority", "all"))
    steps = list(itertools.islice(schedule(spec, Layout(("n1", "n2", "n3"), "c")), 40))
    losses = [step for step in steps if step.fault == "packet-loss"]
    assert losses and {step.heal_f for step in losses} == {"packet-loss-heal"}
    assert {step.target for step in losses} == {"one", "minority", "all"}
    assert all(step.nodes and set(step.nodes) <= {"n1", "n2", "n3"} for step in losses)
    assert all(step.heal_at_seconds > step.at_seconds for step in losses)


# --------------------------------------------------------------------------- the iptables argv


def test_each_peer_gets_one_random_drop_rule_in_the_loss_chain() -> None:
    assert shlex.split(iptables.random_drop_rule("10.9.0.2", 0.3)) == [
        "iptables", "-w", "10", "-A", "TIDEMARK-LOSS", "-s", "10.9.0.2/32",
        "-m", "statistic", "--mode", "random", "--probability", "0.3", "-j", "DROP",
    ]  # fmt: skip
    script = iptables.packet_loss_script(["10.9.0.3", "10.9.0.2", "10.9.0.3"], 0.3)
    assert script.splitlines() == [
        "set -eu",
        "iptables -w 10 -N TIDEMARK-LOSS 2>/dev/null || iptables -w 10 -F TIDEMARK-LOSS",
        "iptables -w 10 -C INPUT -j TIDEMARK-LOSS 2>/dev/null || iptables -w 10 -I INPUT 1 -j TIDEMARK-LOSS",
        iptables.random_drop_rule("10.9.0.2", 0.3),
        iptables.random_drop_rule("10.9.0.3", 0.3),
    ]
    assert iptables.packet_loss_heal_script() == iptables.heal_script("TIDEMARK-LOSS")
    assert "TIDEMARK-LOSS" in iptables.CHAINS and "-X TIDEMARK-LOSS" in iptables.remove_script()


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, True])
def test_a_probability_that_is_no_loss_is_refused_before_any_node(bad: float) -> None:
    with pytest.raises(ValueError, match="a loss probability must be > 0 and <= 1"):
        iptables.random_drop_rule("10.9.0.2", bad)
    with pytest.raises(ValueError, match="loss probability"):
        PacketLoss(Layout(("n1",), None), lambda node: "10.9.0.1", lambda node, script: None, bad)


def test_a_node_loses_packets_from_every_peer_but_itself() -> None:
    cluster = FakeCluster()
    loss = PacketLoss(Layout(tuple(cluster.brokers), "c"), cluster.ip, lambda node, script: None)
    assert loss.script("n1") == iptables.packet_loss_script(PEERS_OF_N1, 0.3)
    cluster.addresses["n3"] = "fe80::1"
    with pytest.raises(PlanError, match="packet-loss: address of node n3: 'fe80::1' is IPv6"):
        loss.script("n1")


# --------------------------------------------------------------------------- the mechanism and its ops


def test_packet_loss_and_its_heal_are_nemesis_ops_on_the_loss_chain(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    _, ops = recorded
    nemesis = nemesis_on(recorded)
    cluster = nemesis.cluster
    assert isinstance(cluster, FakeCluster)
    assert nemesis.apply(FaultStep("packet-loss", ("n1",))).type == "ok"
    assert cluster.remotes["n1"].scripts == [iptables.packet_loss_script(PEERS_OF_N1, 0.3)]
    assert nemesis.active_faults() == ["packet-loss n1"]
    assert nemesis.apply(FaultStep("packet-loss-heal")).type == "ok"  # no node: every broker
    assert [(op.f, op.type, op.value) for op in ops] == [
        ("packet-loss", "invoke", {"nodes": ["n1"], "probability": 0.3}),
        ("packet-loss", "ok", {"nodes": ["n1"], "probability": 0.3}),
        ("packet-loss-heal", "invoke", {"nodes": ["n1", "n2", "n3"]}),
        ("packet-loss-heal", "ok", {"nodes": ["n1", "n2", "n3"]}),
    ]
    assert cluster.remotes["n2"].scripts == [iptables.packet_loss_heal_script()]
    assert nemesis.active_faults() == []


def test_heal_all_heals_a_packet_loss_by_its_own_heal_then_removes_every_chain(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis = nemesis_on(recorded)
    cluster = nemesis.cluster
    assert isinstance(cluster, FakeCluster)
    nemesis.apply(FaultStep("packet-loss", ("n2", "n3")))
    healed = nemesis.heal_all()
    assert [(op.f, op.type, op.value) for op in healed] == [
        ("packet-loss-heal", "ok", {"nodes": ["n2", "n3"]}),
        ("heal", "ok", {"nodes": ["n1", "n2", "n3", "c"]}),
        ("resume", "ok", {"nodes": ["n1", "n2", "n3"]}),
    ]
    assert cluster.remotes["n3"].scripts[-2:] == [
        iptables.packet_loss_heal_script(),
        NETWORK_RESET_SCRIPT,
    ]
    assert nemesis.active_faults() == [] and nemesis.heal_all() == []


def test_a_scheduled_packet_loss_follows_the_leader_carries_its_target_and_is_healed(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis = nemesis_on(recorded, NemesisSpec(faults=("packet-loss",), targets=("leader",)))
    step = next(iter(nemesis.plan()))
    completion, resolved = nemesis.execute_step(step)  # FakeCluster's leader of q/0 is n2
    assert completion is not None and completion.type == "ok"
    assert completion.value == {
        "nodes": ["n2"],
        "target": "leader",
        "leader_of": {"topic": "q", "partition": 0},
        "probability": 0.3,
    }
    healed = nemesis.heal_step(resolved)
    assert healed is not None and (healed.f, healed.type, healed.value) == (
        "packet-loss-heal",
        "ok",
        {"nodes": ["n2"]},
    )
    assert nemesis.active_faults() == []


# --------------------------------------------------------------------------- the record and shrink


def row(index: int, at: float, kind: str, f: str, nodes: list[str]) -> NemesisRow:
    return NemesisRow(index, int(at * SECOND), kind, f, {"nodes": nodes, "probability": 0.3}, None)


def test_the_fault_window_of_a_packet_loss_closes_at_its_heal() -> None:
    rows = [
        row(0, 1.0, "invoke", "packet-loss", ["n1"]),
        row(1, 1.1, "ok", "packet-loss", ["n1"]),
        row(2, 4.0, "invoke", "heal", ["n1"]),  # a partition heal does not end a packet loss
        row(3, 4.1, "ok", "heal", ["n1"]),
        row(4, 5.0, "invoke", "packet-loss-heal", ["n1", "n2"]),
        row(5, 5.2, "ok", "packet-loss-heal", ["n1", "n2"]),
        row(6, 6.0, "invoke", "packet-loss", ["n3"]),
        row(7, 6.1, "ok", "packet-loss", ["n3"]),
    ]
    windows = fault_windows(nemesis_events(rows))
    assert [(w.kind, w.nodes, w.start_s, w.end_s, w.healed_by) for w in windows] == [
        ("packet-loss", ("n1",), 1.0, 5.2, "packet-loss-heal"),
        ("packet-loss", ("n3",), 6.0, None, None),
    ]


def nemesis_op(index: int, at: float, kind: str, f: str, value: dict[str, object]) -> Op:
    return Op(index, int(at * SECOND), NEMESIS_PROCESS, kind, f, value)  # type: ignore[arg-type]


def recorded_steps() -> list[Step]:
    ops: list[Op] = []
    for at, f, value in (
        (10.0, "packet-loss", {"nodes": ["n1"], "target": "one", "probability": 0.3}),
        (15.0, "packet-loss-heal", {"nodes": ["n1"]}),
        (20.0, "kill", {"nodes": ["n2"], "target": "one"}),
        (25.0, "start", {"nodes": ["n2"]}),
    ):
        ops += [
            nemesis_op(len(ops), at, "invoke", f, value),
            nemesis_op(len(ops) + 1, at + 0.1, "ok", f, value),
        ]
    return timeline_steps(ops)


def test_shrink_writes_a_packet_loss_and_its_heal_as_one_unit() -> None:
    steps = recorded_steps()
    assert [step for step in steps if "fault" in step][:2] == [
        {"fault": "packet-loss", "node": "n1"},
        {"fault": "packet-loss-heal", "node": "n1"},
    ]
    parse_scenario({"name": "x", "step": steps}, "test")  # a valid scenario
    labels = units_of(steps)
    loss, heal = (steps.index(step) for step in steps if str(step.get("fault", "")).startswith("packet-loss"))
    assert labels[loss] is not None and labels[loss] == labels[heal]
    assert fault_count(steps) == 2
    assert fault_count(without_units(steps, {labels[loss]})) == 1


@pytest.mark.parametrize(
    ("needed", "kept"), [("packet-loss", ["packet-loss", "packet-loss-heal"]), ("kill", ["kill", "start"])]
)
def test_shrink_keeps_or_drops_a_packet_loss_as_the_oracle_says(needed: str, kept: list[str]) -> None:
    result = shrink(
        recorded_steps(), lambda candidate: any(step.get("fault") == needed for step in candidate)
    )
    assert [step["fault"] for step in result.steps if "fault" in step] == kept
