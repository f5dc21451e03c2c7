"""One run of a hunt, in a child process: ``python -m harness.run.hunt_worker SPEC_JSON RUN_DIR``.

The hunt (:mod:`harness.run.hunt`) runs every test in a process of its own so that a run that
hangs can be stopped -- and its cluster torn down -- without taking the hunt with it.  This is
that process: it reads the spec the hunt wrote, runs and checks it into ``RUN_DIR`` exactly as
``tidemark run`` would, and exits with ``tidemark run``'s exit codes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, verdict_exit_code
from harness.run.runner import run_test
from harness.run.spec import SpecError, TestSpec


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m harness.run.hunt_worker SPEC_JSON RUN_DIR", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    spec_path, run_dir = Path(argv[0]), Path(argv[1])
    try:
        spec = TestSpec.from_dict(json.loads(spec_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, SpecError) as error:
        print(f"hunt worker: {spec_path}: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    outcome = run_test(spec, run_dir.parent, run_dir=run_dir, out=sys.stdout)
    return verdict_exit_code(outcome.verdict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
