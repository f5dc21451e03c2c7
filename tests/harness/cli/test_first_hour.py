"""Issue 36's bad inputs, one test per row: what a newcomer gets wrong in the first hour.

Each row of the issue's table is a command and an input that once ended in a traceback, a
misleading line or a silent acceptance; each test here asserts what the "wanted" column says --
one line on stderr naming what and where (no traceback), the exit code of the run contract, and
nothing written that should not be.  No container starts: the commands that would start one run
with ``DOCKER_HOST`` pointing at a socket that does not exist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.cli.main import main
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_UNKNOWN
from testbed.record.rundir import RunDir
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run
from tests.checker.synthetic import Plan, write_run
from tests.harness.cli.commands import ROOT, TIDEMARK, captured_one_line

NOT_UTF8 = b'name = "caf\xe9"\n'
"""A TOML file in Latin-1: byte 11 is not UTF-8."""

SUBSET = "lost-write,min-isr-violation"
"""Checks that read the history and the event table, so a bad ``events.parquet`` is read."""


def without_docker(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tidemark ARGUMENTS`` in a subprocess whose ``DOCKER_HOST`` names a socket nobody serves."""
    command = [str(TIDEMARK)] if TIDEMARK.exists() else [sys.executable, "-m", "harness.cli.main"]
    environment = {
        **os.environ,
        "DOCKER_HOST": f"unix://{cwd / 'no-docker.sock'}",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [*command, *arguments], capture_output=True, text=True, timeout=120, cwd=cwd, env=environment
    )


def converted_run(run_dir: Path, seed: int = 1) -> Path:
    """A synthetic run with its ``history.parquet`` written (``tidemark history convert``)."""
    write_run(run_dir, Plan(seed=seed))
    assert main(["history", "convert", str(run_dir)]) == 0
    return run_dir


# ---- report: a truncated history.parquet ---------------------------------------------------------


