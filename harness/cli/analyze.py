"""``tidemark analyze RUN_DIR``: re-run the checker on one stored run.

The same checks and options as ``tidemark check`` (pandas by default, ``--engine spark``
or ``--master URL`` for Spark), for exactly one run directory; ``history.parquet`` is
rebuilt from ``history.jsonl`` first when the JSON lines are newer.  It rewrites the run's
``results.json`` and prints the verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.check import add_check_options, execute
from harness.cli.errors import UsageError
from testbed.record.rundir import SPEC_FILE, RunDir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="one stored run directory (it holds test.json)")
    add_check_options(parser)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not RunDir(run_dir).is_run():
        raise UsageError(f"{run_dir}: not a run directory (no {SPEC_FILE})")
    return execute(args, [run_dir.resolve()])
