"""``tidemark rerun RUN_DIR``: run a stored run again, from its directory alone.

``test.json`` holds the whole spec -- settings, workload, nemesis, seed and, for a
scenario run, the scenario's full definition -- so the new run needs neither the
original command line nor the scenario file (which may since have changed or gone).
The new run is stored like any other (``store/<name>/<timestamp>``), checked, and its
verdict compared with the scenario's expectation; exit codes as ``tidemark run``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.engine_options import add_remote_option, engine_of, remote_of
from harness.cli.errors import UsageError
from harness.cli.run import check_spec, report_outcome
from harness.run.runner import run_test
from harness.run.spec import SpecError, TestSpec
from testbed.record.rundir import RunDir, SpecFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a stored run directory (it holds test.json)")
    parser.add_argument("--store", default="store", metavar="DIR", help="where the new run is stored")
    parser.add_argument("--engine", default="pandas", choices=("pandas", "spark"), help="checker engine")
    add_remote_option(parser)


def load_spec(run_dir: Path) -> TestSpec:
    """The spec a stored run ran with; :class:`UsageError` naming the file when it cannot be read."""
    directory = RunDir(run_dir)
    try:
        spec = TestSpec.from_dict(directory.read_spec())
        spec.scenario_object()  # a damaged embedded scenario fails here, naming the file
        return spec
    except SpecFileError as error:
        raise UsageError(str(error)) from None
    except SpecError as error:
        raise UsageError(f"{directory.spec_file}: {error}") from None


def run(args: argparse.Namespace) -> int:
    remote = remote_of(args)
    spec = load_spec(Path(args.run_dir))
    check_spec(spec)
    print(
        f"re-running {args.run_dir}" + (f" (scenario {spec.scenario})" if spec.scenario else ""),
        file=sys.stderr,
    )
    engine = engine_of(args, remote)
    outcome = run_test(spec, Path(args.store), engine=engine, out=sys.stderr, remote=remote)
    return report_outcome(spec, outcome)
