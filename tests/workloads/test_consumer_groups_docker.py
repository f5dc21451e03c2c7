"""A subscribed consumer group under broker faults and churn, end to end in Docker (issue 17).

Three brokers in containers, six partitions, three group members that ``subscribe()`` and
commit synchronously, with the random nemesis killing brokers, partitioning them and replacing
consumers (``consumer-churn``). In the default (safe) settings nothing may be lost, skipped,
re-delivered below a commit or committed backwards: the run is valid -- and it really exercised
the group (rebalances, commits through the faults, churn that happened), for both client
libraries.
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
from nemesis.spec import NemesisSpec
from workloads.queue import QueueSpec

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_group_under_kills_partitions_and_churn_is_valid(
    image: str, docker_client: docker.DockerClient, tmp_path: Path, client: str
) -> None:
    spec = TestSpec(
        name=f"groups-{client}",
        time_limit=40,
        seed=17,
        settings={"min.insync.replicas": "2"},
        workload=QueueSpec(
            partitions=6,
            replication_factor=3,
            consumers=3,
            rate=100,
            client=client,
            consume_via="subscribe",
            commit="sync",
        ),
        nemesis=NemesisSpec(faults=("kill", "partition", "consumer-churn"), interval_seconds=6, seed=17),
    )
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.problems == []
    assert outcome.verdict is True, json.dumps(outcome.results["anomalies"], indent=1)[:3000]
    ops, skipped = read_history(outcome.run_dir / "history.jsonl")
    assert skipped == []
    done = Counter((op.f, op.type) for op in ops if op.type != "invoke")
    assert done[("commit", "ok")] > 50, done
    assert done[("consumer-churn", "ok")] >= 1, done
    assert done[("kill", "ok")] + done[("partition", "ok")] >= 1, done
    generations = {op.value["generation"] for op in ops if op.f == "assign" and op.type == "ok"}
    assert len(generations - {None}) >= 2, f"no rebalance seen: generations {generations}"
    members_assigned = {op.value["member_id"] for op in ops if op.f == "assign" and op.type == "ok"}
    assert len(members_assigned) >= 4, "churn brought in no new member"
    containers = docker_client.containers.list(all=True, filters={"label": "tidemark"})
    assert containers == [], [c.name for c in containers]
