"""Shrinking a stored failing run by replaying candidate scenarios (``tidemark shrink``).

:mod:`nemesis.shrink` turns the run's recorded fault timeline into scenario steps and removes
what the anomaly does not need; this module is its oracle and its output.  A candidate
*reproduces* when at least ``threshold`` of ``replays`` replays report every anomaly the
original run reported -- replays stop early once the answer is certain either way, so a
hopeless candidate costs two runs, not five.  A quick search (``search_replays``) judges the
candidates on fewer replays that must all reproduce (a miss ends the candidate at once) and
measures only the original and the result on the full count; when the result falls short of the
threshold it steps back through the accepted candidates to the last that does not.  That halves
the cost of most candidates -- each replay of a random run's timeline is a minute or two -- at
the risk, paid for by the step back, of accepting a candidate that reproduces only sometimes.
Every replay is a real run of the scenario
(stored under ``<store>/shrink-<name>/``), checked by the pandas engine.

The result is a scenario file that ``tidemark run --scenario FILE`` runs like any other, with
the settings and workload of the original run, an expectation of the original anomalies, and
its measured reproduction rate in the description.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import parse_scenario
from nemesis.shrink import Step, fault_count, shrink, timeline_steps
from nemesis.spec import NemesisSpec
from testbed.record.history import read_history
from testbed.record.rundir import RunDir


class ShrinkError(ValueError):
    """A run that cannot be shrunk (not invalid, no faults, unreadable); the message says why."""


@dataclasses.dataclass
class ShrinkOutcome:
    scenario_path: Path
    original_faults: int
    faults: int
    reproduced: int
    replays: int
    candidates: int
    complete: bool = True
    """False when the budget ended the shrink before every move was tried."""
    stepped_back: int = 0
    """Accepted candidates given up after the quick search's result fell short on re-measuring."""


def scenario_definition(spec: TestSpec, steps: list[Step], anomalies: list[str], note: str) -> dict[str, Any]:
    """A scenario file's content: the run's set-up, ``steps``, and the anomalies it must show."""
    return {
        "name": f"shrunk-{spec.name}",
        "description": note,
        "node_count": spec.node_count,
        "workload": {k: v for k, v in spec.workload.to_dict().items() if k != "name" and v is not None},
        "settings": dict(spec.settings),
        "target": spec.target,
        "expected": [{"valid": False, "anomalies": anomalies}],
        "step": steps,
    }


@dataclasses.dataclass
class _Replays:
    """The oracle: replays candidate timelines of ``spec`` as scenarios and counts the candidates."""

    spec: TestSpec
    run_dir: Path
    anomalies: list[str]
    replay: Callable[[TestSpec, Path], set[str]]
    store: Path
    log: Callable[[str], None]
    candidates: int = 0

    def successes(self, candidate: list[Step], count: int, need: int, *, early: bool) -> tuple[int, int]:
        """(replays that reported every anomaly, replays run) of ``count``; with ``early``,
        stopping once ``need`` is reached or out of reach."""
        definition = scenario_definition(self.spec, candidate, self.anomalies, "candidate")
        scenario = parse_scenario(definition, f"shrink candidate of {self.run_dir}")
        replay_spec = dataclasses.replace(self.spec, nemesis=NemesisSpec()).with_scenario(scenario)
        good = runs = 0
        for _ in range(count):
            runs += 1
            good += set(self.anomalies) <= self.replay(replay_spec, self.store)
            if early and (good >= need or runs - good > count - need):
                break
        return good, runs

    def judged(self, candidate: list[Step], count: int, need: int) -> bool:
        """Whether ``candidate`` reproduces in ``need`` of ``count`` replays (logged, counted)."""
        self.candidates += 1
        good, runs = self.successes(candidate, count, need, early=True)
        self.log(f"  candidate {self.candidates}: {fault_count(candidate)} faults, reproduced {good}/{runs}")
        return good >= need

    def measured(
        self, chosen: list[Step], earlier: list[list[Step]], count: int, need: int
    ) -> tuple[list[Step], int, int, int]:
        """``chosen`` measured on all ``count`` replays -- or, while it falls short of ``need``, the
        candidates accepted before it (``earlier``, last first): (the candidate kept, its
        reproducing replays, its replays, how many accepted candidates were given up)."""
        good, runs = self.successes(chosen, count, need, early=False)
        earlier = list(earlier)
        stepped_back = 0
        while good < need and earlier:
            self.log(
                f"{fault_count(chosen)} faults reproduced in {good} of {runs} replays, short of {need}: "
                "stepping back to the candidate accepted before"
            )
            chosen = earlier.pop()
            stepped_back += 1
            good, runs = self.successes(chosen, count, need, early=False)
        return chosen, good, runs, stepped_back


