"""``[[hunt]]`` tables in a campaign: planned like runs, run after the matrix, judged by whether
they found an anomaly when one was expected (the hunt itself is planted: no containers)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from harness.run import campaign_run
from harness.run.campaign import CampaignError, plan_campaign
from harness.run.hunt import HuntResult, HuntRun

BASE: dict[str, Any] = {
    "name": "nightly",
    "time_limit": 20,
    "settings": {"flush.messages": 1},
    "hunt": [
        {
            "name": "hw",
            "budget": "10m",
            "nemesis": "follower-restart-leader-crash,kill",
            "settings": {"truncation.mode": "high-watermark"},
            "expect_anomaly": True,
        },
        {"budget": "90s", "nemesis": "kill,partition"},
    ],
}


def test_hunts_are_planned_with_the_campaign_settings_under_their_own() -> None:
    campaign = plan_campaign(BASE, Path("c.toml"))
    assert campaign.runs == ()  # hunts and no matrix: no set-up run
    first, second = campaign.hunts
    assert (first.key, first.budget_seconds, first.expect_anomaly) == ("hw", 600.0, True)
    assert first.spec.settings == {"flush.messages": "1", "truncation.mode": "high-watermark"}
    assert first.spec.nemesis.faults == ("follower-restart-leader-crash", "kill")
    assert first.spec.time_limit == 20
    assert (second.key, second.budget_seconds, second.expect_anomaly) == ("hunt2", 90.0, False)


@pytest.mark.parametrize(
    ("hunt", "message"),
    [
        ({"budget": "10x", "nemesis": "kill"}, "expected a positive duration"),
        ({"budget": "1m", "nemesis": ""}, "needs faults"),
        ({"budget": "1m", "nemesis": "explode"}, "explode"),
        ({"budget": "1m", "nemesis": "kill", "colour": "red"}, "unknown keys colour"),
        ({"budget": "1m", "nemesis": "kill", "settings": {"no.such.key": 1}}, "no.such.key"),
    ],
)
def test_bad_hunts_name_the_file_the_hunt_and_the_problem(hunt: dict[str, Any], message: str) -> None:
    with pytest.raises(CampaignError, match=message) as caught:
        plan_campaign({"name": "c", "hunt": [hunt]}, Path("c.toml"))
    assert str(caught.value).startswith("c.toml: hunt hunt1")


def test_a_hunt_passes_when_it_finds_what_it_expects_and_is_not_run_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign = plan_campaign(BASE, Path("c.toml"))
    calls: list[str] = []

    def planted_hunt(spec: Any, store: Path, budget: float, **options: Any) -> HuntResult:
        calls.append(spec.name)
        directory = store / spec.name / "hunt-1"
        directory.mkdir(parents=True)
        found = HuntRun(7, "run", False, {"lost-write": 2}, 3, 30.0) if "hw" in spec.name else None
        result = HuntResult(
            directory,
            [found or HuntRun(8, "run", True, {}, 4, 30.0)],
            30.0,
            found,
            30.0 if found else None,
            True,
        )
        (directory / "hunt.json").write_text(json.dumps(result.to_dict()))
        return result

    monkeypatch.setattr(campaign_run, "hunt", planted_hunt)
    console = Console(file=io.StringIO(), width=200)
    (tmp_path / "logs").mkdir()
    statuses = [campaign_run.run_campaign_hunt(planned, tmp_path, console) for planned in campaign.hunts]
    assert statuses == ["pass", "pass"]  # hw found its expected anomaly; the safe hunt found none
    assert calls == ["nightly-hw", "nightly-hunt2"]
    again = [campaign_run.run_campaign_hunt(planned, tmp_path, console) for planned in campaign.hunts]
    assert again == ["pass", "pass"] and len(calls) == 2  # finished hunts are not run again
    expecting_nothing = plan_campaign(
        {**BASE, "hunt": [{**BASE["hunt"][0], "expect_anomaly": False}]}, Path("c.toml")
    )
    (tmp_path / "other" / "logs").mkdir(parents=True)
    assert campaign_run.run_campaign_hunt(expecting_nothing.hunts[0], tmp_path / "other", console) == "fail"


def test_a_hunt_that_gave_up_fails_whatever_it_expected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hunt whose runs all died before a fault measured nothing: not a pass for a safe hunt."""
    campaign = plan_campaign({**BASE, "hunt": [{**BASE["hunt"][0], "expect_anomaly": False}]}, Path("c.toml"))

    def dead_hunt(spec: Any, store: Path, budget: float, **options: Any) -> HuntResult:
        directory = store / spec.name / "hunt-1"
        directory.mkdir(parents=True)
        runs = [HuntRun(seed, "run", "unknown", {}, 0, 5.0, "no results") for seed in (1, 2, 3)]
        result = HuntResult(directory, runs, 15.0, None, None, True, gave_up="3 runs in a row died")
        (directory / "hunt.json").write_text(json.dumps(result.to_dict()))
        return result

    monkeypatch.setattr(campaign_run, "hunt", dead_hunt)
    out = io.StringIO()
    (tmp_path / "logs").mkdir()
    assert campaign_run.run_campaign_hunt(campaign.hunts[0], tmp_path, Console(file=out, width=200)) == "fail"
    assert "gave up after 0.2 min: 3 runs in a row died" in out.getvalue()