def test_report_of_a_truncated_history_parquet_names_it_and_still_writes_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    converted_run(tmp_path / "store" / "good", seed=1)
    bad = converted_run(tmp_path / "store" / "bad", seed=2)
    history = RunDir(bad).history_parquet
    history.write_bytes(history.read_bytes()[: history.stat().st_size // 2])
    capsys.readouterr()
    assert main(["report", str(bad)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(history), "not a whole Parquet file", "marked unreadable")
    page = (bad / "report.html").read_text(encoding="utf-8")
    assert "<b>unreadable</b>" in page and str(history) in page
    assert main(["report", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("tidemark report: error: "), err
    index = (tmp_path / "store" / "index.html").read_text(encoding="utf-8")
    rows = [line for line in index.splitlines() if line.startswith("<tr class")]
    (bad_row,) = [row for row in rows if 'href="bad/report.html"' in row]
    (good_row,) = [row for row in rows if 'href="good/report.html"' in row]
    assert "(unreadable)" in bad_row and str(history) in bad_row and "(unreadable)" not in good_row


# ---- output paths in directories that do not exist ------------------------------------------------


def test_history_convert_to_a_missing_directory_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "run", Plan(seed=1))
    target = tmp_path / "no" / "such" / "h.parquet"
    assert main(["history", "convert", str(tmp_path / "run"), "-o", str(target)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "-o", f"no such directory {target.parent}")


def test_check_summary_in_a_missing_directory_is_refused_before_checking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "runs" / "a", Plan(seed=1))
    write_run(tmp_path / "runs" / "b", Plan(seed=2))
    summary = tmp_path / "no" / "s.parquet"
    assert main(["check", str(tmp_path / "runs"), "--summary", str(summary)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "--summary", "no such directory")
    assert not (tmp_path / "runs" / "a" / "results.json").exists(), "nothing was checked"


# ---- TOML files that are not UTF-8 ---------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["scenario", "show"], ["campaign"], ["run", "--scenario"]],
    ids=["scenario-show", "campaign", "run-scenario"],
)
def test_a_toml_file_that_is_not_utf8_is_named_with_its_byte_offset(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(NOT_UTF8)
    assert main(
        [*command, str(path), *(["--store", str(tmp_path / "store")] if command[0] != "scenario" else [])]
    ) == (EXIT_BAD_ARGUMENTS)
    captured_one_line(capsys, f"{path}: not UTF-8", "byte offset 11", "line 1")
    assert not (tmp_path / "store").exists()


# ---- Docker unreachable ----------------------------------------------------------------------------


def test_a_hunt_without_docker_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    result = without_docker("hunt", "--budget", "1m", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_BAD_ARGUMENTS, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("tidemark hunt: error: no Docker engine answers at unix://"), line
    assert not (tmp_path / "store").exists(), "no run was started"


def test_a_campaign_without_docker_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    campaign = tmp_path / "c.toml"
    campaign.write_text('name = "c"\n[matrix]\nnemesis = ["kill"]\n', encoding="utf-8")
    result = without_docker("campaign", str(campaign), "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_BAD_ARGUMENTS, result.stderr
    (line,) = result.stderr.splitlines()
    assert f"no Docker engine answers at unix://{tmp_path / 'no-docker.sock'}" in line, line
    assert not (tmp_path / "store").exists(), "nothing written before the engine answers"


def test_a_run_without_docker_is_one_line_and_leaves_no_run_directory(tmp_path: Path) -> None:
    result = without_docker("run", "--time-limit", "2", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_UNKNOWN, result.stderr
    (line,) = result.stderr.splitlines()
    assert "no Docker engine answers at" in line, line
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


# ---- campaigns and scenarios refused before anything starts --------------------------------------


def test_an_empty_campaign_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("", encoding="utf-8")
    assert main(["campaign", str(path), "--store", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(path), "a campaign names what it runs")
    assert not (tmp_path / "store").exists()


SCENARIO_HEAD = 'name = "s"\n[[expected]]\nvalid = false\nanomalies = ["{anomaly}"]\n'
UNKNOWN_ANOMALY = SCENARIO_HEAD.format(anomaly="lost-writes") + '[[step]]\nsleep = 1\nwhy = "w"\n'
RUN_SCENARIO = ["run", "--scenario", "s.toml", "--store", "store"]


def refused_without_docker(text: str, command: list[str], tmp_path: Path, *fragments: str) -> None:
    """``command`` on the scenario ``text`` (written to ``s.toml``) is one line naming the file and
    ``fragments``, exit 254, nothing stored -- with no Docker engine to start anything on."""
    (tmp_path / "s.toml").write_text(text, encoding="utf-8")
    result = without_docker(*command, cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_BAD_ARGUMENTS, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"tidemark {command[0]}: error: s.toml"), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            SCENARIO_HEAD.format(anomaly="lost-write") + '[[step]]\nsleep = -3\nwhy = "w"\n',
            (":6: step 1: sleep must be >= 0 seconds, not -3",),
        ),
        (
            'name = "s"\n[[step]]\nfault = "kill"\nnode = "n1"\n\n[[step]]\nfualt = "kill"\nnode = "n1"\n',
            (":7: step 2: unknown key 'fualt'", "fault"),
        ),
    ],
    ids=["negative-sleep", "step-key-typo"],
)
@pytest.mark.parametrize("command", [["scenario", "show", "s.toml"], RUN_SCENARIO], ids=["show", "run"])
def test_a_scenario_mistake_is_refused_before_any_container_naming_the_line(
    text: str, fragments: tuple[str, ...], command: list[str], tmp_path: Path
) -> None:
    refused_without_docker(text, command, tmp_path, *fragments)


UNKNOWN_ANOMALY_FRAGMENTS = (":4: expected 1: anomalies: no anomaly 'lost-writes'", "lost-write,")


@pytest.mark.parametrize("command", [["scenario", "show", "s.toml"]], ids=["show"])
def test_an_unknown_anomaly_in_a_scenario_is_refused(command: list[str], tmp_path: Path) -> None:
    refused_without_docker(UNKNOWN_ANOMALY, command, tmp_path, *UNKNOWN_ANOMALY_FRAGMENTS)


def test_a_campaign_of_a_scenario_naming_an_unknown_anomaly_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.toml").write_text(UNKNOWN_ANOMALY, encoding="utf-8")
    campaign = tmp_path / "c.toml"
    campaign.write_text(f'[matrix]\nscenario = ["{tmp_path / "s.toml"}"]\n', encoding="utf-8")
    assert main(["campaign", str(campaign), "--store", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(campaign), *UNKNOWN_ANOMALY_FRAGMENTS)
    assert not (tmp_path / "store").exists()


def test_run_of_a_scenario_naming_an_unknown_anomaly_is_refused(tmp_path: Path) -> None:
    refused_without_docker(UNKNOWN_ANOMALY, RUN_SCENARIO, tmp_path, *UNKNOWN_ANOMALY_FRAGMENTS)


# ---- run directories ------------------------------------------------------------------------------


def test_history_replicas_of_a_directory_that_is_not_a_run_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "replicas", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, f"{tmp_path}: not a run directory")
    assert list(tmp_path.iterdir()) == []


def test_one_corrupt_events_parquet_makes_that_run_unknown_and_the_others_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for number in range(4):
        write_invariant_run(tmp_path / "runs" / f"r{number}", InvariantPlan(seed=number))
    assert main(["check", str(tmp_path / "runs"), "--engine", "pandas", "--checks", SUBSET]) == EXIT_UNKNOWN
    events = RunDir(tmp_path / "runs" / "r2").events
    events.write_bytes(b"not parquet at all")
    capsys.readouterr()
    assert main(["check", str(tmp_path / "runs"), "--engine", "pandas", "--checks", SUBSET]) == EXIT_UNKNOWN
    out = capsys.readouterr().out
    assert "Traceback" not in out
    results = {
        number: json.loads((tmp_path / "runs" / f"r{number}" / "results.json").read_text())
        for number in range(4)
    }
    assert results[2]["valid"] == "unknown" and results[2]["checks"] == []
    (reason,) = results[2]["incomplete"]
    assert reason.startswith(f"unreadable: {events}: not a readable Parquet file"), reason
    for number in (0, 1, 3):
        assert results[number]["checks"] == SUBSET.split(","), number
        assert not any("unreadable" in reason for reason in results[number]["incomplete"])
    rows = pq.read_table(tmp_path / "runs" / "check-summary.parquet").to_pylist()
    assert len(rows) == 4 and [row["run"] for row in rows] == [
        str(tmp_path / "runs" / f"r{n}") for n in range(4)
    ]
    assert f"unknown  {tmp_path / 'runs' / 'r2'}  [incomplete: unreadable: {events}" in out


def test_one_bad_run_checked_alone_is_still_a_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_invariant_run(tmp_path / "r", InvariantPlan(seed=1))
    assert main(["check", str(tmp_path / "r"), "--engine", "pandas", "--checks", SUBSET]) == EXIT_UNKNOWN
    RunDir(tmp_path / "r").events.write_bytes(b"not parquet at all")
    capsys.readouterr()
    assert (
        main(["check", str(tmp_path / "r"), "--engine", "pandas", "--checks", SUBSET]) == EXIT_BAD_ARGUMENTS
    )
    captured_one_line(capsys, "events.parquet")


def test_store_verify_after_a_run_directory_moved_says_where_the_index_expects_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a", "b"):
        write_run(tmp_path / "runs" / name, Plan(seed=ord(name)))
    assert main(["store", "pack", str(tmp_path / "runs"), "--out", str(tmp_path / "packed")]) == 0
    shutil.move(tmp_path / "runs" / "b", tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["store", "verify", str(tmp_path / "packed")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "moved", f"the index expects it at {tmp_path / 'runs' / 'b'}")


def test_shrink_of_a_valid_run_has_nothing_to_shrink(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "run", Plan(seed=1))
    (tmp_path / "run" / "results.json").write_text('{"valid": true, "anomalies": {}}', encoding="utf-8")
    assert main(["shrink", str(tmp_path / "run"), "--store", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, f"{tmp_path / 'run'}: the run is valid: nothing to shrink")
    assert not (tmp_path / "store").exists()


# ---- flags -----------------------------------------------------------------------------------------


def test_run_nodes_zero_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--nodes", "0", "--store", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "--nodes")


@pytest.mark.parametrize("command", [["hunt"], ["shrink", "RUN"]], ids=["hunt", "shrink"])
def test_a_negative_budget_gets_the_budgets_own_message(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for budget in (["--budget", "-5m"], ["--budget=-5m"]):
        try:
            code = main([*command, *budget])
        except SystemExit as refused:  # argparse's "expected one argument", before the budget's check
            pytest.fail(f"argparse refused {budget} (exit {refused.code}) before the budget's own check")
        assert code == EXIT_BAD_ARGUMENTS
        captured_one_line(capsys, "--budget '-5m': expected a positive duration")


def test_checks_naming_no_check_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "run", Plan(seed=1))
    assert main(["check", str(tmp_path / "run"), "--checks", ""]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "--checks", "(none given)")
    assert not (tmp_path / "run" / "results.json").exists()


# ---- event logs: a torn last line and a garbage line told apart ----------------------------------


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        ("torn", "torn line(s) "),
        ("garbage", "not one cut short by a crash (a garbage line: b'hello world')"),
    ],
)
def test_a_torn_last_line_and_a_garbage_line_are_told_apart(
    damage: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=1))
    log = RunDir(run_dir).broker_events("n1")
    lines = log.read_bytes().splitlines(keepends=True)
    if damage == "torn":
        log.write_bytes(b"".join(lines) + lines[-1][:25])  # a power loss cut the next event short
    else:
        log.write_bytes(b"".join([*lines[:3], b"hello world\n", *lines[4:]]))  # line 4 overwritten
    assert main(["check", str(run_dir), "--engine", "pandas", "--checks", SUBSET, "--json"]) == EXIT_UNKNOWN
    capsys.readouterr()
    result = json.loads((run_dir / "results.json").read_text())
    (reason,) = [reason for reason in result["incomplete"] if "node n1" in reason]
    assert fragment in reason, reason
    if damage == "torn":
        assert reason.endswith("(events cut by a crash)"), reason
