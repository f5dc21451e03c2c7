"""``--target nisshi`` end to end in Docker, on both of its storage engines:

* on **PostgreSQL** (2 brokers sharing the ``pg`` node): kills and partitions of every node with
  consumers in a group committing offsets, idempotent confluent-kafka producers, PostgreSQL's
  defaults -- nothing acknowledged is lost, divergence is not applicable (one replica), and the
  group's commits are checked;
* on **SQLite** (one broker, its file on the lazy filesystem): a power loss loses acknowledged
  writes -- nisshi's ``synchronous = normal`` (``nemesis/scenarios/nisshi-sqlite-power-loss.toml``),
  reported and expected under ``nisshi.storage=sqlite + power-loss`` -- while a kill of the same
  broker at the same point loses nothing;
* the idempotent-producer loss tansu had (``nisshi-idempotent-retry``) is not run here:
  it depends on a race; ``test_idempotent_retry_on_postgresql.py`` pins it deterministically.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from checker.definitions import INVARIANT_CHECKS
from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import library, load_scenario, parse_scenario
from nemesis.spec import NemesisSpec
from testbed.record.history import read_history
from workloads.queue import QueueSpec

pytestmark = [pytest.mark.docker, pytest.mark.third_party, pytest.mark.slow]

NISSHI_SCENARIOS = sorted(name for name in library() if load_scenario(name).target == "nisshi")


def test_the_library_has_the_nisshi_scenarios_named_here() -> None:
    assert NISSHI_SCENARIOS == ["nisshi-idempotent-retry", "nisshi-sqlite-power-loss"]


def test_on_postgresql_faults_of_every_node_lose_nothing_and_the_group_commits_hold(
    nisshi_image: str, tmp_path: Path
) -> None:
    spec = TestSpec(
        name="nisshi-pg",
        target="nisshi",
        node_count=2,
        time_limit=25,
        seed=7,
        workload=QueueSpec(
            partitions=2,
            replication_factor=1,
            producers=2,
            consumers=2,
            rate=100.0,
            client="confluent-kafka",
            consume_via="subscribe",
            commit="sync",
        ),
        nemesis=NemesisSpec(faults=("kill", "partition"), interval_seconds=5.0, seed=7),
    )
    outcome = run_test(spec, tmp_path / "store")
    results = outcome.results
    assert results is not None, outcome.problems
    assert results["valid"] is True, json.dumps({k: results[k] for k in ("anomalies", "incomplete")})[:3000]
    assert {"replica-divergence", "divergent-tail", *INVARIANT_CHECKS} <= set(results["not_applicable"])
    ops, _ = read_history(outcome.run_dir / "history.jsonl")
    faults = {op.f for op in ops if op.process == "nemesis" and op.type == "ok"}
    assert {"kill", "partition"} & faults, faults
    assert any(op.f == "commit" and op.type == "ok" for op in ops), "the group committed nothing"
    assert results["stats"]["replicas"]["records"]["pg"] >= results["stats"]["drain_records"] > 0
    assert (outcome.run_dir / "nodes" / "n1" / "nisshi.log").exists()


def _sqlite_scenario(fault: str) -> Any:
    """The library's SQLite power-loss scenario, or the same script with a kill instead (which
    must lose nothing: the WAL outlives the process)."""
    scenario = load_scenario("nisshi-sqlite-power-loss")
    if fault == "power-loss":
        return scenario
    text = Path(scenario.source).read_text(encoding="utf-8")
    text = text.replace('fault = "power-loss"', 'fault = "kill"')
    text = text.replace(
        'valid = false\nanomalies = ["lost-write"]',
        'valid = "nothing-unexpected"\nabsent = ["lost-write", "lost-read", "inconsistent-offsets"]',
    )
    return parse_scenario({**tomllib.loads(text), "name": "nisshi-sqlite-kill"}, "nisshi-sqlite-kill")


@pytest.mark.parametrize("fault", ["power-loss", "kill"])
def test_on_sqlite_a_power_loss_loses_acknowledged_writes_and_a_kill_nothing(
    nisshi_image: str, tmp_path: Path, fault: str
) -> None:
    scenario = _sqlite_scenario(fault)
    spec = TestSpec(name=scenario.name).with_scenario(scenario)
    assert (spec.target, spec.settings) == ("nisshi", {"nisshi.storage": "sqlite"})
    outcome = run_test(spec, tmp_path / "store")
    results = outcome.results
    assert results is not None, outcome.problems
    assert spec.scenario_problems(results) == [], json.dumps(results["anomalies"])[:3000]
    ops, _ = read_history(outcome.run_dir / "history.jsonl")
    assert any(op.f == fault and op.type == "ok" and op.value["nodes"] == ["n1"] for op in ops)
    if fault == "power-loss":
        lost = results["anomalies"]["lost-write"]
        assert lost["expected"] is True and lost["rule"] == "nisshi.storage=sqlite + power-loss"
        assert results["expected_only"] is True
    else:
        assert results["valid"] is True, json.dumps(results["anomalies"])[:3000]
    assert results["stats"]["replicas"]["records"]["n1"] >= results["stats"]["drain_records"] > 0
