"""The liveness scenario end to end in Docker: an unannounced 14 s pause of every broker is
reported ``stalled``; its twin without the unannounced steps (the same announced pause, the same
14 s of time) is not.

The twin is the scenario with its ``announce = false`` steps left out, so the two runs differ in
exactly the planted stall (``nemesis/scenarios/liveness-unannounced-pause.toml``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.definitions import STALLED
from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import Scenario, load_scenario, parse_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "liveness-unannounced-pause"


def twin(scenario: Scenario) -> Scenario:
    """``scenario`` without its unannounced steps (its expectation: no stall)."""
    steps = [step for step in scenario.definition["step"] if step.get("announce", True) is not False]
    assert len(steps) == len(scenario.steps) - 2, "the pause and the resume"
    expected = [{"valid": True, "absent": [STALLED]}]
    return parse_scenario(
        {**scenario.definition, "name": f"{NAME}-twin", "step": steps, "expected": expected}, NAME
    )


def test_an_unannounced_pause_stalls_and_its_twin_does_not(image: str, tmp_path: Path) -> None:
    scenario = load_scenario(NAME)
    for planted in (scenario, twin(scenario)):
        spec = TestSpec(name=planted.name).with_scenario(planted)
        outcome = run_test(spec, tmp_path / planted.name)
        assert outcome.results is not None, outcome.problems
        assert not [p for p in outcome.problems if p.startswith("main phase")], outcome.problems
        results = outcome.results
        assert spec.scenario_problems(results) == [], json.dumps(results["anomalies"], indent=1)[:3000]
        liveness = results["liveness"]["partitions"]["0"]
        if planted is scenario:
            (stall,) = results["anomalies"][STALLED]["examples"]
            assert stall["gap_s"] >= 13 and liveness["longest_gap_s"] == stall["gap_s"], liveness
            assert results["anomalies"][STALLED]["severity"] == "warning" and results["valid"] is True
        else:
            assert STALLED not in results["anomalies"] and liveness["longest_gap_s"] < 10, liveness
            assert results["liveness"]["last_heal_s"] is not None, "the announced pause was a window"
