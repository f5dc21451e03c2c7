"""``clock-drift``: its declaration, its ops carrying the rate, a drift that starts from the clock's
reading and a jump that keeps it, heal-all putting the clocks back on real time at real speed, a
schedule drawing slow and fast clocks, a scenario step's ``rate_pct`` and shrink keeping it --
without containers (the clock script on real processes: ``tests/testbed/cluster/test_fake_clock_drift.py``;
on brokers: ``tests/testbed/cluster/test_fake_clock_docker.py``)."""

from __future__ import annotations

import itertools

import pytest

from harness.report import plots
from nemesis.broker_acts import NODE_ACTS, VALUE_ACTS
from nemesis.fault_declaration import FAKE_CLOCK
from nemesis.fault_kinds import CLOCK_RATE_PCT, CLOCK_RATES_DRAWN, kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.plan import PlanError, schedule
from nemesis.scenario import parse_scenario
from nemesis.shrink import timeline_steps
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from nemesis.steps import FaultStep, ScenarioError
from testbed.cluster.fake_clock import REAL_CLOCK
from testbed.record import faults as record
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_clock_skew import FakeClockCluster
from tests.nemesis.test_mechanism import FakeCluster
from tests.nemesis.test_plan import LAYOUT3, TOPIC


def nemesis_on(recorded: tuple[Recorder, list[Op]], cluster: FakeCluster) -> Nemesis:
    return Nemesis(
        NemesisSpec(faults=("clock-drift", "clock-skew")),
        cluster,
        recorded[0],
        NemesisConfig(leader_partitions=[("q", 0)]),
    )


def test_clock_drift_is_declared_once_with_the_clock_heal_its_rate_ability_and_colour() -> None:
    kind = kind_of("clock-drift")
    assert kind.heal == "clock-heal" and record.HEALS["clock-drift"] == "clock-heal"
    assert kind.takes("rate_pct") and f'"rate_pct": {CLOCK_RATE_PCT}' in kind.op_value
    assert FAKE_CLOCK in kind.needs
    assert plots.fault_colour("clock-drift") == kind.colour != kind_of("clock-skew").colour
    assert "clock-drift" in set(MECHANISMS) & set(NODE_ACTS) & set(VALUE_ACTS)
    assert "clock-drift" in NEMESIS_CHOICES and "clock-drift" in record.CLOCK_FAULTS


def test_a_cluster_without_a_fake_clock_refuses_the_drift_before_any_op(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    with pytest.raises(PlanError, match="libfaketime"):
        nemesis_on(recorded, FakeCluster()).apply(FaultStep("clock-drift", ("n1",)))
    assert recorded[1] == []


def test_a_drift_starts_from_the_reading_a_jump_keeps_it_and_the_heal_ends_both(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    _, ops = recorded
    cluster = FakeClockCluster()
    nemesis = nemesis_on(recorded, cluster)
    assert nemesis.apply(FaultStep("clock-skew", ("n1",), offset_s=60)).type == "ok"
    assert nemesis.apply(FaultStep("clock-drift", ("n1", "n2"), rate_pct=50)).type == "ok"
    assert nemesis.apply(FaultStep("clock-drift", ("n3",))).type == "ok"
    n1_skewed, n1_slow = cluster.clocks["n1"]
    assert n1_slow.rate_pct == 50 and n1_slow.offset_s == pytest.approx(60, abs=1), "no jump"
    assert n1_slow.anchor_s >= n1_skewed.anchor_s
    assert cluster.clocks["n3"][-1].rate_pct == CLOCK_RATE_PCT and cluster.clocks["n3"][-1].offset_s == 0
    assert nemesis.apply(FaultStep("clock-skew", ("n2",), offset_s=-5)).type == "ok"
    assert cluster.clocks["n2"][-1].rate_pct == 50, "a jump keeps the drift"
    assert sorted(nemesis.active_faults()) == ["clock-drift n1,n2,n3", "clock-skew n1,n2"]
    healed = nemesis.heal_all()
    assert [op.f for op in healed if op.f.startswith("clock")] == [
        "clock-heal"
    ] and nemesis.active_faults() == []
    assert all(clocks[-1] == REAL_CLOCK for clocks in cluster.clocks.values())
    assert [(op.f, op.value) for op in ops if op.type == "ok" and op.f == "clock-drift"] == [
        ("clock-drift", {"nodes": ["n1", "n2"], "rate_pct": 50}),
        ("clock-drift", {"nodes": ["n3"], "rate_pct": CLOCK_RATE_PCT}),
    ]


def test_a_stopped_clock_is_a_rate_of_zero_not_the_default(recorded: tuple[Recorder, list[Op]]) -> None:
    cluster = FakeClockCluster()
    op = nemesis_on(recorded, cluster).apply(FaultStep("clock-drift", ("n1",), rate_pct=0))
    assert op.value["rate_pct"] == 0 and cluster.clocks["n1"][-1].rate_pct == 0


def test_a_schedule_draws_slow_and_fast_clocks_from_the_seed(recorded: tuple[Recorder, list[Op]]) -> None:
    spec = NemesisSpec(faults=("clock-drift", "kill"), seed=11)
    steps = [s for s in itertools.islice(schedule(spec, LAYOUT3, TOPIC), 80) if s.fault == "clock-drift"]
    drawn = [step.params["rate_pct"] for step in steps]
    assert set(drawn) <= set(CLOCK_RATES_DRAWN) and min(drawn) < 100 < max(drawn) and len(set(drawn)) >= 3
    again = [
        s.params for s in itertools.islice(schedule(spec, LAYOUT3, TOPIC), 80) if s.fault == "clock-drift"
    ]
    assert again == [step.params for step in steps]
    cluster = FakeClockCluster()
    op, _ = nemesis_on(recorded, cluster).execute_step(steps[0])
    assert op is not None and op.value["rate_pct"] == drawn[0]
    assert all(clocks[-1].rate_pct == drawn[0] for clocks in cluster.clocks.values())


@pytest.mark.parametrize(
    ("rate", "message"),
    [(100, "not 100"), (-1, "from 0"), (20_000, "to 10000"), (1.5, "whole"), ("x2", "whole")],
)
def test_a_scenario_rate_that_is_no_drift_is_refused_naming_the_step(rate: object, message: str) -> None:
    step = {"fault": "clock-drift", "node": "n1", "rate_pct": rate}
    with pytest.raises(ScenarioError, match=rf"x\.toml.*step 1.*rate_pct.*{message}"):
        parse_scenario({"name": "x", "step": [step]}, "x.toml")


def test_a_scenario_step_names_its_rate_and_shrink_replays_it() -> None:
    parse_scenario({"name": "x", "step": [{"fault": "clock-drift", "node": "n1", "rate_pct": 25}]}, "x")
    with pytest.raises(ScenarioError, match="rate_pct is for clock-drift only, not clock-skew"):
        parse_scenario({"name": "x", "step": [{"fault": "clock-skew", "node": "n1", "rate_pct": 25}]}, "x")
    value = {"nodes": ["n1"], "target": "one", "rate_pct": 0}
    ops = [
        Op(0, 10 * 10**9, NEMESIS_PROCESS, "invoke", "clock-drift", value),
        Op(1, 10 * 10**9 + 1, NEMESIS_PROCESS, "ok", "clock-drift", value),
    ]
    assert timeline_steps(ops)[-1] == {"fault": "clock-drift", "node": "n1", "rate_pct": 0}
