"""Scenario steps about the workload's consumer group and transactions: the ``offsets`` and
``transactions`` partitions, and churn steps.

Fakes only (the cluster's answers and the nemesis are recorded, not acted on); the Docker
scenarios that use these steps are run by ``tests/nemesis/test_scenarios.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

import nemesis.scenario_run as scenario_run_module
from nemesis.scenario import ScenarioError, ScenarioFailed, parse_role, parse_scenario
from nemesis.scenario_run import ScenarioContext, ScenarioRun
from nemesis.steps import FaultStep
from testbed.cluster.kafka_admin import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, PartitionInfo
from workloads.txn import transactional_id

SOURCE = "groups.toml"
WORKLOAD_TOPIC = PartitionInfo(0, 1, 1, (1, 2, 3), (1, 2, 3))
"""Partition 0 of the workload's topic: led by broker 1."""
OFFSETS = PartitionInfo(7, 3, 4, (3, 2, 1), (3, 2))
"""The group's partition of __consumer_offsets: led by broker 3, broker 1 out of the ISR."""
TRANSACTIONS = PartitionInfo(11, 2, 5, (2, 3, 1), (2, 3, 1))
"""The first producer's partition of __transaction_state: led by broker 2 (its coordinator)."""


class FakeCluster:
    bootstrap = "fake:9092"
    brokers = ["n1", "n2", "n3"]
    controller = None
    node_ids = {"n1": 1, "n2": 2, "n3": 3}

    def node_of(self, broker_id: int) -> str | None:
        return {1: "n1", 2: "n2", 3: "n3"}.get(broker_id)