def shrink_run(
    run_dir: Path,
    store_dir: Path,
    *,
    replays: int = 5,
    threshold: float = 0.8,
    out_path: Path | None = None,
    log: Callable[[str], None] = print,
    replay: Callable[[TestSpec, Path], set[str]] | None = None,
    budget_seconds: float | None = None,
    anomalies: list[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    search_replays: int | None = None,
) -> ShrinkOutcome:
    """Shrink the failing run in ``run_dir`` and write the smallest reproducing scenario.

    ``replay(spec, store)`` runs one candidate and returns the anomalies it found (default:
    :func:`replay_once`; tests plant one).  Raises :class:`ShrinkError` when the run is not
    invalid, has no faults, or its original timeline does not reproduce.  With
    ``budget_seconds`` no new candidate is tried after that long: the smallest scenario found
    so far is written (every candidate is a batch of real runs, so an unbounded shrink of a
    long timeline can take hours).  ``search_replays``: the quick search of the module docstring
    (None: every candidate is judged on ``replays`` and ``threshold``).
    """
    started = clock()
    spec, target, steps = _failing_run(run_dir, anomalies)
    oracle = _Replays(spec, run_dir, target, replay or replay_once, store_dir / f"shrink-{spec.name}", log)
    needed = math.ceil(threshold * replays)

    def reproduces(candidate: list[Step]) -> bool:
        if search_replays is None:
            return oracle.judged(candidate, replays, needed)
        return oracle.judged(candidate, search_replays, search_replays)

    log(f"shrinking {run_dir}: {fault_count(steps)} faults, anomalies {', '.join(target)}")
    if not oracle.judged(steps, replays, needed):
        raise ShrinkError(
            f"{run_dir}: its fault timeline, replayed as a scenario, does not reproduce "
            f"{', '.join(target)} in {needed} of {replays} replays: the anomaly depends on more than "
            "the faults (timing, load); nothing written"
        )
    result = shrink(
        steps,
        reproduces,
        log=log,
        out_of_time=lambda: budget_seconds is not None and clock() - started > budget_seconds,
    )
    if not result.complete:
        log(f"budget of {budget_seconds:g} s spent: keeping the smallest scenario found so far")
    earlier = result.trail[:-1] if search_replays is not None else []
    chosen, good, runs, stepped_back = oracle.measured(result.steps, earlier, replays, needed)
    note = (
        f"Shrunk by tidemark shrink from {run_dir} ({fault_count(steps)} faults -> "
        f"{fault_count(chosen)}); reproduced {', '.join(target)} in {good} of {runs} replays."
    )
    path = out_path or run_dir / "shrunk.toml"
    definition = scenario_definition(spec, chosen, target, note)
    parse_scenario(definition, str(path))  # what is written must load
    path.write_text(tomli_w.dumps(definition), encoding="utf-8")
    return ShrinkOutcome(
        path,
        fault_count(steps),
        fault_count(chosen),
        good,
        runs,
        oracle.candidates,
        result.complete,
        stepped_back,
    )


def _failing_run(run_dir: Path, anomalies: list[str] | None) -> tuple[TestSpec, list[str], list[Step]]:
    """The stored run's spec, the anomalies to reproduce (``anomalies``, else all it reported) and
    its fault timeline as steps; :class:`ShrinkError` when it is not invalid, did not report
    ``anomalies`` or injected no faults."""
    directory = RunDir(run_dir)
    spec = TestSpec.from_dict(directory.read_spec())
    try:
        results = json.loads(directory.results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ShrinkError(f"{directory.results}: cannot read the run's verdict: {error}") from None
    if results.get("valid") is not False:
        raise ShrinkError(
            f"{run_dir}: the run is not invalid (verdict {results.get('valid')!r}): nothing to shrink"
        )
    target = sorted(results.get("anomalies", {}))
    if anomalies is not None:
        missing = sorted(set(anomalies) - set(target))
        if missing:
            raise ShrinkError(
                f"{run_dir}: the run did not report {', '.join(missing)} (it reported {', '.join(target)})"
            )
        target = sorted(anomalies)
    ops, _ = read_history(directory.history_jsonl, skip_bad_lines=True)
    steps = timeline_steps(ops)
    if fault_count(steps) == 0:
        raise ShrinkError(
            f"{run_dir}: the run injected no faults (a scripted scenario? shrink its file instead)"
        )
    return spec, target, steps


def replay_once(spec: TestSpec, store_dir: Path) -> set[str]:
    """Run ``spec`` once (a scenario run, checked with pandas); the anomalies it found."""
    outcome = run_test(spec, store_dir, engine="pandas", out=io.StringIO())
    return set((outcome.results or {}).get("anomalies", {}))
