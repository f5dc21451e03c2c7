"""The hunt loop on a planted launcher (no containers), and the isolation of a run in a child.

The loop's contract: fresh seeds, stop at the first invalid verdict unless told to keep going,
a run that could not finish recorded ``unknown``, and ``hunt.json`` rewritten after every run.
The isolation's: a child that outlives its timeout, or is running when the hunt is interrupted,
is stopped with its whole process group.
"""

from __future__ import annotations

import _thread
import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.cli.errors import UsageError
from harness.cli.hunt import parse_duration
from harness.run import hunt as hunt_module
from harness.run.hunt import HUNT_FILE, hunt, launch_isolated
from harness.run.spec import TestSpec
from nemesis.spec import NemesisSpec
from testbed.record.rundir import RunDir

SPEC = TestSpec(name="h", nemesis=NemesisSpec(faults=("kill",)))


class PlantedLauncher:
    """Writes what a run would leave: results.json with the next planted verdict, a history.

    A verdict of ``"stillborn"`` leaves what a run that died at start-up leaves: a run
    directory with no history and no results."""

    def __init__(
        self, verdicts: list[bool | str | None], anomaly: str = "lost-write", expected: bool = False
    ) -> None:
        self.verdicts = list(verdicts)
        self.anomaly = anomaly
        self.expected = expected
        self.seeds: list[int] = []

    def __call__(self, spec: TestSpec, run_dir: Path, timeout: float, log_path: Path) -> str | None:
        self.seeds.append(spec.nemesis.seed)
        assert spec.seed == spec.nemesis.seed
        verdict = self.verdicts.pop(0)
        directory = RunDir(run_dir)
        directory.nodes.mkdir(parents=True)
        if verdict == "stillborn":
            return None  # the worker exited after a traceback in the cluster's start
        ops = [
            {"process": "nemesis", "type": "invoke", "f": "kill", "value": {"nodes": ["n1"]}},
            {"process": "nemesis", "type": "ok", "f": "kill", "value": {"nodes": ["n1"]}},
            {"process": "nemesis", "type": "invoke", "f": "start", "value": {"nodes": ["n1"]}},
        ]
        directory.history_jsonl.write_text("".join(json.dumps(op) + "\n" for op in ops))
        if verdict is None:
            return "timed out after 1 s"
        anomalies = {} if verdict is not False else {self.anomaly: {"count": 3, "expected": self.expected}}
        directory.results.write_text(json.dumps({"valid": verdict, "anomalies": anomalies}))
        return None


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every reading advances 10 s: a budget of 100 s allows a handful of runs, deterministically."""
    now = [0.0]

    def monotonic() -> float:
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr(hunt_module, "_clock", monotonic)
    return now


def test_hunt_stops_at_the_first_invalid_run(tmp_path: Path, fake_clock: list[float]) -> None:
    launcher = PlantedLauncher([True, "unknown", False, True])
    seeds = iter([11, 22, 33, 44])
    result = hunt(SPEC, tmp_path, 1000, launch=launcher, seeds=lambda: next(seeds), out=io.StringIO())
    assert [run.verdict for run in result.runs] == [True, "unknown", False]
    assert launcher.seeds == [11, 22, 33]
    assert result.first_invalid is result.runs[2] and result.first_invalid.anomalies == {"lost-write": 3}
    assert result.seconds_to_first_anomaly is not None and result.seconds_to_first_anomaly > 0
    assert all(run.faults == 1 for run in result.runs)  # the kill invoke; its start is a heal
    record = json.loads((result.directory / HUNT_FILE).read_text())
    assert record["first_invalid"] == result.runs[2].run_dir and record["faults_injected"] == 3
    assert len({run.run_dir for run in result.runs}) == 3


def test_keep_going_spends_the_budget_and_a_stopped_run_is_unknown(
    tmp_path: Path, fake_clock: list[float]
) -> None:
    launcher = PlantedLauncher([False, None, True, True, True, True, True, True, True, True])
    result = hunt(SPEC, tmp_path, 100, keep_going=True, launch=launcher, out=io.StringIO())
    assert 2 < len(result.runs) < 10 and result.runs[0].verdict is False
    assert result.runs[1].verdict == "unknown" and "timed out" in str(result.runs[1].problem)
    assert len({run.seed for run in result.runs}) == len(result.runs)  # fresh seeds


def test_a_run_that_hangs_is_stopped_with_its_process_group(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    pid_file = tmp_path / "grandchild.pid"
    script.write_text(
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    problem = launch_isolated(
        SPEC, tmp_path / "run", 2.0, tmp_path / "run.log", worker=(sys.executable, str(script))
    )
    assert problem is not None and problem.startswith("timed out after 2 s")
    assert time.monotonic() - started < hunt_module.TERMINATE_GRACE_SECONDS  # SIGTERM was enough
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)  # polling a condition with a deadline
    else:
        pytest.fail("the run's own child outlived the stop")


def test_ctrl_c_of_the_hunt_stops_the_run_in_flight_with_its_process_group(tmp_path: Path) -> None:
    """The run is in a session of its own, so a Ctrl-C reaches only the hunt: the hunt must stop
    it (its cluster tears down on SIGTERM) rather than leave it running.

    The Ctrl-C is ``_thread.interrupt_main``, which does nothing while the process' Python-level
    SIGINT handler is SIG_IGN or SIG_DFL and whatever that handler does otherwise: Python's own
    handler is installed for the test, so that what an earlier test in the same worker left
    behind cannot swallow it (a CI run once waited out the whole 120 s here)."""
    script = tmp_path / "long.py"
    pid_file = tmp_path / "run.pid"
    script.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    interrupted = threading.Event()

    def interrupt_once_running() -> None:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)  # polling a condition with a deadline
        interrupted.set()
        _thread.interrupt_main()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            launch_isolated(
                SPEC, tmp_path / "run", 120.0, tmp_path / "run.log", worker=(sys.executable, str(script))
            )
    except pytest.fail.Exception:
        assert interrupted.is_set(), "the run wrote no pid file within 60 s: nothing was interrupted"
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    run = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(run, 0)  # stopped and reaped before the interrupt went on


def test_a_run_that_finishes_leaves_no_problem(tmp_path: Path) -> None:
    problem = launch_isolated(
        SPEC, tmp_path / "run", 30.0, tmp_path / "run.log", worker=(sys.executable, "-c", "pass")
    )
    assert problem is None


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--budget") == seconds


@pytest.mark.parametrize("text", ["", "10x", "-5m", "0", "m"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match="--budget"):
        parse_duration(text, "--budget")


def test_a_hunt_with_stop_on_goes_past_invalid_runs_without_those_anomalies(
    tmp_path: Path, fake_clock: list[float]
) -> None:
    launcher = PlantedLauncher([False] * 9, anomaly="duplicate")
    seeds = iter(range(9))
    result = hunt(
        SPEC,
        tmp_path,
        75,
        launch=launcher,
        seeds=lambda: next(seeds),
        out=io.StringIO(),
        stop_on=frozenset({"lost-write"}),
    )
    assert len(result.runs) >= 2 and all(run.verdict is False for run in result.runs)  # the budget ended it
    assert result.first_invalid is None and result.seconds_to_first_anomaly is None
    launcher = PlantedLauncher([False], anomaly="lost-write")
    found = hunt(
        SPEC,
        tmp_path,
        35,
        launch=launcher,
        seeds=lambda: 9,
        out=io.StringIO(),
        stop_on=frozenset({"lost-write"}),
    )
    assert found.first_invalid is found.runs[0]


def test_an_unexpected_only_hunt_goes_past_runs_whose_anomalies_a_rule_permits(
    tmp_path: Path, fake_clock: list[float]
) -> None:
    permitted = PlantedLauncher([False] * 9, anomaly="duplicate", expected=True)
    seeds = iter(range(9))
    result = hunt(
        SPEC,
        tmp_path,
        75,
        launch=permitted,
        seeds=lambda: next(seeds),
        out=io.StringIO(),
        unexpected_only=True,
    )
    assert len(result.runs) >= 2 and result.first_invalid is None  # the budget ended it
    assert all(run.unexpected == () for run in result.runs)
    unpermitted = PlantedLauncher([False], anomaly="lost-write", expected=False)
    found = hunt(
        SPEC, tmp_path, 35, launch=unpermitted, seeds=lambda: 9, out=io.StringIO(), unexpected_only=True
    )
    assert found.first_invalid is found.runs[0] and found.runs[0].unexpected == ("lost-write",)
    plain = hunt(
        SPEC,
        tmp_path,
        35,
        launch=PlantedLauncher([False], anomaly="duplicate", expected=True),
        seeds=lambda: 10,
        out=io.StringIO(),
    )
    assert plain.first_invalid is plain.runs[0], "without the option any invalid run ends the hunt"


def test_the_stop_on_flag_names_unknown_anomalies() -> None:
    from harness.cli.hunt import parse_anomaly_names

    assert parse_anomaly_names("lost-write,duplicate") == {"lost-write", "duplicate"}
    with pytest.raises(UsageError, match=r"--stop-on\[0\]: unknown name 'lost'"):
        parse_anomaly_names("lost")


def test_a_hunt_whose_runs_die_before_any_fault_gives_up(tmp_path: Path, fake_clock: list[float]) -> None:
    launcher = PlantedLauncher(["stillborn"] * 10)
    out = io.StringIO()
    result = hunt(SPEC, tmp_path, 10_000, keep_going=True, launch=launcher, out=out)
    assert len(result.runs) == hunt_module.STILLBORN_LIMIT  # not the whole budget
    assert result.gave_up is not None and "before their first fault" in result.gave_up
    assert "no results" in result.gave_up and str(result.directory) in result.gave_up
    assert "giving up" in out.getvalue()
    record = json.loads((result.directory / HUNT_FILE).read_text())
    assert record["finished"] and record["gave_up"] == result.gave_up


def test_only_an_unbroken_row_of_dead_runs_gives_up(tmp_path: Path, fake_clock: list[float]) -> None:
    """A run that got going (a valid verdict, or faults injected) breaks the row."""
    launcher = PlantedLauncher(["stillborn", "stillborn", True, "stillborn", "stillborn", None, False])
    result = hunt(SPEC, tmp_path, 10_000, launch=launcher, out=io.StringIO())
    assert result.gave_up is None  # the timed-out run (None) had injected a fault
    assert len(result.runs) == 7 and result.first_invalid is result.runs[-1]


def test_the_hunts_engine_and_spark_connect_server_reach_every_run_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]
) -> None:
    """``engine``/``remote`` become the worker's ``--engine``/``--remote``: each run is checked
    through the hunt's one server, not a JVM of its own (:mod:`harness.run.check_server`)."""
    workers: list[tuple[str, ...]] = []
    planted = PlantedLauncher([True, True])

    def launch(
        spec: TestSpec, run_dir: Path, timeout: float, log_path: Path, *, worker: tuple[str, ...]
    ) -> None:
        workers.append(worker)
        planted(spec, run_dir, timeout, log_path)

    monkeypatch.setattr(hunt_module, "launch_isolated", launch)
    hunt(
        SPEC, tmp_path, 20, keep_going=True, out=io.StringIO(), engine="spark", remote="sc://127.0.0.1:15002"
    )
    assert workers and all(
        worker == (*hunt_module.WORKER, "--engine", "spark", "--remote", "sc://127.0.0.1:15002")
        for worker in workers
    )
