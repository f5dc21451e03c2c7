"""``tidemark shrink``'s arguments: what reaches the shrinker and what is refused in one line (no
containers: ``shrink_run`` is replaced by one that records what it was given)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import shrink as shrink_cli
from harness.cli.main import main
from harness.run.shrink_run import ShrinkOutcome
from harness.run.spec import TestSpec
from testbed.record.rundir import RunDir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    directory = RunDir(tmp_path / "run")
    directory.path.mkdir()
    directory.spec_file.write_text(json.dumps(TestSpec(name="q").to_dict()))
    return directory.path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_shrink(run_dir: Path, store: Path, **options: Any) -> ShrinkOutcome:
        seen.append({"run_dir": run_dir, **options})
        return ShrinkOutcome(tmp_path / "shrunk.toml", 5, 2, 4, 5, 7, stepped_back=1)

    monkeypatch.setattr(shrink_cli, "shrink_run", fake_shrink)
    return seen


def test_the_quick_search_reaches_the_shrinker_and_a_step_back_is_reported(
    calls: list[dict[str, Any]], run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["shrink", str(run_dir), "--search-replays", "2", "--budget", "5m"]) == 0
    assert calls[0]["search_replays"] == 2 and calls[0]["budget_seconds"] == 300.0
    assert "5 faults -> 2; reproduced in 4 of 5 replays (7 candidates tried; stepped back 1)" in (
        capsys.readouterr().out
    )
    main(["shrink", str(run_dir)])
    assert calls[1]["search_replays"] is None


@pytest.mark.parametrize("value", ["0", "6"])
def test_search_replays_outside_one_to_replays_is_a_bad_argument(
    calls: list[dict[str, Any]], run_dir: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert main(["shrink", str(run_dir), "--search-replays", value]) == 254 and not calls
    assert f"--search-replays {value}: expected 1 to --replays (5)" in capsys.readouterr().err
