"""``clock-skew``: its declaration, the ability it needs, its ops carrying the offset, heal-all
putting the clocks back, a scenario step's ``offset_s`` and shrink keeping it -- without
containers (the clock script on real processes: ``tests/testbed/cluster/test_fake_clock_drift.py``;
the real effect on brokers: ``tests/testbed/cluster/test_fake_clock_docker.py``)."""

from __future__ import annotations

import itertools

import pytest

from harness.report import plots
from nemesis.broker_acts import NODE_ACTS, VALUE_ACTS
from nemesis.fault_declaration import FAKE_CLOCK
from nemesis.fault_kinds import CLOCK_OFFSET_S, CLOCK_OFFSETS_DRAWN, kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.nemesis_config import cluster_abilities
from nemesis.plan import PlanError, schedule
from nemesis.scenario import parse_scenario
from nemesis.shrink import timeline_steps
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from nemesis.steps import FaultStep, ScenarioError
from testbed.cluster import fake_clock
from testbed.cluster.fake_clock import REAL_CLOCK, NodeClock
from testbed.record import faults as record
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_mechanism import FakeCluster
from tests.nemesis.test_plan import LAYOUT3, TOPIC


class FakeClockCluster(FakeCluster):
    """A FakeCluster whose brokers run under libfaketime: it remembers each node's offset."""

    fake_clock = True

    def __init__(self) -> None:
        super().__init__()
        self.clocks: dict[str, list[NodeClock]] = {}

    def clock(self, node: str) -> NodeClock:
        return self.clocks.get(node, [REAL_CLOCK])[-1]

    def set_clock(self, node: str, clock: NodeClock) -> None:
        self.clocks.setdefault(node, []).append(clock)

    @property
    def offsets(self) -> dict[str, list[float]]:
        """Each node's offsets as set, one per clock fault or heal."""
        return {node: [clock.offset_s for clock in clocks] for node, clocks in self.clocks.items()}


def nemesis_on(recorded: tuple[Recorder, list[Op]], cluster: FakeCluster) -> Nemesis:
    return Nemesis(
        NemesisSpec(faults=("clock-skew",)), cluster, recorded[0], NemesisConfig(leader_partitions=[("q", 0)])
    )


def test_clock_skew_is_declared_once_with_its_heal_offset_ability_and_colour() -> None:
    kind = kind_of("clock-skew")
    assert kind.heal == "clock-heal" and kind_of("clock-heal").nodes == "optional"
    assert kind.takes("offset_s") and f'"offset_s": {CLOCK_OFFSET_S}' in kind.op_value
    assert FAKE_CLOCK in kind.needs and FAKE_CLOCK in kind_of("clock-heal").needs
    assert plots.fault_colour("clock-skew") == kind.colour
    assert {"clock-skew", "clock-heal"} <= set(MECHANISMS) & set(NODE_ACTS) and "clock-skew" in VALUE_ACTS
    assert record.HEALS["clock-skew"] == "clock-heal"
    assert "clock-skew" in NEMESIS_CHOICES and "clock-heal" not in NEMESIS_CHOICES


def test_only_a_cluster_whose_brokers_run_under_libfaketime_offers_the_ability() -> None:
    assert FAKE_CLOCK in cluster_abilities(FakeClockCluster())
    assert FAKE_CLOCK not in cluster_abilities(FakeCluster())
    switched_off = FakeClockCluster()
    switched_off.fake_clock = False
    assert FAKE_CLOCK not in cluster_abilities(switched_off)


