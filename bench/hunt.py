"""Time to first anomaly of the random nemesis (no scenario) for every buggy setting of the
catalogue, and the same nemesis with every switch safe as the baseline.

    .venv/bin/python bench/hunt.py [--hunts 3] [--budget 10m] [--only kip101-loss,...]
                                   [--baseline-share 1.0] [--mix NAME[*N],...] [--json FILE]

The catalogue is the scenario library: every scenario that names a ``switch`` (the setting
that turns its bug on) gives one *mode*.  Per mode it runs ``--hunts`` hunts
(:func:`harness.run.hunt.hunt`, each run fresh-seeded, the default mix
:data:`nemesis.spec.HUNT_MIX` drawn with :data:`nemesis.spec.HUNT_WEIGHTS` -- plus
:data:`nemesis.spec.POWER_LOSS_MIX` where the scenario's bug involves power loss -- no scripted steps; a power-loss mode's node faults never strike a majority at once,
:data:`MINORITY_TARGETS`) under the scenario's own set-up -- its
cluster size, workload and settings (the era the bug lived in: e.g. no ELR for KIP-101) -- with
the switch on.  A hunt stops at the first run that reports the scenario's anomaly (its buggy
expectation's ``anomalies``); the figure is the time from the hunt's start to the end of that
run.  Two scenarios with the same switch are one mode (the one whose anomaly is ``lost-write``).

The baseline then spends ``--baseline-share`` x the mode's total hunting time (or
``--baseline-minutes MODE=MINUTES,...``: a fixed length, which with ``--hunts 0`` tops up the safe
time of earlier measurements to match their hunting time) on the same
set-up with **every** switch of the catalogue safe (the value the scenarios' valid
expectations name, so also ``unclean.leader.election.enable=false`` and
``min.insync.replicas=2``), going on to the end of its budget; it counts runs with an
anomaly the configuration does not permit (``expected`` false in ``results.json``), and, as the
control, runs that report the mode's target anomaly at all: where the configuration permits
that anomaly in both settings (power loss without fsync permits lost writes), a bug is told
from permitted loss only by the buggy hunts finding it far more often than the safe baseline.  Targets
(issue 16): median time to first anomaly <= 10 min over >= 3 hunts per mode, 0 unexpected
anomalies in the baseline.

``--mix`` hunts with a candidate mix instead of :data:`nemesis.spec.HUNT_MIX` and its weights (names as
``--nemesis`` takes them, ``name*N`` a draw weight), so that a new default is chosen by measuring
it against today's figures before it replaces the constant; a power-loss mode still adds
:data:`nemesis.spec.POWER_LOSS_MIX`, and every mode drops the packages its cluster cannot take.  Every run directory stays under ``--store`` (default a directory
in ``$TMPDIR`` printed at the start).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# The repository first: bench/checker.py would otherwise shadow the checker package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.run.hunt import HuntResult, default_mix, hunt, parse_duration
from harness.run.spec import TestSpec
from nemesis.scenario import Scenario, library, load_scenario
from nemesis.spec import (
    HUNT_MIX,
    HUNT_WEIGHTS,
    NEMESIS_CHOICES,
    POWER_LOSS,
    POWER_LOSS_MIX,
    NemesisSpec,
    NemesisSpecError,
    parse_weighted_list,
    weights_within,
    written_mix,
)
from workloads.queue import QueueSpec


def catalogue() -> dict[str, Scenario]:
    """Switch (``key=value``) -> the scenario that stands for it."""
    chosen: dict[str, Scenario] = {}
    for name in sorted(library()):
        scenario = load_scenario(name)
        if not scenario.switch:
            continue
        current = chosen.get(scenario.switch)
        if current is None or "lost-write" in target_anomalies(scenario):
            chosen[scenario.switch] = scenario
    return chosen


def target_anomalies(scenario: Scenario) -> frozenset[str]:
    """The anomalies the scenario's buggy expectation names (what counts as finding the bug)."""
    switch = scenario.switch_setting
    assert switch is not None
    expectation = scenario.expectation_for({**scenario.settings, switch[0]: switch[1]})
    if expectation is None:
        raise SystemExit(f"{scenario.name}: no expectation for its switch {scenario.switch}")
    return frozenset(expectation.anomalies)


