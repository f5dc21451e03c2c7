"""Reproduction rate and time per run of every scenario, in the mode that shows its anomaly
and the mode that must not.

    .venv/bin/python bench/scenarios.py [--repeats 10] [--only kip101-loss,...]

For each (scenario, setting) it runs the scenario ``--repeats`` times through the real
harness and checker and prints how often the run matched the scenario's expectation (the
anomaly found in the buggy mode; none of it in the fixed mode), how many runs reported the
scenario's anomaly, how many runs the white-box invariant checks (the brokers' own event logs,
``checker.definitions.INVARIANT_CHECKS``) flagged, and in how many of those no client-side
check found anything -- a bug only the brokers' records show -- and the median / max wall time
per run (``--modes buggy``: only the settings whose expectation names the bug's anomalies;
``--modes fixed``: only the others).  Targets (issue 5): >= 95 %
reproduction in the buggy mode, 0 anomalies in the fixed mode, <= 90 s per run.  The run
directory of every run that missed its expectation is kept under
``$TMPDIR/tidemark-bench-misses/`` for reading.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The repository first: bench/checker.py would otherwise shadow the checker package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checker.definitions import INVARIANT_CHECKS
from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import Scenario, library, load_scenario

KEEP_DIRECTORY = Path(tempfile.gettempdir()) / "tidemark-bench-misses"
"""Where the run directories of runs that missed their expectation are copied for reading."""


def modes(scenario: Scenario) -> list[dict[str, str]]:
    """The settings to run a scenario under: one per expectation it states (its ``when``)."""
    return [dict(expectation.when) for expectation in scenario.expected] or [{}]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument(
        "--modes",
        choices=("all", "buggy", "fixed"),
        default="all",
        help="buggy: only settings whose expectation names anomalies; fixed: only the others",
    )
    args = parser.parse_args()
    chosen = [name for name in sorted(library()) if not args.only or name in args.only.split(",")]
    rows = []
    for name in chosen:
        scenario = load_scenario(name)
        for settings in modes(scenario):
            buggy = any(e.anomalies for e in scenario.expected if e.when == settings)
            if args.modes != "all" and buggy != (args.modes == "buggy"):
                continue
            setting = ",".join(f"{key}={value}" for key, value in settings.items()) or "(defaults)"
            matched, anomalous, white_box, white_box_alone, times = 0, 0, 0, 0, []
            for repeat in range(args.repeats):
                spec = TestSpec(name=name, seed=repeat, settings=settings).with_scenario(scenario)
                expectation = scenario.expectation_for(spec.effective_settings())
                assert expectation is not None
                with tempfile.TemporaryDirectory() as store, open("/dev/null", "w") as quiet:
                    started = time.monotonic()
                    outcome = run_test(spec, Path(store), out=quiet)
                    times.append(time.monotonic() - started)
                    results = outcome.results or {}
                    ok = outcome.results is not None and not expectation.problems(results)
                    if not ok:  # keep the evidence of every run that missed its expectation
                        kept = KEEP_DIRECTORY / f"{name}-{repeat}-{int(time.time())}"
                        shutil.copytree(outcome.run_dir, kept)
                        print(f"  kept {kept}", flush=True)
                matched += ok
                found = set(results.get("anomalies", {}))
                invariants = found & set(INVARIANT_CHECKS)
                white_box += bool(invariants)
                white_box_alone += bool(invariants) and not (found - invariants)
                if expectation.anomalies:  # buggy mode: the scenario's anomaly reported?
                    anomalous += set(expectation.anomalies) <= found
                elif expectation.absent:  # fixed mode that still loses power: the tell-tale anomaly?
                    anomalous += bool(set(expectation.absent) & found)
                else:  # fixed mode: any anomaly at all counts
                    anomalous += bool(found)
                print(
                    f"{name} {setting} #{repeat}: {'as expected' if ok else 'NOT as expected'} "
                    f"({', '.join(results.get('anomalies', {})) or 'no anomalies'}) {times[-1]:.0f} s",
                    flush=True,
                )
            rows.append(
                (
                    name,
                    setting,
                    matched,
                    anomalous,
                    white_box,
                    white_box_alone,
                    statistics.median(times),
                    max(times),
                )
            )
    print()
    print(
        f"{'scenario':30} {'setting':60} {'as expected':>12} {'anomaly seen':>13} {'white-box':>10}"
        f" {'alone':>7} {'median s':>9} {'max s':>6}"
    )
    for name, setting, matched, anomalous, white_box, alone, median, worst in rows:
        print(
            f"{name:30} {setting:60} {matched:>5}/{args.repeats:<6} {anomalous:>6}/{args.repeats:<6} "
            f"{white_box:>4}/{args.repeats:<5} {alone:>3}/{args.repeats:<3} {median:9.0f} {worst:6.0f}"
        )


if __name__ == "__main__":
    main()
