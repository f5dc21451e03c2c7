"""A scenario run says plainly whether it met its scenario's expectation: on its page, in the
index, in JUnit and in ``tidemark check``'s verdict line (issue 36: the demo's point)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.report.expectation import expectation_problems, expectation_sentence
from nemesis.scenario import load_scenario
from tests.harness.report.report_runs import RunShape, make_checked_run

MET = "as expected: lost-write (permitted by truncation.mode=high-watermark)"


def scenario_run(run_dir: Path, truncation: str, lost_writes: int) -> Path:
    """A checked run whose test.json embeds ``kip101-loss``, as a scenario run's does."""
    make_checked_run(
        run_dir, RunShape(truncation=truncation, lost_writes=lost_writes, scenario="kip101-loss")
    )
    spec_file = run_dir / "test.json"
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec["scenario_definition"] = load_scenario("kip101-loss").definition
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    return run_dir


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    scenario_run(root / "hw-lossy", "high-watermark", 2)  # loses writes, as the scenario expects
    scenario_run(root / "epoch-lossy", "leader-epoch", 2)  # loses writes it must not
    make_checked_run(root / "plain", RunShape())  # no scenario (valid): nothing to meet
    return root


def spec_and_results(run_dir: Path) -> tuple[dict[str, object], dict[str, object]]:
    return (
        json.loads((run_dir / "test.json").read_text(encoding="utf-8")),
        json.loads((run_dir / "results.json").read_text(encoding="utf-8")),
    )


def test_the_judgement_from_the_run_directory(store: Path) -> None:
    assert expectation_sentence(*spec_and_results(store / "hw-lossy")) == MET
    assert expectation_problems(*spec_and_results(store / "epoch-lossy")) == ["verdict False, expected True"]
    assert expectation_sentence(*spec_and_results(store / "epoch-lossy")) == (
        "NOT as expected: verdict False, expected True"
    )
    assert expectation_sentence(*spec_and_results(store / "plain")) is None


def test_the_run_page_index_junit_and_check_say_it(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(store), "--junit", str(tmp_path / "junit.xml")]) == 0
    assert f"<b>{MET}</b>" in (store / "hw-lossy" / "report.html").read_text(encoding="utf-8")
    assert "NOT as expected: verdict False" in (store / "epoch-lossy" / "report.html").read_text(
        encoding="utf-8"
    )
    rows = [
        line
        for line in (store / "index.html").read_text(encoding="utf-8").splitlines()
        if "<tr class" in line
    ]
    (hw,) = [row for row in rows if "hw-lossy/report.html" in row]
    (epoch,) = [row for row in rows if "epoch-lossy/report.html" in row]
    (plain,) = [row for row in rows if "plain/report.html" in row]
    assert (
        ">as expected</span>" in hw and ">NOT as expected</span>" in epoch and "expected</span>" not in plain
    )
    junit = (tmp_path / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<failure") == 1, junit  # epoch-lossy; hw-lossy passes although invalid
    assert 'message="not as expected: verdict False, expected True"' in junit
    capsys.readouterr()
    main(["check", str(store / "hw-lossy"), "--engine", "pandas"])
    assert f"-- {MET}" in capsys.readouterr().out
