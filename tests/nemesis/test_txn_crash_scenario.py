"""Transactions through a partition leader's and the transaction coordinator's crash, in Docker,
at both isolation levels (``nemesis/scenarios/txn-coordinator-and-leader-crash.toml``).

librdkafka's transactional producers against the bundled broker; the leader of partition 0 is
killed and restarted, then the coordinator of the first producer's transactional id (the
scenario's ``leader-of:transactions``).  Under ``read_committed`` the checker must find every
committed value read once and no aborted one read: nothing but Kafka's allowed warnings.  Under
``read_uncommitted`` the same run must show the consumers reading aborted values -- G1a, which
the isolation level permits -- and nothing else: the aborted values are read *only* there.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "txn-coordinator-and-leader-crash"


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_committed_values_once_and_aborted_ones_only_under_read_uncommitted(
    image: str, tmp_path: Path, isolation: str
) -> None:
    base = TestSpec(name=NAME)
    spec = dataclasses.replace(base, workload=dataclasses.replace(base.workload, isolation=isolation))
    spec = spec.with_scenario(load_scenario(NAME))
    assert spec.workload.isolation == isolation and spec.workload.txn
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert not [p for p in outcome.problems if p.startswith("main phase")], outcome.problems
    anomalies = outcome.results["anomalies"]
    shown = json.dumps(anomalies, indent=1)[:3000]
    assert spec.scenario_problems(outcome.results) == [], shown
    errors = {name for name, anomaly in anomalies.items() if anomaly.get("severity") != "warning"}
    if isolation == "read_committed":
        assert errors == set() and outcome.results["valid"] is True, shown
    else:
        assert errors == {"G1a"}, shown  # an aborted value read: the workload aborts 30 %
        assert anomalies["G1a"]["expected"] and anomalies["G1a"]["rule"] == "isolation=read_uncommitted"
