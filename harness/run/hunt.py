"""Hunting: random tests back to back under a time budget, until one finds an anomaly.

A chaos harness is worth what it finds by itself.  A hunt takes one test spec (settings,
workload, nemesis mix -- single faults and fault packages) and runs it again and again, each
run with a fresh nemesis seed and stored like any other run, until a run's verdict is invalid
(or, with ``keep_going``, until the budget is spent).  It then reports the time to the first
anomaly, the runs, the faults injected, and the failing run's directory; ``hunt.json`` in the
hunt's directory keeps the same, run by run.

A hunt survives its own failures.  Each run is a child process in a session of its own
(``python -m harness.run.hunt_worker``), so a run that hangs is stopped -- SIGTERM to its
process group (its cluster tears itself down), SIGKILL after a grace period -- and recorded
``unknown``; and whatever cluster a dead run left behind is removed by its owner label before
the next run starts (:func:`testbed.cluster.docker_labels.remove_orphans`, which every cluster
start also calls).  The budget bounds when a run may *start*: a run that started in time
finishes, so one run may end past the budget by up to the run timeout.

A hunt whose runs cannot get going gives up instead of spending its budget on them: after
:data:`STILLBORN_LIMIT` runs in a row that ended ``unknown`` before their first fault (the
cluster did not start, the spec cannot run on it), it stops and says why (``gave_up``, with the
last run's problem and log).  Such a hunt has measured nothing; an unlucky run or two among
healthy ones is not that, so only an unbroken row counts.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from harness.run.spec import TestSpec
from nemesis.packages import applicable_packages
from nemesis.spec import (
    HUNT_MIX,
    HUNT_WEIGHTS,
    PACKAGE_GRACE_SECONDS,
    TXN_HUNT_MIX,
    NemesisSpec,
    weights_within,
)
from testbed.record import store
from testbed.record.rundir import RunDir

HUNT_FILE = "hunt.json"
_clock = time.monotonic
"""The hunt's clock (tests replace it to make the budget deterministic)."""
TERMINATE_GRACE_SECONDS = 60.0
"""How long a timed-out run gets to tear its cluster down after SIGTERM before SIGKILL."""
CHECK_SECONDS = 120.0
"""Allowance per run for cluster start, final drain, dumps and the check, beyond its time limit."""
STILLBORN_LIMIT = 3
"""Runs in a row that ended unknown before any fault, after which a hunt gives up."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` -> seconds; ValueError saying what is expected otherwise."""
    match = _DURATION.match(str(text))
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"{text!r}: expected a positive duration such as 90s, 10m or 1h")
    return float(match[1]) * _UNIT_SECONDS[match[2]]