def safe_settings(scenarios: dict[str, Scenario]) -> dict[str, str]:
    """Every switch at the value the scenario's valid expectation names."""
    safe: dict[str, str] = {}
    for scenario in scenarios.values():
        switch = scenario.switch_setting
        assert switch is not None
        for expectation in scenario.expected:
            value = dict(expectation.when).get(switch[0])
            if expectation.valid is True and value is not None and value != switch[1]:
                safe[switch[0]] = str(value)
    return safe


Weights = tuple[tuple[str, int], ...]


def mix_for(scenario: Scenario, mix: tuple[str, ...] = HUNT_MIX) -> tuple[str, ...]:
    """``mix`` (the default mix unless a candidate is measured), with power loss and its packages
    where the scenario's bug needs it (each name once)."""
    if any(step.get("fault") == POWER_LOSS for step in scenario.steps):
        return tuple(dict.fromkeys(mix + POWER_LOSS_MIX))
    return mix


def parse_mix(text: str) -> tuple[tuple[str, ...], Weights]:
    """``--mix``: the candidate's names and draw weights; a one-line SystemExit naming the flag,
    the item and the known names when it is not a mix."""
    try:
        names, weights = parse_weighted_list(text, NEMESIS_CHOICES, "--mix")
    except NemesisSpecError as error:
        raise SystemExit(f"bench/hunt.py: {error}") from None
    if not names:
        raise SystemExit("bench/hunt.py: --mix: names no fault")
    return names, weights


MINORITY_TARGETS: tuple[str, ...] = ("one", "minority", "leader")
"""The node-fault targets of a power-loss mode's hunts: never a majority at once.

Without ``flush.messages=1`` a power loss of a majority loses acknowledged writes under every
setting (the ``flush never + power-loss`` rule permits it), so with the default targets a hunt
for KIP-966 stopped at such a loss as readily as at the bug, and the safe baseline found the
same.  With a majority always powered, an acknowledged write outlives any one power loss unless
an election rule lets the node that lost it lead again -- the bug under test -- so a lost write
in the safe baseline is a finding of its own."""


def spec_for(
    scenario: Scenario,
    settings: dict[str, str],
    time_limit: float,
    interval: float,
    mix: tuple[str, ...] = HUNT_MIX,
    weights: Weights = HUNT_WEIGHTS,
) -> TestSpec:
    """A mode's hunt: the scenario's set-up with ``settings`` over it, the nemesis drawing ``mix``
    (with ``weights``) as :func:`mix_for` extends it and its cluster lets it."""
    faults = mix_for(scenario, mix)
    spec = TestSpec(
        name=f"hunt-{scenario.name}",
        node_count=scenario.node_count,
        time_limit=time_limit,
        settings={**scenario.settings, **settings},
        workload=QueueSpec.from_dict(scenario.workload),
        nemesis=NemesisSpec(
            faults=faults,
            interval_seconds=interval,
            targets=MINORITY_TARGETS if POWER_LOSS in faults else None,
        ),
    )
    # Only the packages that fit the scenario's cluster: KIP-279's topic has two replicas.
    fitting = default_mix(spec, faults)
    kept = weights_within(weights, fitting)
    return dataclasses.replace(spec, nemesis=dataclasses.replace(spec.nemesis, faults=fitting, weights=kept))


