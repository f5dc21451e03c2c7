"""One run of a hunt, in a child process: ``python -m harness.run.hunt_worker SPEC_JSON RUN_DIR [--engine E] [--remote URL]``.

The hunt (:mod:`harness.run.hunt`) runs every test in a process of its own so that a run that
hangs can be stopped -- and its cluster torn down -- without taking the hunt with it.  This is
that process: it reads the spec the hunt wrote, runs and checks it into ``RUN_DIR`` exactly as
``tidemark run`` would (with the hunt's engine, and through the hunt's Spark Connect server when
``--remote`` names one), and exits with ``tidemark run``'s exit codes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, verdict_exit_code
from harness.run.runner import run_test
from harness.run.spec import SpecError, TestSpec


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.run.hunt_worker")
    parser.add_argument("spec_path", type=Path, metavar="SPEC_JSON")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--engine", choices=("pandas", "spark"), default="pandas")
    parser.add_argument("--remote", metavar="sc://HOST:PORT")
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        return EXIT_BAD_ARGUMENTS
    spec_path, run_dir = args.spec_path, args.run_dir
    try:
        spec = TestSpec.from_dict(json.loads(spec_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, SpecError) as error:
        print(f"hunt worker: {spec_path}: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    outcome = run_test(
        spec, run_dir.parent, run_dir=run_dir, out=sys.stdout, engine=args.engine, remote=args.remote
    )
    return verdict_exit_code(outcome.verdict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