def default_mix(spec: TestSpec, mix: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``mix`` (default :data:`nemesis.spec.HUNT_MIX`, or :data:`nemesis.spec.TXN_HUNT_MIX` for a
    transactional workload) without the fault packages that cannot apply to ``spec``'s cluster --
    e.g. the three-replica choreographies on a topic of two replicas -- so that a default mix fits
    any cluster (a named package that cannot apply is refused instead:
    ``harness.targets.registry.check_nemesis_packages``)."""
    if mix is None:
        mix = TXN_HUNT_MIX if spec.workload.txn else HUNT_MIX
    context = spec.package_context()
    return mix if context is None else applicable_packages(mix, context)


def default_nemesis(spec: TestSpec) -> NemesisSpec:
    """``spec``'s nemesis drawing the default mix (:func:`default_mix`) with its measured draw
    weights (:data:`nemesis.spec.HUNT_WEIGHTS`, those of the names the cluster kept; none for
    the transactional mix) -- what a hunt draws when ``--nemesis`` is not given."""
    faults = default_mix(spec)
    weights = () if spec.workload.txn else weights_within(HUNT_WEIGHTS, faults)
    return dataclasses.replace(spec.nemesis, faults=faults, weights=weights)


def default_run_timeout(spec: TestSpec) -> float:
    """A run that takes longer than this hangs: twice its time limit and drain, plus set-up and
    check, plus the grace a fault package in flight at the time limit gets to finish."""
    return 2 * (spec.time_limit + spec.drain_timeout) + CHECK_SECONDS + PACKAGE_GRACE_SECONDS


@dataclasses.dataclass(frozen=True)
class HuntRun:
    """One run of a hunt, as ``hunt.json`` records it."""

    seed: int
    run_dir: str
    verdict: bool | str
    """True (valid), False (invalid), or "unknown" (incomplete, timed out, or not checked)."""
    anomalies: dict[str, int]
    faults: int
    """Fault ops the nemesis invoked (packages counted by the faults inside them)."""
    seconds: float
    problem: str | None = None
    unexpected: tuple[str, ...] = ()
    """The anomalies no rule of the run's configuration permits (``expected`` false)."""


@dataclasses.dataclass
class HuntResult:
    directory: Path
    runs: list[HuntRun]
    elapsed_seconds: float
    first_invalid: HuntRun | None
    seconds_to_first_anomaly: float | None
    finished: bool = False
    """The hunt ended by itself (budget spent, anomaly found, or gave up), not by an interruption."""
    gave_up: str | None = None
    """Why the hunt stopped early without a verdict (its runs die before their first fault)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "finished": self.finished,
            "gave_up": self.gave_up,
            "runs": [dataclasses.asdict(run) for run in self.runs],
            "elapsed_seconds": round(self.elapsed_seconds, 1),
            "first_invalid": self.first_invalid.run_dir if self.first_invalid else None,
            "seconds_to_first_anomaly": (
                round(self.seconds_to_first_anomaly, 1) if self.seconds_to_first_anomaly is not None else None
            ),
            "faults_injected": sum(run.faults for run in self.runs),
        }


RunLauncher = Callable[[TestSpec, Path, float, Path], str | None]
"""``(spec, run_dir, timeout, log_path) -> problem``: run one test into ``run_dir``."""


def hunt(
    spec: TestSpec,
    store_dir: Path,
    budget_seconds: float,
    *,
    keep_going: bool = False,
    run_timeout: float | None = None,
    out: TextIO = sys.stderr,
    launch: RunLauncher | None = None,
    seeds: Callable[[], int] = lambda: secrets.randbelow(2**31),
    stop_on: frozenset[str] = frozenset(),
    unexpected_only: bool = False,
    engine: str = "pandas",
    remote: str | None = None,
) -> HuntResult:
    """Run ``spec`` with fresh seeds until an invalid verdict or the end of ``budget_seconds``.

    With ``stop_on`` (anomaly names) only a run reporting one of those counts as the find: a
    hunt for ``lost-write`` under a configuration that also permits, say, ``duplicate`` goes on
    past runs that show only the permitted anomaly.  With ``unexpected_only`` a run counts only
    when one of its anomalies is one no rule permits: a hunt against a system whose configuration
    permits some anomaly (producers without idempotence: duplicates) stops on the rest.

    Runs are stored as ``store_dir/<spec.name>/<timestamp>``; the hunt's own record goes to
    ``store_dir/<spec.name>/hunt-<timestamp>/hunt.json``, rewritten after every run so a
    killed hunt keeps what it found.  ``launch`` runs one test (default: a child process,
    :func:`launch_isolated`, checking with ``engine`` -- through the Spark Connect server at
    ``remote`` when given, which outlives every run); ``seeds`` draws each run's seed (tests fix it).
    """
    checking = ("--engine", engine, *(("--remote", remote) if remote else ()))
    launch = launch or functools.partial(launch_isolated, worker=(*WORKER, *checking))
    timeout = run_timeout if run_timeout is not None else default_run_timeout(spec)
    directory = store_dir / store.safe_name(spec.name) / f"hunt-{_stamp()}"
    directory.mkdir(parents=True, exist_ok=False)
    result = HuntResult(directory, [], 0.0, None, None)
    started = _clock()
    while _clock() - started < budget_seconds:
        seed = seeds()
        run_spec = dataclasses.replace(spec, seed=seed, nemesis=dataclasses.replace(spec.nemesis, seed=seed))
        run_dir = store_dir / store.safe_name(spec.name) / _stamp()
        run_started = _clock()
        problem = launch(run_spec, run_dir, timeout, _run_log(directory, seed))
        run = read_run(run_dir, seed, _clock() - run_started, problem)
        result.runs.append(run)
        result.elapsed_seconds = _clock() - started
        found = (
            run.verdict is False
            and (not stop_on or bool(stop_on & set(run.anomalies)))
            and (not unexpected_only or bool(run.unexpected))
        )
        if found and result.first_invalid is None:
            result.first_invalid = run
            result.seconds_to_first_anomaly = result.elapsed_seconds
        store.write_json(directory / HUNT_FILE, result.to_dict())
        print(_describe(len(result.runs), run, result.elapsed_seconds), file=out, flush=True)
        if found and not keep_going:
            break
        result.gave_up = _stillborn_row(result.runs, directory)
        if result.gave_up is not None:
            print(f"hunt: giving up: {result.gave_up}", file=out, flush=True)
            break
    result.elapsed_seconds = _clock() - started
    result.finished = True
    store.write_json(directory / HUNT_FILE, result.to_dict())
    return result


def _run_log(directory: Path, seed: int) -> Path:
    """Where the hunt in ``directory`` keeps the output of its run with ``seed``."""
    return directory / f"seed{seed}.log"


def _stillborn_row(runs: list[HuntRun], directory: Path) -> str | None:
    """Why to give up, when the last :data:`STILLBORN_LIMIT` runs all died before a fault."""
    last = runs[-STILLBORN_LIMIT:]
    if len(last) < STILLBORN_LIMIT or any(run.verdict != "unknown" or run.faults for run in last):
        return None
    return (
        f"{STILLBORN_LIMIT} runs in a row ended unknown before their first fault; the last: "
        f"{last[-1].problem or 'no verdict'} (its log: {_run_log(directory, last[-1].seed)})"
    )


def read_run(run_dir: Path, seed: int, seconds: float, problem: str | None) -> HuntRun:
    """What one finished (or stopped) run left: its verdict, anomalies and fault count."""
    directory = RunDir(run_dir)
    verdict: bool | str = "unknown"
    anomalies: dict[str, int] = {}
    unexpected: tuple[str, ...] = ()
    try:
        results = json.loads(directory.results.read_text(encoding="utf-8"))
        verdict = results["valid"] if problem is None else "unknown"
        anomalies = {name: int(entry["count"]) for name, entry in results.get("anomalies", {}).items()}
        unexpected = tuple(
            sorted(name for name, entry in results.get("anomalies", {}).items() if not entry.get("expected"))
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        problem = problem or f"no results: {error}"
    return HuntRun(
        seed,
        str(run_dir),
        verdict,
        anomalies,
        _count_faults(directory),
        round(seconds, 1),
        problem,
        unexpected,
    )


def _count_faults(directory: RunDir) -> int:
    from nemesis.spec import FAULT_KINDS

    try:
        lines = directory.history_jsonl.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    count = 0
    for line in lines:
        if '"nemesis"' not in line:
            continue
        try:
            op = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed run
        count += op.get("type") == "invoke" and op.get("f") in FAULT_KINDS
    return count


WORKER = (sys.executable, "-m", "harness.run.hunt_worker")


def launch_isolated(
    spec: TestSpec, run_dir: Path, timeout: float, log_path: Path, *, worker: tuple[str, ...] = WORKER
) -> str | None:
    """Run one test in a child process of its own session; stop it if it outlives ``timeout``.

    Returns None when the child finished, else what went wrong (it hung, or died).  After a
    timeout: SIGTERM to the child's process group (the cluster tears down), SIGKILL after
    :data:`TERMINATE_GRACE_SECONDS`, then the dead run's containers are removed by label.  An
    interrupt of the hunt itself (KeyboardInterrupt) stops the child the same way and is re-raised.
    """
    spec_path = log_path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    command = [*worker, str(spec_path), str(run_dir)]
    with log_path.open("w", encoding="utf-8") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(child)
            _remove_orphans()
            return f"timed out after {timeout:g} s (stopped; see {log_path})"
        except BaseException:
            # Ctrl-C (or SIGTERM turned into an exception) reaches only the hunt: the run is in
            # a session of its own, so without this it would go on, cluster and all, after the
            # hunt is gone.  Stopped the same way as a run that hangs; then the interrupt goes on.
            _stop(child)
            raise
    spec_path.unlink(missing_ok=True)
    if code < 0:
        _remove_orphans()
        return f"died of signal {-code} (see {log_path})"
    return None


def _stop(child: subprocess.Popen[bytes]) -> None:
    for signum, grace in ((signal.SIGTERM, TERMINATE_GRACE_SECONDS), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue


def _remove_orphans() -> None:
    from testbed.cluster.docker_labels import remove_orphans

    try:
        import docker

        remove_orphans(docker.from_env())
    except Exception as error:  # the next cluster start tries again
        print(f"hunt: could not remove a dead run's cluster yet: {error}", file=sys.stderr)


def _stamp() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _describe(number: int, run: HuntRun, elapsed: float) -> str:
    word = "valid" if run.verdict is True else "INVALID" if run.verdict is False else "unknown"
    found = ", ".join(f"{name} x{count}" for name, count in run.anomalies.items())
    return (
        f"run {number} (seed {run.seed}): {word}{f' ({found})' if found else ''}; "
        f"{run.faults} faults, {run.seconds:.0f} s; {elapsed / 60:.1f} min elapsed"
        + (f"; {run.problem}" if run.problem else "")
    )