def test_a_cluster_without_a_fake_clock_refuses_the_fault_before_any_op(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    with pytest.raises(PlanError, match="libfaketime"):
        nemesis_on(recorded, FakeCluster()).apply(FaultStep("clock-skew", ("n1",)))
    assert recorded[1] == []


def test_clock_skew_and_its_heal_are_ops_carrying_the_offset(recorded: tuple[Recorder, list[Op]]) -> None:
    _, ops = recorded
    cluster = FakeClockCluster()
    nemesis = nemesis_on(recorded, cluster)
    assert nemesis.apply(FaultStep("clock-skew", ("n1", "n2"), offset_s=-30)).type == "ok"
    assert nemesis.apply(FaultStep("clock-skew", ("n3",))).type == "ok"
    assert nemesis.active_faults() == ["clock-skew n1,n2,n3"]
    assert nemesis.apply(FaultStep("clock-heal")).type == "ok"  # no node: every broker
    assert cluster.offsets == {"n1": [-30, 0], "n2": [-30, 0], "n3": [CLOCK_OFFSET_S, 0]}
    assert [(op.f, op.type, op.value) for op in ops if op.type == "ok"] == [
        ("clock-skew", "ok", {"nodes": ["n1", "n2"], "offset_s": -30}),
        ("clock-skew", "ok", {"nodes": ["n3"], "offset_s": CLOCK_OFFSET_S}),
        ("clock-heal", "ok", {"nodes": ["n1", "n2", "n3"]}),
    ]
    assert nemesis.active_faults() == []


def test_a_schedule_draws_each_jump_from_the_seed_both_ways(recorded: tuple[Recorder, list[Op]]) -> None:
    """A random schedule's clock-skew is not always +120 s: its ``offset_s`` is drawn (seeded) from
    ``CLOCK_OFFSETS_DRAWN``, and executing the step jumps by it and records it."""
    spec = NemesisSpec(faults=("clock-skew", "kill"), seed=7)
    steps = [s for s in itertools.islice(schedule(spec, LAYOUT3, TOPIC), 80) if s.fault == "clock-skew"]
    drawn = [step.params["offset_s"] for step in steps]
    assert set(drawn) <= set(CLOCK_OFFSETS_DRAWN) and min(drawn) < 0 < max(drawn) and len(set(drawn)) >= 4
    again = [
        s.params for s in itertools.islice(schedule(spec, LAYOUT3, TOPIC), 80) if s.fault == "clock-skew"
    ]
    assert again == [step.params for step in steps]
    kills = [s for s in itertools.islice(schedule(NemesisSpec(faults=("kill",), seed=7), LAYOUT3, TOPIC), 20)]
    assert all(not step.params for step in kills)
    cluster = FakeClockCluster()
    op, _ = nemesis_on(recorded, cluster).execute_step(steps[0])
    assert op is not None and op.value["offset_s"] == drawn[0]
    assert all(offsets == [drawn[0]] for offsets in cluster.offsets.values())


def test_heal_all_puts_a_skewed_clock_back(recorded: tuple[Recorder, list[Op]]) -> None:
    cluster = FakeClockCluster()
    nemesis = nemesis_on(recorded, cluster)
    nemesis.apply(FaultStep("clock-skew", ("n2",)))
    healed = nemesis.heal_all()
    assert (healed[0].f, healed[0].type, healed[0].value) == ("clock-heal", "ok", {"nodes": ["n2"]})
    assert cluster.offsets == {"n2": [CLOCK_OFFSET_S, 0]} and nemesis.active_faults() == []


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (0, "not 0"),
        (1.5, "whole number"),
        (True, "whole number"),
        (fake_clock.MAX_OFFSET_SECONDS + 1, "at most"),
        ("+60", "whole number"),
    ],
)
def test_a_scenario_offset_that_is_no_skew_is_refused_naming_the_step(offset: object, message: str) -> None:
    step = {"fault": "clock-skew", "node": "n1", "offset_s": offset}
    with pytest.raises(ScenarioError, match=rf"x\.toml.*step 1.*offset_s.*{message}"):
        parse_scenario({"name": "x", "step": [step]}, "x.toml")


def test_a_scenario_step_names_its_offset_and_shrink_replays_it() -> None:
    parse_scenario({"name": "x", "step": [{"fault": "clock-skew", "node": "n1", "offset_s": -3600}]}, "x")
    with pytest.raises(ScenarioError, match="offset_s is for clock-skew only, not kill"):
        parse_scenario({"name": "x", "step": [{"fault": "kill", "node": "n1", "offset_s": 5}]}, "x")
    value = {"nodes": ["n1"], "target": "one", "offset_s": -3600}
    ops = [
        Op(0, 10 * 10**9, NEMESIS_PROCESS, "invoke", "clock-skew", value),
        Op(1, 10 * 10**9 + 1, NEMESIS_PROCESS, "ok", "clock-skew", value),
    ]
    assert timeline_steps(ops)[-1] == {"fault": "clock-skew", "node": "n1", "offset_s": -3600}
