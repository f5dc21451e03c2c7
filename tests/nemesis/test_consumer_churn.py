"""Consumer churn on the nemesis side: the pure plan, the ability check, the op, the schedule.

No container and no broker: the plan is seeded data, the workload is a fake with the
:class:`nemesis.consumer_churn.ConsumerChurn` ability, the cluster the fake of
``test_mechanism``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from nemesis.churn_plan import ChurnPlan, plan_churn
from nemesis.consumer_churn import ConsumerChurn, check_churn, run_churn
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.plan import Layout, PlanError, schedule
from nemesis.spec import CONSUMER_CHURN, NEMESIS_CHOICES, NemesisSpec, parse_name_list
from testbed.record.ops import Op
from testbed.record.recorder import Recorder

from .test_mechanism import FakeCluster, run_schedule_briefly

LAYOUT = Layout(("n1", "n2", "n3"), "c")


class FakeWorkload:
    """A workload with the churn ability; what each churn returns or raises is scripted."""

    def __init__(self, unavailable: str | None = None) -> None:
        self.unavailable = unavailable
        self.calls: list[tuple[str, int]] = []
        self.answer: Mapping[str, Any] | BaseException = {
            "stop": "ignored", "stopped": {"process": 7, "consumer": 1}, "started": {"process": 20},
        }  # fmt: skip

    def churn_unavailable(self) -> str | None:
        return self.unavailable

    def churn_consumer(self, stop: str, pick: int) -> Mapping[str, Any]:
        self.calls.append((stop, pick))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


# ---- the plan ---------------------------------------------------------------------------------


def test_the_plan_is_seeded_and_leaves_or_stalls_about_half_the_time_each() -> None:
    first = [plan_churn(random.Random(seed)) for seed in range(400)]
    assert first == [plan_churn(random.Random(seed)) for seed in range(400)]
    stalls = sum(plan.stop == "stall" for plan in first)
    assert 150 < stalls < 250
    assert {plan.stop for plan in first} == {"leave", "stall"}
    assert len({plan.pick for plan in first}) > 390  # the victim draw varies


def test_the_schedule_draws_churn_steps_that_heal_themselves() -> None:
    spec = NemesisSpec(faults=(CONSUMER_CHURN,), interval_seconds=5, seed=3)
    steps = [step for step, _ in zip(schedule(spec, LAYOUT), range(6), strict=False)]
    assert all(step.fault == CONSUMER_CHURN and step.churn is not None for step in steps)
    assert all(step.heal_at_seconds == step.at_seconds and step.target == step.churn.stop for step in steps)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="heals itself"):
        _ = steps[0].heal_f
    again = [step for step, _ in zip(schedule(spec, LAYOUT), range(6), strict=False)]
    assert again == steps


def test_churn_mixes_with_broker_faults() -> None:
    spec = NemesisSpec(faults=("kill", CONSUMER_CHURN), interval_seconds=1, seed=5)
    steps = schedule(spec, LAYOUT, [("queue", 0)])
    kinds = {step.fault for step, _ in zip(steps, range(30), strict=False)}
    assert kinds == {"kill", CONSUMER_CHURN}


def test_consumer_churn_is_a_nemesis_choice() -> None:
    assert CONSUMER_CHURN in NEMESIS_CHOICES
    assert parse_name_list("kill,consumer-churn", NEMESIS_CHOICES, "--nemesis") == ("kill", CONSUMER_CHURN)


# ---- the ability -----------------------------------------------------------------------------


def test_the_check_names_the_flag_when_the_workload_cannot_churn() -> None:
    assert check_churn(("kill",), None) is None  # not asked for: nothing needed
    with pytest.raises(PlanError, match="--consume-via subscribe"):
        check_churn((CONSUMER_CHURN,), None)
    with pytest.raises(PlanError, match="--consume-via subscribe"):
        check_churn((CONSUMER_CHURN,), object())
    refusing = FakeWorkload("consumer churn needs a consumer group: run with --consume-via subscribe")
    with pytest.raises(PlanError, match="--nemesis consumer-churn: consumer churn needs a consumer group"):
        check_churn((CONSUMER_CHURN,), refusing)
    able = FakeWorkload()
    assert isinstance(able, ConsumerChurn)
    assert check_churn((CONSUMER_CHURN,), able) is able


def test_the_nemesis_refuses_churn_at_construction_without_the_ability(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    spec = NemesisSpec(faults=(CONSUMER_CHURN,))
    with pytest.raises(PlanError, match="--consume-via subscribe"):
        Nemesis(spec, FakeCluster(), recorded[0])
    with pytest.raises(PlanError, match="--consume-via subscribe"):
        Nemesis(
            spec,
            FakeCluster(),
            recorded[0],
            NemesisConfig(workload=FakeWorkload("run with --consume-via subscribe")),
        )
    assert Nemesis(spec, FakeCluster(), recorded[0], NemesisConfig(workload=FakeWorkload())).churn is not None


# ---- the op ----------------------------------------------------------------------------------


def outcome(ops: list[Op]) -> tuple[str, Any, str | None]:
    invoke, completion = ops[-2:]
    assert (invoke.type, invoke.f, invoke.process) == ("invoke", CONSUMER_CHURN, "nemesis")
    assert invoke.value == {"stop": "stall", "pick": 12}
    return completion.type, completion.value, completion.error


def test_a_churn_that_happened_is_ok_with_what_was_stopped_and_started(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    workload = FakeWorkload()
    run_churn(recorded[0], workload, ChurnPlan("stall", 12))
    assert workload.calls == [("stall", 12)]
    assert outcome(recorded[1]) == (
        "ok",
        {"stop": "stall", "pick": 12, "stopped": {"process": 7, "consumer": 1}, "started": {"process": 20}},
        None,
    )


def test_a_churn_not_seen_to_happen_is_info(recorded: tuple[Recorder, list[Op]]) -> None:
    workload = FakeWorkload()
    workload.answer = {"stopped": {"process": 7}, "started": {"process": 20}, "error": "did not stop in time"}
    run_churn(recorded[0], workload, ChurnPlan("stall", 12))
    kind, value, error = outcome(recorded[1])
    assert (kind, error) == ("info", "did not stop in time") and "error" not in value
    workload.answer = RuntimeError("client library bug")
    run_churn(recorded[0], workload, ChurnPlan("stall", 12))
    assert outcome(recorded[1])[0::2] == ("info", "RuntimeError: client library bug")


def test_a_churn_that_did_nothing_fails(recorded: tuple[Recorder, list[Op]]) -> None:
    workload = FakeWorkload()
    workload.answer = LookupError("no consumer of the group is running")
    run_churn(recorded[0], workload, ChurnPlan("stall", 12))
    assert outcome(recorded[1]) == (
        "fail",
        {"stop": "stall", "pick": 12},
        "no consumer of the group is running",
    )


# ---- the schedule carries it out -----------------------------------------------------------------


def test_the_running_schedule_churns_through_the_workload_and_heal_all_has_nothing_to_undo(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    workload = FakeWorkload()
    spec = NemesisSpec(faults=(CONSUMER_CHURN,), interval_seconds=0.02, seed=9)
    cluster = FakeCluster()
    nemesis = Nemesis(spec, cluster, recorded[0], NemesisConfig(workload=workload))
    run_schedule_briefly(nemesis, recorded[1], 6)
    planned = [step.churn for step, _ in zip(nemesis.plan(), range(3), strict=False)]
    assert workload.calls[:3] == [(plan.stop, plan.pick) for plan in planned if plan is not None]
    assert {op.f for op in recorded[1]} == {CONSUMER_CHURN}
    assert nemesis.heal_all() == [] and cluster.calls() == 0  # no node was touched
