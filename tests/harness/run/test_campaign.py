"""Campaigns: matrix planning (pure) and a real interrupted-then-resumed campaign."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run.campaign import CampaignError, load_campaign, plan_campaign

REPOSITORY = Path(__file__).resolve().parents[3]


def test_matrix_expands_every_combination_times_repeats() -> None:
    campaign = plan_campaign(
        {
            "name": "c",
            "repeats": 2,
            "time_limit": 10,
            "matrix": {
                "truncation.mode": ["high-watermark", "leader-epoch"],
                "acks": ["1", "all"],
                "nemesis": ["kill", "pause,partition"],
            },
            "workload": {"rate": 50.0},
        },
        Path("c.toml"),
    )
    assert len(campaign.runs) == 2 * 2 * 2 * 2
    assert len({run.key for run in campaign.runs}) == len(campaign.runs)
    first = campaign.runs[0]
    assert first.spec.settings == {"truncation.mode": "high-watermark"}
    assert first.spec.workload.acks == "1" and first.spec.workload.rate == 50.0
    assert first.spec.nemesis.faults == ("kill",)
    assert {run.spec.seed for run in campaign.runs} == {0, 1}


def test_scenario_axis_applies_the_scenario_set_up() -> None:
    campaign = plan_campaign(
        {"matrix": {"scenario": ["kip101-loss"], "truncation.mode": ["leader-epoch"]}}, Path("s.toml")
    )
    (run,) = campaign.runs
    assert run.spec.scenario == "kip101-loss" and run.spec.node_count == 2
    assert run.spec.settings["truncation.mode"] == "leader-epoch"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"matrix": {"no.such.setting": ["1"]}}, "unknown broker or controller setting"),
        ({"matrix": {"nemesis": ["kil"]}}, "unknown name 'kil'"),
        ({"matrix": {"acks": []}}, "matrix.acks must be a non-empty list"),
        ({"repeats": 0}, "repeats must be a positive integer"),
        ({"surprise": 1}, "unknown keys surprise"),
        ({"matrix": {"scenario": ["no-such-scenario"]}}, "no scenario 'no-such-scenario'"),
    ],
)
def test_bad_campaigns_name_the_problem(data: dict[str, object], message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        plan_campaign(data, Path("bad.toml"))


def test_toml_syntax_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("name = \n")
    with pytest.raises(CampaignError, match=r"broken\.toml"):
        load_campaign(path)


@pytest.mark.docker
@pytest.mark.slow
def test_interrupted_campaign_resumes_without_rerunning_stored_runs(image: str, tmp_path: Path) -> None:
    campaign_file = tmp_path / "c.toml"
    campaign_file.write_text(
        'name = "resume"\ntime_limit = 8\nengine = "pandas"\n'
        '[matrix]\nnemesis = ["kill", "pause"]\n[workload]\nrate = 50.0\n[nemesis]\ninterval_seconds = 3.0\n'
    )
    store = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "harness.cli.main",
        "campaign",
        str(campaign_file),
        "--store",
        str(store),
    ]
    runs = store / "resume" / "runs"
    first = subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # wait for: first run finished, second one started
            finished = sorted(p.parent.name for p in runs.glob("*/run.json"))
            started = sorted(p.name for p in runs.glob("*") if p.is_dir())
            if len(finished) == 1 and len(started) == 2 and (runs / started[1] / "history.jsonl").exists():
                break
            assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
            time.sleep(0.2)  # polling the condition above
        else:
            pytest.fail("the campaign never got into its second run")
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    (done_key,) = finished
    done_history = (runs / done_key / "history.jsonl").read_bytes()

    second = subprocess.run(command, cwd=REPOSITORY, capture_output=True, timeout=600)
    output = second.stdout.decode() + second.stderr.decode()
    assert "1 already stored, 1 to run" in output, output[-3000:]
    assert (runs / done_key / "history.jsonl").read_bytes() == done_history, "a stored run was run again"
    assert len(list(runs.glob("*/run.json"))) == 2
    assert list(runs.glob("*.interrupted-1")), "the interrupted run is kept aside"
    assert (store / "resume" / "index.html").exists() and (store / "resume" / "junit.xml").exists()
    assert second.returncode in (0, 1, 2), output[-3000:]
