"""A subscribed consumer group through coordinator loss and churn, end to end in Docker (issue 17).

The bundled ``group-churn-partitions`` scenario on three brokers in containers: six partitions,
three group members that ``subscribe()`` and commit synchronously; the coordinator's broker is
cut off from every node (the controller too), a member leaves and one stalls while the group
moves to a new coordinator, and after the heal a third is replaced. With the default (safe)
settings nothing may be lost, skipped, re-delivered below a commit or committed backwards: the
run is valid -- and it really exercised the group (rebalances into new generations, commits,
three churns, newcomers that got partitions), for both client libraries.

The run is a ``tidemark run`` child process with a deadline rather than a call in this process:
a client library that hangs while holding the GIL (librdkafka #4041, seen here) would otherwise
freeze the test runner itself; here it is a failure naming the deadline, and the dead run's
containers are removed by label.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import docker
import pytest

from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario
from testbed.record.history import read_history
from tests.workloads.cli_child import finish, start_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCENARIO = "group-churn-partitions"
DEADLINE_SECONDS = 420
"""A run takes 35-70 s; one still going after this hangs."""


def run_cli(store: Path, client: str) -> Path:
    """``tidemark run --scenario SCENARIO --client CLIENT`` as a child process; its run directory."""
    child = start_cli("run", "--scenario", SCENARIO, "--client", client, "--store", str(store))
    output = finish(child, f"tidemark run --client {client}", DEADLINE_SECONDS)
    runs = sorted(path.parent for path in store.glob("*/*/results.json"))
    assert runs, output[-3000:]
    return runs[-1]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_group_through_coordinator_loss_and_churn_is_valid(
    image: str, docker_client: docker.DockerClient, tmp_path: Path, client: str
) -> None:
    run_dir = run_cli(tmp_path / "store", client)
    test = json.loads((run_dir / "test.json").read_text())
    assert test["workload"]["client"] == client and test["workload"]["consume_via"] == "subscribe"
    results = json.loads((run_dir / "results.json").read_text())
    problems = json.loads((run_dir / "run.json").read_text()).get("problems")
    assert not problems, problems
    assert results["valid"] is True, json.dumps(results["anomalies"], indent=1)[:3000]
    spec = TestSpec.from_dict(test)
    assert spec.scenario_problems(results) == []
    assert load_scenario(SCENARIO).name == test["scenario"]
    ops, skipped = read_history(run_dir / "history.jsonl")
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
