"""``shrink_run`` end to end on a stored run, with a planted replay instead of containers."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from harness.run.shrink_run import ShrinkError, shrink_run
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario
from nemesis.spec import NemesisSpec
from testbed.record.ops import NEMESIS_PROCESS
from testbed.record.recorder import Recorder
from testbed.record.rundir import RunDir

SPEC = TestSpec(
    name="q", settings={"truncation.mode": "high-watermark"}, nemesis=NemesisSpec(faults=("kill", "pause"))
)


def stored_run(tmp_path: Path, verdict: bool | str = False) -> Path:
    directory = RunDir(tmp_path / "run")
    directory.nodes.mkdir(parents=True)
    directory.spec_file.write_text(json.dumps(SPEC.to_dict()))
    anomalies = {"lost-write": {"count": 2}} if verdict is False else {}
    directory.results.write_text(json.dumps({"valid": verdict, "anomalies": anomalies}))
    recorder = Recorder(directory.history_jsonl)
    for f, value in (
        ("pause", {"nodes": ["n3"], "target": "one"}),
        ("resume", {"nodes": ["n3"]}),
        ("kill", {"nodes": ["n1"], "target": "leader", "leader_of": {"topic": "tidemark", "partition": 0}}),
        ("start", {"nodes": ["n1"]}),
    ):
        invocation = recorder.invoke(NEMESIS_PROCESS, f, value)
        recorder.complete(invocation, "ok", value)
    recorder.close()
    return directory.path


def planted_replay(found: set[str]) -> tuple[list[TestSpec], object]:
    seen: list[TestSpec] = []

    def replay(spec: TestSpec, store: Path) -> set[str]:
        seen.append(spec)
        scenario = spec.scenario_object()
        assert scenario is not None
        kills = [step for step in scenario.steps if step.get("fault") == "kill"]
        return found if kills else set()

    return seen, replay


def test_the_written_scenario_keeps_the_kill_drops_the_pause_and_runs_like_any_other(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path)
    seen, replay = planted_replay({"lost-write", "lost-read"})
    outcome = shrink_run(run_dir, tmp_path / "store", log=lambda _: None, replay=replay)  # type: ignore[arg-type]
    assert (outcome.original_faults, outcome.faults, outcome.reproduced, outcome.replays) == (2, 1, 5, 5)
    written = tomllib.loads(outcome.scenario_path.read_text())
    assert written["settings"] == {"truncation.mode": "high-watermark"}
    assert written["expected"] == [{"valid": False, "anomalies": ["lost-write"]}]
    scenario = load_scenario(str(outcome.scenario_path))
    assert [step.get("fault") for step in scenario.steps if "fault" in step] == ["kill", "start"]
    assert all(spec.nemesis.faults == () and spec.settings == SPEC.settings for spec in seen)
    assert "reproduced lost-write in 5 of 5 replays" in scenario.description


def test_a_run_whose_timeline_does_not_reproduce_is_refused_after_two_replays(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path)
    seen, replay = planted_replay(set())
    with pytest.raises(ShrinkError, match="does not reproduce"):
        shrink_run(run_dir, tmp_path / "store", log=lambda _: None, replay=replay)  # type: ignore[arg-type]
    assert len(seen) == 2  # 4 of 5 needed: two misses settle it
    assert not (run_dir / "shrunk.toml").exists()


def test_a_valid_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShrinkError, match="not invalid"):
        shrink_run(stored_run(tmp_path, verdict=True), tmp_path / "store", log=lambda _: None)


def test_the_target_can_be_one_of_the_run_s_anomalies_and_a_budget_ends_the_search(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path)
    _seen, replay = planted_replay({"lost-write"})
    ticks = iter(range(0, 10_000, 100))
    outcome = shrink_run(
        run_dir,
        tmp_path / "store",
        log=lambda _: None,
        replay=replay,  # type: ignore[arg-type]
        anomalies=["lost-write"],
        budget_seconds=1.0,
        clock=lambda: float(next(ticks)),
    )
    assert not outcome.complete and outcome.faults == outcome.original_faults == 2
    assert outcome.reproduced == 5  # what is written was still measured
    with pytest.raises(ShrinkError, match="did not report duplicate"):
        shrink_run(run_dir, tmp_path / "store", log=lambda _: None, anomalies=["duplicate"])


def test_a_quick_search_judges_candidates_on_fewer_replays_and_measures_the_result_in_full(
    tmp_path: Path,
) -> None:
    run_dir = stored_run(tmp_path)
    seen, replay = planted_replay({"lost-write"})
    outcome = shrink_run(
        run_dir,
        tmp_path / "store",
        log=lambda _: None,
        replay=replay,  # type: ignore[arg-type]
        search_replays=2,
    )
    assert (outcome.faults, outcome.reproduced, outcome.replays, outcome.stepped_back) == (1, 5, 5, 0)
    # The original on 4 (4 of 5 settle it), without the kill: 1 miss ends it, without the pause: 2 of 2,
    # then the result on all 5.
    assert len(seen) == 4 + 1 + 2 + 5


def test_a_quick_search_steps_back_when_its_result_falls_short_on_re_measuring(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path)
    calls_without_pause: list[int] = []

    def lucky_twice(spec: TestSpec, store: Path) -> set[str]:
        """The kill reproduces with the pause always, without it only in its first two replays."""
        scenario = spec.scenario_object()
        assert scenario is not None
        faults = {step.get("fault") for step in scenario.steps}
        if "kill" not in faults:
            return set()
        if "pause" in faults:
            return {"lost-write"}
        calls_without_pause.append(1)
        return {"lost-write"} if len(calls_without_pause) <= 2 else set()

    lines: list[str] = []
    outcome = shrink_run(run_dir, tmp_path / "store", log=lines.append, replay=lucky_twice, search_replays=2)
    assert (outcome.faults, outcome.reproduced, outcome.replays, outcome.stepped_back) == (2, 5, 5, 1)
    assert any("1 faults reproduced in 0 of 5 replays, short of 4: stepping back" in line for line in lines)
    written = load_scenario(str(outcome.scenario_path))
    assert [step.get("fault") for step in written.steps if "fault" in step] == [
        "pause",
        "resume",
        "kill",
        "start",
    ]
    assert "(2 faults -> 2); reproduced lost-write in 5 of 5 replays" in written.description
