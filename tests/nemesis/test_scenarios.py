"""Every bundled scenario, end to end in Docker, in the mode that shows the bug and the
mode that does not (issue 5): the expected verdict written in the scenario must hold.

``tidemark run --scenario`` is exercised through :func:`harness.run.runner.run_test` with
the scenario's own set-up, exactly as the CLI does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import library, load_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RUN_ELSEWHERE = frozenset(
    {
        "liveness-unannounced-pause",
        "group-churn-partitions",
        "clock-jumps",
        "clock-drift",
        "txn-coordinator-and-leader-crash",
        "group-member-crash",
    }
)
"""Run elsewhere with the same expectation and more: the liveness scenario with its twin by
``tests/nemesis/test_liveness_scenario.py``, the group scenario with both client libraries by
``tests/workloads/test_consumer_groups_docker.py``, the clock scenarios with their event logs by
``tests/testbed/cluster/test_fake_clock_docker.py``, the transactional crash scenario at both
isolation levels by ``tests/nemesis/test_txn_crash_scenario.py``, the client-crash scenario with its
history read by ``tests/workloads/test_client_crash_docker.py``.  Scenarios of another target
(``target = "tansu"``) are run by ``tests/testbed/cluster/test_tansu_docker.py``."""
NOT_YET_RELIABLE: frozenset[str] = frozenset()
"""Scenarios whose buggy setting shows its anomaly in too few runs to be a test yet (the file's
description gives the measured rate and why)."""
CASES = [
    (name, dict(expectation.when))
    for name in sorted(library())
    if name not in RUN_ELSEWHERE | NOT_YET_RELIABLE and load_scenario(name).target in (None, "bundled")
    for expectation in load_scenario(name).expected
]
"""Every bundled scenario under every setting its expectations name (the buggy and the fixed)."""


def case_id(name: str, settings: dict[str, str]) -> str:
    return "-".join([name, *(f"{key}={value}" for key, value in settings.items())])


@pytest.mark.parametrize(("name", "settings"), CASES, ids=[case_id(n, s) for n, s in CASES])
def test_scenario_verdict_matches_its_expectation(
    image: str, tmp_path: Path, name: str, settings: dict[str, str]
) -> None:
    scenario = load_scenario(name)
    spec = TestSpec(name=name, settings=settings).with_scenario(scenario)
    assert scenario.expectation_for(spec.effective_settings()) is not None, f"{name}: none for {settings}"
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert not [p for p in outcome.problems if p.startswith("main phase")], outcome.problems
    problems = spec.scenario_problems(outcome.results)
    assert problems == [], (problems, json.dumps(outcome.results["anomalies"], indent=1)[:3000])
