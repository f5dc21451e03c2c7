"""A scenario's ``target``: parsed and checked when the file is read, kept in the definition, and
the library's tansu scenarios -- what they fault and the verdicts they expect -- without containers
(their Docker runs are ``tests/testbed/cluster/test_tansu_docker.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.run.spec import SpecError, TestSpec, scenario_target
from nemesis.scenario import ScenarioError, library, load_scenario, parse_scenario
from testbed.cluster.targets import DEFAULT_TARGET, TARGETS

SOURCE = "mine.toml"


def scenario_data(**top: Any) -> dict[str, Any]:
    return {"name": "t", "description": "A test.", "step": [{"sleep": 1, "why": "x"}], **top}


def test_a_target_is_read_and_kept_in_the_definition_and_absent_means_none() -> None:
    parsed = parse_scenario(scenario_data(target="tansu"), SOURCE)
    assert parsed.target == "tansu"
    assert parsed.definition["target"] == "tansu", "test.json embeds it, so a rerun keeps the target"
    assert parse_scenario(scenario_data(), SOURCE).target is None


@pytest.mark.parametrize("target", ["kafka", "", "Tansu", 3, ["tansu"], True])
def test_a_target_that_is_none_of_the_targets_names_the_file_and_key(target: Any) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_data(target=target), SOURCE)
    assert str(caught.value) == f"{SOURCE}: target: expected one of {', '.join(TARGETS)}, not {target!r}"


def test_a_bad_target_in_a_file_names_the_file(tmp_path: Any) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "m"\ntarget = "redpanda"\n[[step]]\nsleep = 1\nwhy = "w"\n', encoding="utf-8")
    with pytest.raises(
        ScenarioError, match=rf"^{path}: target: expected one of bundled, tansu, nisshi, not 'redpanda'$"
    ):
        load_scenario(str(path))


def test_a_scenario_runs_on_its_target_unless_a_different_one_is_asked_for() -> None:
    tansu = parse_scenario(scenario_data(target="tansu"), SOURCE)
    anywhere = parse_scenario(scenario_data(), SOURCE)
    assert scenario_target(None, tansu, "--target") == "tansu"
    assert scenario_target("tansu", tansu, "--target") == "tansu"
    assert scenario_target(None, anywhere, "--target") == DEFAULT_TARGET
    assert scenario_target("tansu", anywhere, "--target") == "tansu"
    with pytest.raises(SpecError) as caught:
        scenario_target("bundled", tansu, "--target")
    assert str(caught.value) == (
        f'--target bundled conflicts with scenario t\'s target = "tansu" ({SOURCE}): '
        "leave --target out, or give the same"
    )
    assert TestSpec().with_scenario(tansu).target == "tansu"
    assert TestSpec(target="tansu").with_scenario(anywhere).target == "tansu"


# --------------------------------------------------------------------------- the library's tansu scenarios


def test_the_power_loss_of_pg_scenario_expects_loss_only_with_fsync_off() -> None:
    scenario = load_scenario("tansu-pg-power-loss")
    assert scenario.target == "tansu"
    spec = TestSpec(name=scenario.name).with_scenario(scenario)
    assert spec.target == "tansu" and spec.power_loss_filesystem
    faults = [(step["fault"], step.get("node")) for step in scenario.steps if "fault" in step]
    assert faults == [("power-loss", "pg"), ("start", "pg")]
    off = TestSpec(name=scenario.name, settings={"postgresql.fsync": "off"}).with_scenario(scenario)
    lost = {"valid": False, "expected_only": True, "anomalies": {"lost-write": {"expected": True}}}
    assert off.scenario_problems(lost) == []
    assert off.scenario_problems({"valid": True, "anomalies": {}}) == [
        "verdict True, expected False",
        "lost-write not reported",
    ]
    assert spec.scenario_problems({"valid": True, "anomalies": {}}) == [], (
        "PostgreSQL's defaults lose nothing"
    )
    assert spec.scenario_problems(lost) == ["lost-write reported"]
    retried = {"valid": False, "expected_only": True, "anomalies": {"duplicate": {"expected": True}}}
    assert spec.scenario_problems(retried) == [], "producers without idempotence may write a retry twice"
    words = TestSpec(name=scenario.name, settings={"postgresql.fsync": "false"}).with_scenario(scenario)
    assert words.scenario_problems(lost) == [], "the expectation reads the effective (normalised) setting"


def test_the_broker_faults_scenario_faults_only_brokers_and_expects_nothing_lost() -> None:
    scenario = load_scenario("tansu-broker-faults")
    assert scenario.target == "tansu"
    assert scenario.workload["idempotent"] is False  # tansu 0.6.0 loses writes of idempotent producers
    assert [(e.when, e.valid, e.absent) for e in scenario.expected] == [
        ({}, "nothing-unexpected", ("lost-write", "lost-read", "inconsistent-offsets"))
    ]
    faulted = {step["node"] for step in scenario.steps if step.get("fault") in ("kill", "start")}
    assert faulted == {"n1", "n2"}
    assert {step["fault"] for step in scenario.steps if "fault" in step} == {
        "kill",
        "start",
        "partition",
        "heal",
        "request-duplicate",
        "request-release",
    }
    # The duplicated Produce requests go through a broker's request proxy: PostgreSQL has none.
    requests = {
        n for step in scenario.steps if str(step.get("fault")).startswith("request-") for n in step["nodes"]
    }
    assert requests == {"n1", "n2"}


def test_every_library_scenario_of_a_target_names_one_the_harness_has() -> None:
    targets = {name: load_scenario(name).target for name in library()}
    assert set(targets.values()) <= {None, *TARGETS}
    assert {name for name, target in targets.items() if target == "tansu"} == {
        "tansu-broker-faults",
        "tansu-idempotent-producer-loss",
        "tansu-pg-power-loss",
    }


def test_the_tansu_finding_is_two_pauses_of_idempotent_producers_on_postgresql_defaults() -> None:
    """The shrunk tansu finding: idempotent producers, PostgreSQL's defaults (no setting permits
    loss), two pauses -- every node, then PostgreSQL alone -- and lost-write must be reported."""
    scenario = load_scenario("tansu-idempotent-producer-loss")
    assert scenario.target == "tansu" and scenario.bug.startswith("tansu 0.6.0")
    assert scenario.workload["idempotent"] is True and scenario.settings == {}
    faults = [(step["fault"], step["nodes"]) for step in scenario.steps if "fault" in step]
    assert faults == [
        ("pause", ["n1", "n2", "pg"]),
        ("resume", ["n1", "n2", "pg"]),
        ("pause", ["pg"]),
        ("resume", ["pg"]),
    ]
    spec = TestSpec(name=scenario.name).with_scenario(scenario)
    assert spec.target == "tansu" and spec.workload.idempotent
    lost = {"valid": False, "expected_only": False, "anomalies": {"lost-write": {"expected": False}}}
    assert spec.scenario_problems(lost) == []
    assert spec.scenario_problems({"valid": True, "anomalies": {}}) == [
        "verdict True, expected False",
        "lost-write not reported",
    ]