class FakeNemesis:
    """Records each fault step it is asked to apply: its kind and its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def apply(self, step: FaultStep) -> None:
        arguments = (step.stop, step.pick) if step.fault == "consumer-churn" else (list(step.nodes),)
        self.calls.append((step.fault, arguments))


def steps_data(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": "groups", "step": list(steps)}


def run(
    steps: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    group: str | None = "tidemark-g",
    transactional: str | None = None,
) -> tuple[FakeNemesis, list[tuple[str, int]]]:
    """Run ``steps`` on fakes; the nemesis calls, and every (topic, partition) a wait or role asked about."""
    asked: list[tuple[str, int]] = []
    answers = {OFFSETS_TOPIC: OFFSETS, TRANSACTION_STATE_TOPIC: TRANSACTIONS}

    def partition_info(bootstrap: str, topic: str, partition: int) -> PartitionInfo:
        asked.append((topic, partition))
        return answers.get(topic, WORKLOAD_TOPIC)

    monkeypatch.setattr(scenario_run_module, "_partition_info", partition_info)
    monkeypatch.setattr(
        scenario_run_module,
        "group_offsets_partition",
        lambda bootstrap, name: 7 if name == "tidemark-g" else None,
    )
    monkeypatch.setattr(
        scenario_run_module,
        "transaction_state_partition",
        lambda bootstrap, name: 11 if name == transactional_id("queue", 0) else None,
    )
    nemesis = FakeNemesis()
    context = ScenarioContext(
        FakeCluster(),  # type: ignore[arg-type]
        nemesis,
        None,  # type: ignore[arg-type]
        "queue",
        lambda line: None,
        group=group,
        transactional_id=transactional,
    )
    ScenarioRun(parse_scenario(steps_data(*steps), SOURCE), context).run()
    return nemesis, asked


def test_offsets_names_the_groups_partition_of_consumer_offsets_in_roles_and_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nemesis, asked = run(
        [
            {"bind": {"C": "leader-of:offsets", "F": "follower-of:offsets", "W": "leader-of:0"}},
            {"fault": "kill", "node": "C"},
            {"fault": "kill", "node": "follower-of:offsets#2"},
            {"wait": "leader-is", "node": "C", "partition": "offsets"},
            {"wait": "not-in-isr", "node": "n1", "partition": "offsets"},
            {"wait": "in-isr", "node": "n1"},
        ],
        monkeypatch,
    )
    assert nemesis.calls == [("kill", (["n3"],)), ("kill", (["n1"],))]
    assert set(asked) == {(OFFSETS_TOPIC, 7), ("queue", 0)}
    assert asked[-1] == ("queue", 0)  # a step without partition means the workload topic's 0


def test_offsets_without_a_consumer_group_fails_the_step_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(
        ScenarioFailed, match=r"step 1: partition 'offsets' .* no group \(--consume-via subscribe\)"
    ):
        run([{"bind": {"C": "leader-of:offsets"}}], monkeypatch, group=None)


def test_the_offsets_topic_is_waited_for_and_its_absence_times_out_naming_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scenario_run_module, "wait_until", _timing_out)
    with pytest.raises(ScenarioFailed, match=r"__consumer_offsets to exist .*group tidemark-other"):
        run([{"wait": "caught-up", "partition": "offsets"}], monkeypatch, group="tidemark-other")


def _timing_out(condition: Any, timeout: float, what: str, poll: float = 0.1) -> Any:
    if condition():
        return condition()
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def test_a_churn_step_asks_the_nemesis_with_its_stop_and_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    nemesis, _ = run(
        [
            {"fault": "consumer-churn"},
            {"fault": "consumer-churn", "stop": "stall", "pick": 2},
        ],
        monkeypatch,
    )
    assert nemesis.calls == [("consumer-churn", ("leave", 0)), ("consumer-churn", ("stall", 2))]


def test_a_refused_churn_fails_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing(FakeNemesis):
        def apply(self, step: FaultStep) -> None:
            raise ValueError("--nemesis consumer-churn needs the workload's consumer group")

    context = ScenarioContext(FakeCluster(), Refusing(), None, "queue", lambda line: None)  # type: ignore[arg-type]
    with pytest.raises(ScenarioFailed, match=f"{SOURCE}: step 1: --nemesis consumer-churn needs"):
        ScenarioRun(parse_scenario(steps_data({"fault": "consumer-churn"}), SOURCE), context).run()


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"fault": "consumer-churn", "stop": "vanish"}, "stop must be one of leave, stall, not 'vanish'"),
        ({"fault": "consumer-churn", "pick": -1}, "pick must be a whole number >= 0, not -1"),
        ({"fault": "consumer-churn", "pick": "first"}, "pick must be a whole number >= 0, not 'first'"),
        (
            {"fault": "kill", "node": "n1", "stop": "leave"},
            "stop is for fault = 'consumer-churn' only",
        ),
        (
            {"wait": "caught-up", "partition": "offset"},
            "partition must be a partition number >= 0 or 'offsets' or 'transactions'",
        ),
        (
            {"wait": "caught-up", "partition": -2},
            "partition must be a partition number >= 0 or 'offsets' or 'transactions', not -2",
        ),
        (
            {"produce": "marker", "partition": "offsets"},
            "partition must be a partition number >= 0, not 'offsets'",
        ),
    ],
)
def test_bad_group_steps_are_refused_when_the_file_is_read(step: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(steps_data(step), SOURCE)
    assert str(raised.value).startswith(f"{SOURCE}: step 1: {message}"), raised.value


def test_offsets_roles_parse_with_a_follower_number() -> None:
    role = parse_role("follower-of:offsets#2")
    assert (role.kind, role.partition, role.index) == ("follower-of", "offsets", 2)
    assert parse_role("leader-of:offsets").partition == "offsets"
    assert parse_role("leader-of:3").partition == 3


def test_transactions_names_the_first_producers_partition_of_transaction_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = [
        {"bind": {"C": "leader-of:transactions", "L": "leader-of:0"}},
        {"fault": "kill", "nodes": ["C", "L"]},
        {"wait": "leader-is", "node": "C", "partition": "transactions"},
    ]
    nemesis, asked = run(steps, monkeypatch, transactional=transactional_id("queue", 0))
    assert nemesis.calls == [("kill", (["n2", "n1"],))]
    assert (TRANSACTION_STATE_TOPIC, 11) in asked and ("queue", 0) in asked


def test_transactions_without_transactions_fails_the_step_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(
        ScenarioFailed, match=r"step 1: partition 'transactions' .* no transactions \(--txn\)"
    ):
        run([{"bind": {"C": "leader-of:transactions"}}], monkeypatch)
