"""Client crashes on the nemesis side: the seeded plan, the ability check, the op, the schedule,
the package and the shrinker.

No container and no broker: the workload is a fake with the
:class:`nemesis.client_crash.ClientCrash` ability, the cluster the fake of ``test_mechanism``.
The workload's side (real client processes killed mid-call) is ``tests/workloads/test_client_host.py``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from harness.cli.errors import UsageError
from harness.run.spec import TestSpec
from nemesis.client_crash import ClientCrash, check_crash, run_crash
from nemesis.client_crash_plan import (
    CLIENT_CRASH_LEADER_CRASH,
    CONSUMER_CRASH_COORDINATOR_CRASH,
    CRASH_PICKS,
    client_crash_leader_crash,
    consumer_crash_coordinator_crash,
)
from nemesis.fault_kinds import CLIENT_CRASH, CONSUMER_CRASH, REGISTRY
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.package_context import PackageContext, PackageError
from nemesis.plan import Layout, PlanError, schedule
from nemesis.scenario import ScenarioError, parse_scenario
from nemesis.shrink import Step, fault_count, shrink, timeline_steps, units_of
from nemesis.spec import NEMESIS_CHOICES, PACKAGE_FAULTS, NemesisSpec
from nemesis.steps import FaultStep
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.harness.cli.commands import spec_of

from .test_mechanism import FakeCluster, run_schedule_briefly

LAYOUT = Layout(("n1", "n2", "n3"), "c")
KILLED = {"process": 9, "pid": 4242, "client": "txn-producer", "in_flight": "commit", "interrupted": True}


class FakeWorkload:
    """A workload with the crash ability; what each crash returns or raises is scripted."""

    def __init__(self, unavailable: str | None = None, consumers: str | None = None) -> None:
        self.unavailable = unavailable
        self.consumers_unavailable = consumers
        """Why consumers cannot crash (None: as producers)."""
        self.picks: list[int] = []
        self.roles: list[str] = []
        self.answer: Mapping[str, Any] | BaseException = dict(KILLED)

    def crash_unavailable(self, role: str = "producer") -> str | None:
        if role == "consumer" and self.consumers_unavailable is not None:
            return self.consumers_unavailable
        return self.unavailable

    def crash_client(self, pick: int, role: str = "producer") -> Mapping[str, Any]:
        self.picks.append(pick)
        self.roles.append(role)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


# ---- the plan -----------------------------------------------------------------------------------


def test_the_schedule_draws_seeded_victims_and_nothing_to_heal() -> None:
    spec = NemesisSpec(faults=(CLIENT_CRASH,), interval_seconds=5, seed=3)
    steps = [step for step, _ in zip(schedule(spec, LAYOUT), range(200), strict=False)]
    again = [step for step, _ in zip(schedule(spec, LAYOUT), range(200), strict=False)]
    assert steps == again
    assert {step.fault for step in steps} == {CLIENT_CRASH}
    assert all(step.heal_at_seconds == step.at_seconds and not step.nodes for step in steps)
    picks = [step.params["pick"] for step in steps]
    assert set(picks) <= set(CRASH_PICKS) and len(set(picks)) > 40
    with pytest.raises(ValueError, match="heals itself"):
        _ = steps[0].heal_f


def test_client_crash_is_a_nemesis_choice_with_no_heal_and_a_colour_of_its_own() -> None:
    for fault in (CLIENT_CRASH, CONSUMER_CRASH):
        kind = REGISTRY[fault]
        assert fault in NEMESIS_CHOICES and kind.heal_name is None and kind.drawn_as == "workload"
        assert kind.colour != "#6e7781" and kind.takes("pick") and not kind.takes("stop")
    assert REGISTRY[CLIENT_CRASH].colour != REGISTRY[CONSUMER_CRASH].colour


def test_the_schedule_draws_consumer_crashes_beside_producer_crashes() -> None:
    spec = NemesisSpec(faults=(CLIENT_CRASH, CONSUMER_CRASH), interval_seconds=5, seed=3)
    steps = [step for step, _ in zip(schedule(spec, LAYOUT), range(100), strict=False)]
    assert {step.fault for step in steps} == {CLIENT_CRASH, CONSUMER_CRASH}
    assert all(step.params["pick"] in CRASH_PICKS and not step.nodes for step in steps)


# ---- the ability --------------------------------------------------------------------------------


def test_the_check_and_the_nemesis_name_the_flag_when_the_workload_cannot_crash_clients(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    with pytest.raises(PlanError, match="--client-processes"):
        check_crash((CLIENT_CRASH,), object())
    with pytest.raises(PlanError, match="--nemesis client-crash: run with --client-processes"):
        check_crash((CLIENT_CRASH,), FakeWorkload("run with --client-processes"))
    check_crash(("kill",), object())  # no crash asked for: nothing needed
    only_producers = FakeWorkload(consumers="this run has no consumer (--consumers 0)")
    check_crash((CLIENT_CRASH,), only_producers)
    with pytest.raises(PlanError, match="--nemesis consumer-crash: this run has no consumer"):
        check_crash((CLIENT_CRASH, CONSUMER_CRASH), only_producers)
    assert isinstance(FakeWorkload(), ClientCrash)
    spec = NemesisSpec(faults=(CLIENT_CRASH,))
    with pytest.raises(PlanError, match="--client-processes"):
        Nemesis(spec, FakeCluster(), recorded[0])
    Nemesis(spec, FakeCluster(), recorded[0], NemesisConfig(workload=FakeWorkload()))


# ---- the op -------------------------------------------------------------------------------------


def outcome(ops: list[Op]) -> tuple[str, Any, str | None]:
    invoke, completion = ops[-2:]
    assert (invoke.type, invoke.f, invoke.process, invoke.value) == (
        "invoke",
        CLIENT_CRASH,
        "nemesis",
        {"pick": 12},
    )
    return completion.type, completion.value, completion.error


def test_a_crash_is_ok_with_its_victim_info_when_unseen_and_fail_when_nothing_died(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    recorder, ops = recorded
    workload = FakeWorkload()
    run_crash(recorder, workload, 12)
    assert outcome(ops) == ("ok", {"pick": 12, "killed": KILLED}, None)
    workload.answer = {**KILLED, "error": "the thread did not see the crash"}
    run_crash(recorder, workload, 12)
    assert outcome(ops) == ("info", {"pick": 12, "killed": KILLED}, "the thread did not see the crash")
    workload.answer = RuntimeError("host bug")
    run_crash(recorder, workload, 12)
    assert outcome(ops)[0::2] == ("info", "RuntimeError: host bug")
    workload.answer = LookupError("no client process is running")
    run_crash(recorder, workload, 12)
    assert outcome(ops) == ("fail", {"pick": 12}, "no client process is running")
    run_crash(recorder, FakeWorkload("run with --client-processes"), 12)
    assert outcome(ops) == ("fail", {"pick": 12}, "run with --client-processes")
    assert workload.picks == [12, 12, 12, 12] and set(workload.roles) == {"producer"}


def test_a_consumer_crash_asks_the_workload_for_a_consumer_and_is_an_op_of_its_own(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    recorder, ops = recorded
    workload = FakeWorkload()
    run_crash(recorder, workload, 5, CONSUMER_CRASH)
    assert [(op.f, op.type) for op in ops[-2:]] == [(CONSUMER_CRASH, "invoke"), (CONSUMER_CRASH, "ok")]
    assert workload.roles == ["consumer"] and ops[-1].value == {"pick": 5, "killed": KILLED}
    run_crash(recorder, FakeWorkload(consumers="no consumer"), 5, CONSUMER_CRASH)
    assert (ops[-1].type, ops[-1].error) == ("fail", "no consumer")


def test_the_running_schedule_crashes_through_the_workload_and_heal_all_has_nothing_to_undo(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    workload = FakeWorkload()
    spec = NemesisSpec(faults=(CLIENT_CRASH,), interval_seconds=0.02, seed=9)
    cluster = FakeCluster()
    nemesis = Nemesis(spec, cluster, recorded[0], NemesisConfig(workload=workload))
    run_schedule_briefly(nemesis, recorded[1], 6)
    planned = [step.params["pick"] for step, _ in zip(nemesis.plan(), range(3), strict=False)]
    assert workload.picks[:3] == planned
    assert {op.f for op in recorded[1]} == {CLIENT_CRASH}
    assert nemesis.heal_all() == [] and cluster.calls() == 0  # no node was touched
    consumers = FakeWorkload()
    spec = NemesisSpec(faults=(CONSUMER_CRASH,), interval_seconds=0.02, seed=9)
    nemesis = Nemesis(spec, cluster, recorded[0], NemesisConfig(workload=consumers))
    run_schedule_briefly(nemesis, recorded[1], len(recorded[1]) + 4)
    assert consumers.roles and set(consumers.roles) == {"consumer"} and cluster.calls() == 0


def test_a_scenario_step_crashes_through_the_same_op(recorded: tuple[Recorder, list[Op]]) -> None:
    workload = FakeWorkload()
    nemesis = Nemesis(NemesisSpec(), FakeCluster(), recorded[0], NemesisConfig(workload=workload))
    completion = nemesis.apply(FaultStep(CLIENT_CRASH, pick=12))
    assert (completion.type, workload.picks) == ("ok", [12])
    completion = nemesis.apply(FaultStep(CONSUMER_CRASH, pick=3))
    assert (completion.f, completion.type, workload.roles) == (CONSUMER_CRASH, "ok", ["producer", "consumer"])
    parse_scenario({"name": "s", "step": [{"fault": CLIENT_CRASH, "pick": 3}]}, "s")
    with pytest.raises(ScenarioError, match="stop is for fault = 'consumer-churn' only"):
        parse_scenario({"name": "s", "step": [{"fault": CLIENT_CRASH, "stop": "leave"}]}, "s")


# ---- the package --------------------------------------------------------------------------------


def test_the_package_crashes_a_client_then_the_leader_and_restarts_it() -> None:
    context = PackageContext(("n1", "n2", "n3"), 3, 3, client_crash=True)
    seconds = set()
    for seed in range(40):
        steps = client_crash_leader_crash(random.Random(seed), context)
        faults = [step["fault"] for step in steps if "fault" in step]
        assert faults[:2] == [CLIENT_CRASH, "kill"] and faults[-1] == "start"
        assert set(faults) <= PACKAGE_FAULTS[CLIENT_CRASH_LEADER_CRASH] | {"start"}
        seconds.add(steps[2]["sleep"])
        parse_scenario({"name": CLIENT_CRASH_LEADER_CRASH, "step": steps}, "package")
    assert all(0.0 <= second <= 2.0 for second in seconds) and len(seconds) > 30


def test_the_coordinator_package_crashes_a_member_then_its_group_coordinator() -> None:
    context = PackageContext(("n1", "n2", "n3"), 3, 3, consumer_crash=True)
    seconds, second_crashes = set(), 0
    for seed in range(40):
        steps = consumer_crash_coordinator_crash(random.Random(seed), context)
        assert steps[0] == {"bind": {"G": "leader-of:offsets"}}
        faults = [step["fault"] for step in steps if "fault" in step]
        assert faults[:2] == [CONSUMER_CRASH, "kill"] and faults[-1] == "start"
        assert set(faults) <= PACKAGE_FAULTS[CONSUMER_CRASH_COORDINATOR_CRASH] | {"start"}
        assert {"wait": "leader-is-not", "node": "G", "partition": "offsets", "timeout": 30} in steps
        second_crashes += faults.count(CONSUMER_CRASH) == 2
        seconds.add(steps[2]["sleep"])
        parse_scenario({"name": CONSUMER_CRASH_COORDINATOR_CRASH, "step": steps}, "package")
    assert all(0.0 <= second <= 2.0 for second in seconds) and 10 < second_crashes < 30
    with pytest.raises(PackageError, match="group members in processes"):
        consumer_crash_coordinator_crash(
            random.Random(0), PackageContext(("n1", "n2", "n3"), 3, 3, client_crash=True)
        )
    with pytest.raises(PackageError, match="replication factor"):
        consumer_crash_coordinator_crash(random.Random(0), PackageContext(("n1",), 3, 1, consumer_crash=True))


# ---- the shrinker -------------------------------------------------------------------------------


@pytest.mark.parametrize("crash", [CLIENT_CRASH, CONSUMER_CRASH])
def test_a_crash_becomes_a_step_and_a_unit_of_its_own_the_shrinker_can_drop(crash: str) -> None:
    second = 1_000_000_000
    ops = []
    for at, f, value, kind in (
        (1, crash, {"pick": 7}, "ok"),
        (3, "kill", {"nodes": ["n1"]}, "ok"),
        (5, "start", {"nodes": ["n1"]}, "ok"),
        (7, crash, {"pick": 4}, "fail"),  # did nothing: left out
    ):
        ops += [
            Op(len(ops), at * second, NEMESIS_PROCESS, "invoke", f, value),
            Op(len(ops) + 1, at * second + second // 10, NEMESIS_PROCESS, kind, f, value),  # type: ignore[arg-type]
        ]
    steps = timeline_steps(ops)
    assert [step for step in steps if step.get("fault") == crash] == [{"fault": crash, "pick": 7}]
    labels = units_of(steps)
    crash_unit = labels[[step.get("fault") for step in steps].index(crash)]
    assert crash_unit is not None and fault_count(steps) == 2

    def reproduces(candidate: list[Step]) -> bool:
        return any(step.get("fault") == "kill" for step in candidate)

    result = shrink(steps, reproduces)
    assert [step.get("fault") for step in result.steps if "fault" in step] == ["kill", "start"]

    def needs_the_crash(candidate: list[Step]) -> bool:
        return any(step.get("fault") == crash for step in candidate)

    kept = shrink(steps, needs_the_crash)  # the crash alone reproduces: the kill goes, the crash stays
    assert [step for step in kept.steps if "fault" in step] == [{"fault": crash, "pick": 7}]


# ---- the run's spec -----------------------------------------------------------------------------


def test_a_run_that_may_crash_clients_hosts_them_in_processes_and_says_so_in_its_spec() -> None:
    assert spec_of().workload.client_processes is False
    assert spec_of("--client-processes").workload.client_processes is True
    for mix in (CLIENT_CRASH, f"kill,{CLIENT_CRASH_LEADER_CRASH}"):
        spec = spec_of("--nemesis", mix, "--txn")
        assert spec.workload.client_processes is True
        assert TestSpec.from_dict(spec.to_dict()).workload.client_processes is True
        context = spec.package_context()  # what the run's packages are checked against
        assert context is not None and context.client_crash is True
    context = spec_of("--nemesis", "kill").package_context()
    assert context is not None and context.client_crash is False and context.consumer_crash is False
    spec = spec_of("--nemesis", CONSUMER_CRASH_COORDINATOR_CRASH, "--consume-via", "subscribe")
    context = spec.package_context()
    assert spec.workload.client_processes is True and context is not None and context.consumer_crash is True
    context = spec_of("--nemesis", CONSUMER_CRASH).package_context()  # assign: no group to coordinate
    assert context is not None and context.consumer_crash is False
    with pytest.raises(UsageError, match="cannot host --txn-ctp"):
        spec_of("--client-processes", "--txn", "--txn-ctp")
