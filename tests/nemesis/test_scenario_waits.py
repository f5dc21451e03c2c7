"""A wait that is not required: the system's decision recorded, the steps going on; and the
step keys that say so (``required``, ``controlled``) refused where they mean nothing."""

from __future__ import annotations

import pytest

import nemesis.scenario_run as scenario_run_module
from nemesis.scenario import ScenarioFailed, parse_scenario
from nemesis.scenario_run import ScenarioContext, ScenarioRun

from .test_scenario_parse import INFO, SOURCE, FakeCluster, FakeNemesis, parse_error, scenario_data


def run(*steps: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> tuple[ScenarioRun, FakeNemesis]:
    monkeypatch.setattr(scenario_run_module, "_partition_info", lambda bootstrap, topic, partition: INFO)
    nemesis = FakeNemesis()
    context = ScenarioContext(FakeCluster(), nemesis, None, "queue", lambda line: None)  # type: ignore[arg-type]
    scenario_run = ScenarioRun(parse_scenario(scenario_data(*steps), SOURCE), context)
    scenario_run.run()
    return scenario_run, nemesis


def test_a_wait_not_required_that_times_out_is_recorded_and_the_steps_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n2 leads in the planted view: "leader-is n1" never holds.
    done, nemesis = run(
        {"wait": "leader-is", "node": "n1", "timeout": 0.2, "required": False},
        {"fault": "kill", "node": "n1"},
        {"wait": "leader-is", "node": "n2", "timeout": 0.2, "required": False},
        monkeypatch=monkeypatch,
    )
    assert nemesis.calls == [("kill", ["n1"])]
    assert done.unmet == [f"{SOURCE}: step 1: timed out after 0.2 s waiting for leader-is n1 (partition 0)"]


def test_a_required_wait_still_stops_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ScenarioFailed, match=r"step 1: timed out after 0\.2 s waiting for leader-is n1"):
        run(
            {"wait": "leader-is", "node": "n1", "timeout": 0.2, "required": True},
            {"fault": "kill", "node": "n1"},
            monkeypatch=monkeypatch,
        )


def test_required_is_a_wait_s_true_or_false_and_controlled_a_shutdown_s() -> None:
    assert "required = true|false is for a wait only, not 'no'" in parse_error(
        scenario_data({"wait": "leader-is", "node": "n1", "required": "no"})
    )
    assert "required = true|false is for a wait only" in parse_error(
        scenario_data({"fault": "kill", "node": "n1", "required": False})
    )
    assert "controlled = true|false is for shutdown only, not kill = False" in parse_error(
        scenario_data({"fault": "kill", "node": "n1", "controlled": False})
    )
    assert "not shutdown = 'no'" in parse_error(
        scenario_data({"fault": "shutdown", "node": "n1", "controlled": "no"})
    )
    parsed = parse_scenario(scenario_data({"fault": "shutdown", "node": "n1", "controlled": False}), SOURCE)
    assert parsed.parsed_steps[0].controlled is False  # type: ignore[union-attr]
