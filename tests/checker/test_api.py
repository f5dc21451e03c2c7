"""checker.api: loading a batch (several runs at once, in order) and reporting its progress."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from checker.api import check_runs, load_runs
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import QUESTIONS
from checker.evidence import InputError
from checker.pandas.engine import PandasEngine
from testbed.record.rundir import SPEC_FILE
from tests.checker.synthetic import Plan, write_run


class Recorded:
    """A :class:`checker.api.CheckProgress` that remembers what it was told."""

    def __init__(self) -> None:
        self.loaded: list[Path] = []
        self.passes: list[tuple[int, int, int]] = []
        self.answers: Counter[str] = Counter()
        self.written = 0

    def run_loaded(self, run_dir: Path) -> None:
        self.loaded.append(run_dir)

    def pass_started(self, number: int, passes: int, runs: int) -> None:
        self.passes.append((number, passes, runs))

    def answered(self, question: str) -> None:
        self.answers[question] += 1

    def results_written(self, runs: int) -> None:
        self.written += runs


def _runs(root: Path, count: int) -> list[Path]:
    dirs = []
    for number in range(count):
        run_dir = root / f"run-{number}"
        write_run(run_dir, Plan(seed=500 + number))
        dirs.append(run_dir)
    return dirs


def test_a_batch_loads_in_input_order_and_reports_every_step(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, 6)
    progress = Recorded()
    runs = load_runs(list(reversed(dirs)), progress=progress)
    assert [run.run_dir for run in runs] == list(reversed(dirs))
    assert sorted(progress.loaded) == sorted(dirs)
    results = check_runs(runs, PandasEngine(), ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, progress=progress)
    assert [result["run"] for result in results] == [str(d) for d in reversed(dirs)]
    assert progress.passes == [(1, 1, 6)]
    assert progress.answers == Counter(dict.fromkeys(QUESTIONS, 1))
    assert progress.written == 6


def test_the_first_bad_run_in_input_order_is_the_error(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, 5)
    for broken in (dirs[1], dirs[3]):
        (broken / SPEC_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="run-1"):
        load_runs(dirs)
