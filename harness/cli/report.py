"""``tidemark report RUN_DIR|DIRECTORY``: re-render the HTML reports of stored runs.

* a run directory (it holds ``test.json``): writes its ``report.html``;
* any other directory: writes the ``report.html`` of every run at any depth below it,
  then ``index.html`` in the directory itself (a campaign, or the whole store).

``--junit FILE`` also writes the JUnit XML of those runs (:mod:`harness.report.junit`;
``--expected-is-pass`` counts runs whose every anomaly the configuration permits as
passed).  Rendering reads stored files only: no Docker, no Spark.  It prints the path of
every page written; the exit code is 0 once the pages are written, whatever the runs'
verdicts (``tidemark check`` is the command whose exit code is the verdict); 254 when the
path is not a directory or holds no run, when a report could not be written, or when a run's
table cannot be read (a ``history.parquet`` cut short): every other page and the index are
written all the same, that run's page and index row marked unreadable, and the one error line
names the file.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_VALID
from testbed.record.rundir import SPEC_FILE, RunDirectoryError, find_run_directories


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="RUN_DIR|DIRECTORY",
        help="one run directory (holds test.json), or a directory of runs (a campaign, the store)",
    )
    parser.add_argument(
        "--no-index", action="store_true", help="for a directory: render the runs' reports only"
    )
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML for the runs to FILE")
    parser.add_argument(
        "--expected-is-pass",
        action="store_true",
        help="JUnit: a run whose every anomaly its configuration permits passes (default: fails)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.report.index import render_index
    from harness.report.junit import write_junit
    from harness.report.run_page import render_checked_report

    root = Path(args.path)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory (give a run directory or a directory of runs)")
    single = (root / SPEC_FILE).is_file()
    try:
        run_dirs = [root] if single else find_run_directories(root)
    except RunDirectoryError as error:
        raise UsageError(str(error)) from None
    if not run_dirs:
        raise UsageError(f"{root}: no run directories (holding {SPEC_FILE}) at or below it")
    started = time.monotonic()
    unwritable: list[str] = []
    unreadable: list[str] = []
    for number, run_dir in enumerate(run_dirs, start=1):
        prefix = f"[{number}/{len(run_dirs)}] " if len(run_dirs) > 1 else ""
        try:
            path, problem = render_checked_report(run_dir)
        except OSError as error:  # a read-only or vanished run directory: the other runs still get theirs
            unwritable.append(f"{run_dir}: report not written ({error.strerror or error})")
            if not single:
                print(f"{prefix}{unwritable[-1]}", file=sys.stderr)
            continue
        if problem is not None:  # the page is written, marking the run unreadable
            unreadable.append(problem)
        if not single or problem is None:
            print(f"{prefix}{path}", file=sys.stderr if not single else sys.stdout)
    try:
        if not single and not args.no_index:
            print(f"index: {render_index(root)}")
        if args.junit:
            print(f"junit: {write_junit(run_dirs, args.junit, expected_is_pass=args.expected_is_pass)}")
    except OSError as error:
        raise UsageError(f"{error.filename or root}: not written ({error.strerror or error})") from None
    if unwritable:
        raise UsageError(
            unwritable[0] if single else f"{len(unwritable)} report(s) not written; first: {unwritable[0]}"
        )
    if unreadable:
        raise UsageError(
            f"{unreadable[0]} (the run is marked unreadable in its report"
            + (")" if single else f" and the index; {len(unreadable)} such run(s))")
        )
    elapsed = time.monotonic() - started
    print(f"{len(run_dirs)} report(s) in {elapsed:.1f} s", file=sys.stderr)
    return EXIT_VALID
