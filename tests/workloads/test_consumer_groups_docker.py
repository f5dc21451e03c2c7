"""A subscribed consumer group through coordinator loss and churn, end to end in Docker (issue 17).

The bundled ``group-churn-partitions`` scenario on three brokers in containers: six partitions,
three group members that ``subscribe()`` and commit synchronously; the coordinator's broker is
cut off from every node (the controller too), a member leaves and one stalls while the group
moves to a new coordinator, and after the heal a third is replaced. With the default (safe)
settings nothing may be lost, skipped, re-delivered below a commit or committed backwards: the
run is valid -- and it really exercised the group (rebalances into new generations, commits,
three churns, newcomers that got partitions), for both client libraries.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import docker
import pytest

from harness.record.history import read_history
from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario
from workloads.queue import QueueSpec

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCENARIO = "group-churn-partitions"


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_group_through_coordinator_loss_and_churn_is_valid(
    image: str, docker_client: docker.DockerClient, tmp_path: Path, client: str
) -> None:
    scenario = load_scenario(SCENARIO)
    spec = TestSpec(name=f"{SCENARIO}-{client}", workload=QueueSpec(client=client)).with_scenario(scenario)
    assert spec.workload.client == client and spec.workload.consume_via == "subscribe"
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.problems == []
    assert outcome.verdict is True, json.dumps(outcome.results["anomalies"], indent=1)[:3000]
    assert spec.scenario_problems(outcome.results) == []
    ops, skipped = read_history(outcome.run_dir / "history.jsonl")
    assert skipped == []
    done = Counter((op.f, op.type) for op in ops if op.type != "invoke")
    assert done[("commit", "ok")] > 50, done
    assert done[("consumer-churn", "ok")] == 3, done
    assigns = [op.value for op in ops if op.f == "assign" and op.type == "ok"]
    generations = {value["generation"] for value in assigns} - {None}
    assert len(generations) >= 2, f"no rebalance recorded: generations {generations}"
    newcomers = {op.value["started"]["process"] for op in ops if op.f == "consumer-churn" and op.type == "ok"}
    assigned = {op.process for op in ops if op.f == "assign" and op.type == "ok" and op.value["partitions"]}
    assert newcomers & assigned, "no newcomer of a churn was ever given partitions"
    containers = docker_client.containers.list(all=True, filters={"label": "tidemark"})
    assert containers == [], [c.name for c in containers]