def _anomalies(run_dir: str) -> tuple[bool | None, dict[str, Any]]:
    try:
        results = json.loads((Path(run_dir) / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, {}
    return results.get("valid"), results.get("anomalies", {})


def unexpected_runs(result: HuntResult) -> list[str]:
    """Runs of a hunt whose results name an anomaly the configuration does not permit."""
    found = []
    for run in result.runs:
        valid, anomalies = _anomalies(run.run_dir)
        names = [name for name, entry in anomalies.items() if not entry.get("expected")]
        if names and valid is False:
            found.append(f"{run.run_dir} ({', '.join(names)})")
    return found


def target_runs(result: HuntResult, targets: frozenset[str]) -> list[str]:
    """Runs of a hunt that report one of ``targets``, permitted or not (the baseline's control)."""
    found = []
    for run in result.runs:
        valid, anomalies = _anomalies(run.run_dir)
        names = sorted(targets & set(anomalies))
        if names and valid is False:
            found.append(f"{run.run_dir} ({', '.join(names)})")
    return found


def parse_minutes_per_mode(text: str, names: set[str]) -> dict[str, float]:
    """``--baseline-minutes``: ``kip101-loss=6,kafka7128-isr-join=12.5`` -> minutes per mode."""
    minutes: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name not in names:
            raise SystemExit(f"--baseline-minutes: {name!r} is not a mode ({', '.join(sorted(names))})")
        try:
            minutes[name] = float(value)
        except ValueError:
            raise SystemExit(f"--baseline-minutes: {item!r}: expected MODE=MINUTES") from None
    return minutes


def median_minutes(times: list[float | None]) -> float | None:
    """Median time to the first find in minutes, a hunt that found nothing counting as slower
    than any that did; None when that median is such a hunt (JSON has no infinity)."""
    if not times:
        return None
    median = statistics.median_low([t if t is not None else float("inf") for t in times])
    return None if median == float("inf") else round(median / 60, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hunts", type=int, default=3)
    parser.add_argument("--budget", default="10m", help="per hunt")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds of faults per run")
    parser.add_argument("--interval", type=float, default=5.0, help="mean quiet time before a fault")
    parser.add_argument("--baseline-share", type=float, default=1.0)
    parser.add_argument(
        "--baseline-minutes",
        default="",
        help="per mode: MODE=MINUTES,... -- a baseline of that length instead of the share "
        "(with --hunts 0: tops up the safe time of earlier measurements)",
    )
    parser.add_argument(
        "--mix",
        default="",
        metavar="NAME[*N],...",
        help="a candidate mix instead of nemesis.spec.HUNT_MIX (name*N: drawn N times as often)",
    )
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    budget = parse_duration(args.budget)
    mix, weights = parse_mix(args.mix) if args.mix else (HUNT_MIX, HUNT_WEIGHTS)
    store = args.store or Path(tempfile.mkdtemp(prefix="tidemark-bench-hunt-"))
    written = written_mix(mix, weights)
    print(
        f"store: {store}; mix: {written} (+{','.join(POWER_LOSS_MIX)} for power-loss bugs)",
        flush=True,
    )
    scenarios = catalogue()
    safe = safe_settings(scenarios)
    fixed_minutes = parse_minutes_per_mode(args.baseline_minutes, {s.name for s in scenarios.values()})
    rows: list[dict[str, Any]] = []
    for switch, scenario in scenarios.items():
        if args.only and scenario.name not in args.only.split(","):
            continue
        key, value = switch.split("=", 1)
        targets = target_anomalies(scenario)
        times: list[float | None] = []
        gave_up: list[str] = []
        spent = 0.0
        for number in range(args.hunts):
            spec = spec_for(scenario, {key: value}, args.time_limit, args.interval, mix, weights)
            print(
                f"{scenario.name} {switch} hunt {number + 1} ({','.join(spec.nemesis.faults)}):", flush=True
            )
            result = hunt(spec, store, budget, stop_on=targets, out=sys.stdout)
            spent += result.elapsed_seconds
            times.append(result.seconds_to_first_anomaly)
            gave_up += [result.gave_up] if result.gave_up else []
        baseline_spec = spec_for(scenario, safe, args.time_limit, args.interval, mix, weights)
        baseline_seconds = fixed_minutes.get(scenario.name, spent * args.baseline_share / 60) * 60
        print(f"{scenario.name} baseline (every switch safe) for {baseline_seconds / 60:.1f} min:")
        baseline = hunt(baseline_spec, store, baseline_seconds, keep_going=True, out=sys.stdout)
        found = [t for t in times if t is not None]
        rows.append(
            {
                "scenario": scenario.name,
                "switch": switch,
                "mix": written,
                "targets": sorted(targets),
                "found": len(found),
                "hunts": len(times),
                "minutes_to_first_anomaly": [None if t is None else round(t / 60, 1) for t in times],
                "median_minutes": median_minutes(times),
                "hunts_gave_up": gave_up,
                "baseline_minutes": round(baseline.elapsed_seconds / 60, 1),
                "baseline_runs": len(baseline.runs),
                "baseline_unexpected": unexpected_runs(baseline),
                "baseline_with_target": target_runs(baseline, targets),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(
        f"{'switch':42} {'anomaly':22} {'found':>6} {'min to first (each)':28} {'median':>7} {'baseline':>32}"
    )
    for row in rows:
        each = ", ".join("-" if t is None else f"{t:g}" for t in row["minutes_to_first_anomaly"])
        base = (
            f"{len(row['baseline_unexpected'])} bad, {len(row['baseline_with_target'])} with target"
            f"/{row['baseline_runs']} runs"
        )
        print(
            f"{row['switch']:42} {','.join(row['targets']):22} {row['found']:>2}/{row['hunts']:<3} "
            f"{each:28} {row['median_minutes']!s:>7} {base:>32}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
