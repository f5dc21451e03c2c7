"""``tidemark rerun RUN_DIR``: a stored run repeats from its own directory alone.

The unit tests check what makes that possible (``test.json`` round-trips to the same spec,
the scenario's definition included; bad files are one-line usage errors).  The Docker test
is the promise itself: a run of a user's scenario file is re-run after the file is deleted
and reaches the same expected verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_INVALID
from harness.run.runner import write_spec
from harness.run.spec import TestSpec
from nemesis.scenario import library, load_scenario
from testbed.record.rundir import RunDir


def _user_scenario(directory: Path) -> Path:
    """A copy of the bundled kip101-loss scenario under a name of its own, as a user writes one."""
    text = library()["kip101-loss"].read_text(encoding="utf-8")
    path = directory / "mine.toml"
    path.write_text(text.replace('name = "kip101-loss"', 'name = "mine"', 1), encoding="utf-8")
    return path


def test_a_stored_spec_reads_back_as_the_same_spec_scenario_included(tmp_path: Path) -> None:
    scenario = load_scenario(str(_user_scenario(tmp_path)))
    spec = TestSpec(name="mine", settings={"truncation.mode": "high-watermark"}, seed=7).with_scenario(
        scenario
    )
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    write_spec(spec, run_dir, ["n1", "n2"])
    (tmp_path / "mine.toml").unlink()

    again = TestSpec.from_dict(run_dir.read_spec())

    assert again == spec
    restored = again.scenario_object()
    assert restored is not None and restored.steps == scenario.steps and restored.name == "mine"
    stored = run_dir.read_spec()
    assert stored["broker_config"]["truncation.mode"] == "high-watermark"
    assert stored["broker_config"]["unclean.leader.election.enable"] == "false"  # a default, resolved
    assert stored["scenario_faults"] == ["heal", "kill", "partition", "start"]
    assert again.scenario_problems({"valid": False, "anomalies": {"lost-write": {}}}) == []
    assert again.scenario_problems({"valid": True, "anomalies": {}}) == [
        "verdict True, expected False",
        "lost-write not reported",
    ]


def test_rerun_of_a_directory_without_a_readable_spec_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test.json").write_text("{not json", encoding="utf-8")
    assert main(["rerun", str(tmp_path), "--store", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    assert "test.json: not valid JSON" in capsys.readouterr().err
    (tmp_path / "test.json").write_text(json.dumps({"schema_version": 1, "colour": "red"}), encoding="utf-8")
    assert main(["rerun", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert "unknown test spec fields: colour" in capsys.readouterr().err
    damaged = {"schema_version": 1, "scenario": "mine", "scenario_definition": {"step": []}}
    (tmp_path / "test.json").write_text(json.dumps(damaged), encoding="utf-8")
    assert main(["rerun", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert (
        "test.json: scenario mine (embedded in the test spec): no [[step]] tables" in capsys.readouterr().err
    )


@pytest.mark.docker
@pytest.mark.slow
def test_a_user_scenario_run_is_rerun_after_its_file_is_deleted(
    image: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario_file = _user_scenario(tmp_path)
    store = tmp_path / "store"
    arguments = ["--scenario", str(scenario_file), "--set", "truncation.mode=high-watermark"]
    assert main(["run", *arguments, "--store", str(store)]) == EXIT_INVALID
    first = (store / "latest").resolve()
    assert "scenario mine: as expected" in capsys.readouterr().out

    scenario_file.unlink()
    assert main(["rerun", str(first), "--store", str(store)]) == EXIT_INVALID
    output = capsys.readouterr().out
    second = (store / "latest").resolve()

    assert second != first
    assert "scenario mine: as expected" in output, output
    assert "lost-write" in json.loads(RunDir(second).results.read_text())["anomalies"]
    original, repeated = RunDir(first).read_spec(), RunDir(second).read_spec()
    for field in ("scenario_definition", "settings", "broker_config", "workload", "seed"):
        assert repeated[field] == original[field], field
