"""``tidemark shrink RUN_DIR``: the smallest scenario that still reproduces a failing run's anomaly.

Replays candidate scenarios (each a real run) and writes ``RUN_DIR/shrunk.toml`` (or ``--out``),
which ``tidemark run --scenario FILE`` runs like any other scenario.  See
:mod:`harness.run.shrink_run` for the oracle and :mod:`nemesis.shrink` for the moves.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli.errors import UsageError
from harness.cli.hunt import accept_negative_durations, parse_anomaly_names, parse_duration
from harness.run.shrink_run import ShrinkError, shrink_run
from testbed.record.rundir import RunDir, SpecFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    accept_negative_durations(parser)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a stored invalid run")
    parser.add_argument("--replays", type=int, default=5, help="replays per candidate (default 5)")
    parser.add_argument(
        "--threshold", type=float, default=0.8, help="share of replays that must reproduce (default 0.8)"
    )
    parser.add_argument("--out", metavar="FILE", help="where the scenario goes (default RUN_DIR/shrunk.toml)")
    parser.add_argument("--store", default="store", metavar="DIR", help="where the replays are stored")
    parser.add_argument(
        "--budget",
        default="30m",
        metavar="DURATION",
        help="try no new candidate after this long; keep the smallest found (default 30m)",
    )
    parser.add_argument(
        "--search-replays",
        type=int,
        metavar="N",
        help="quick search: a candidate must reproduce in all of N replays (a miss ends it), only the "
        "original and the result are measured on --replays, and a result that falls short steps "
        "back to the last accepted candidate that does not (default: every candidate on --replays)",
    )
    parser.add_argument(
        "--anomaly",
        metavar="NAMES",
        help="comma-separated: the anomalies a replay must show (default: every one the run reported)",
    )


def run(args: argparse.Namespace) -> int:
    if args.replays < 1:
        raise UsageError(f"--replays {args.replays}: need at least 1")
    if not 0 < args.threshold <= 1:
        raise UsageError(f"--threshold {args.threshold}: expected a share in (0, 1]")
    if args.search_replays is not None and not 1 <= args.search_replays <= args.replays:
        raise UsageError(f"--search-replays {args.search_replays}: expected 1 to --replays ({args.replays})")
    budget = parse_duration(args.budget, "--budget")
    anomalies = parse_anomaly_names(args.anomaly, "--anomaly") if args.anomaly else None
    run_dir = Path(args.run_dir)
    if not RunDir(run_dir).spec_file.is_file():
        raise UsageError(f"{run_dir}: not a run directory (no {RunDir(run_dir).spec_file.name})")
    if stored_verdict(run_dir) is True:
        raise UsageError(f"{run_dir}: the run is valid: nothing to shrink")
    try:
        outcome = shrink_run(
            run_dir,
            Path(args.store),
            replays=args.replays,
            threshold=args.threshold,
            out_path=Path(args.out) if args.out else None,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            budget_seconds=budget,
            anomalies=sorted(anomalies) if anomalies is not None else None,
            search_replays=args.search_replays,
        )
    except (ShrinkError, SpecFileError) as error:
        raise UsageError(str(error)) from None
    print(
        f"{outcome.original_faults} faults -> {outcome.faults}; reproduced in {outcome.reproduced} of "
        f"{outcome.replays} replays ({outcome.candidates} candidates tried"
        + ("" if outcome.complete else "; the budget ended the search")
        + (f"; stepped back {outcome.stepped_back}" if outcome.stepped_back else "")
        + ")"
    )
    print(f"scenario: {outcome.scenario_path}  (run it: tidemark run --scenario {outcome.scenario_path})")
    return 0


def stored_verdict(run_dir: Path) -> object:
    """The run's stored verdict (``results.json``'s ``valid``), ``None`` when it cannot be read --
    :func:`harness.run.shrink_run.shrink_run` then names the unreadable file itself."""
    try:
        results = json.loads(RunDir(run_dir).results.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results.get("valid") if isinstance(results, dict) else None
