"""``tidemark check PATH_OR_GLOB... [--engine spark|pandas] [--master URL | --remote sc://HOST:PORT] [--json]``.

Each argument is a run directory (it holds ``test.json``), a directory searched for run
directories at any depth (a campaign, or the whole store), a glob of either, or a packed store
(``tidemark store pack``: its runs are read from its few files, and each run's ``results.json``
is written to its run directory as if that had been named).  Every
run gets ``results.json``; with more than one run (or ``--summary``) a campaign summary is
written as Parquet and printed as a table.  Exit codes: 0 all valid, 1 any invalid,
2 any unknown (and none invalid), 254 bad arguments or bad input, 255 internal error.  Each
run's verdict line lists its anomalies causes first, each cause's consequences after ``->``
(:mod:`checker.anomaly_order`), and a scenario run's line ends with whether it met its
scenario's expectation (``-- as expected: lost-write (permitted by ...)``:
:mod:`harness.report.expectation`).

``--engine auto`` (the default) uses pandas for a single run -- no JVM to start -- and
Spark for a batch, in one session, one job per question over all runs at once.  ``--remote``
checks with Spark through a running Spark Connect server (``tidemark spark serve``):
:mod:`harness.cli.engine_options`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from checker.anomaly_order import grouped
from checker.api import check_runs, load_packed_stores, load_runs, open_engine, resolve_sources
from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    DEFAULT_STALL_THRESHOLD_S,
    LIVENESS_MODES,
    LIVENESS_WARN,
    Liveness,
)
from checker.driver import write_results
from checker.engine import Engine
from checker.evidence import InputError
from checker.packed_runs import count_runs
from checker.spark.session import DEFAULT_DRIVER_MEMORY
from checker.summary import SUMMARY_FILE, print_summary, summary_rows, write_summary
from harness.cli.check_inputs import load_each, unreadable_result
from harness.cli.check_progress import BatchProgress
from harness.cli.engine_options import add_remote_option, remote_of
from harness.cli.errors import UsageError
from harness.report.expectation import expectation_sentence
from harness.run.exit_codes import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from testbed.record.rundir import RunDirectoryError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH_OR_GLOB",
        help="run directories, directories of runs, globs, or packed stores (tidemark store pack)",
    )
    add_check_options(parser)


def add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("auto", "spark", "pandas"),
        default="auto",
        help="default: pandas for one run, Spark for several",
    )
    parser.add_argument(
        "--master", metavar="URL", help="Spark master (default local[*]); implies --engine spark"
    )
    add_remote_option(parser)
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help=(
            "skip and count bad history.jsonl lines; a run with any line skipped is at best"
            " unknown, one with none skipped gets its normal verdict (a damaged replica dump"
            " always counts as that node's dump missing)"
        ),
    )
    add_liveness_options(parser)
    parser.add_argument(
        "--examples",
        type=int,
        default=DEFAULT_EXAMPLE_LIMIT,
        metavar="N",
        help="example ops per anomaly (default 5)",
    )
    parser.add_argument(
        "--checks",
        metavar="LIST",
        help=f"comma-separated subset of: {','.join(ALL_CHECKS)} (verdict at best unknown)",
    )
    parser.add_argument(
        "--summary",
        metavar="FILE",
        help=f"campaign summary Parquet (default: {SUMMARY_FILE} in the runs' common parent)",
    )
    parser.add_argument(
        "--driver-memory",
        default=DEFAULT_DRIVER_MEMORY,
        help=f"Spark driver heap for local runs (default {DEFAULT_DRIVER_MEMORY})",
    )


def add_liveness_options(parser: argparse.ArgumentParser) -> None:
    """``--stall-threshold`` and ``--liveness`` (``tidemark check``, ``analyze``, ``run``)."""
    parser.add_argument(
        "--stall-threshold",
        type=float,
        default=DEFAULT_STALL_THRESHOLD_S,
        metavar="SECONDS",
        help=(
            "a partition without an acknowledged send for longer than this, outside fault windows,"
            f" is stalled (default {DEFAULT_STALL_THRESHOLD_S:g})"
        ),
    )
    parser.add_argument(
        "--liveness",
        choices=LIVENESS_MODES,
        default=LIVENESS_WARN,
        help="stalled is a warning (warn, the default) or an error that makes the run invalid (strict)",
    )


def liveness_settings(args: argparse.Namespace) -> Liveness:
    try:
        return Liveness(stall_threshold_s=args.stall_threshold, mode=args.liveness)
    except ValueError as error:
        raise UsageError(f"--stall-threshold: {error}") from None


def parse_checks(text: str | None) -> tuple[str, ...]:
    """``--checks``'s names in registry order; every check when the flag is absent (``None``), a
    :class:`UsageError` when it names none (``--checks ''`` is a mistake, not "all")."""
    if text is None:
        return ALL_CHECKS
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in ALL_CHECKS]
    if unknown or not chosen:
        raise UsageError(
            f"--checks: unknown check(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ALL_CHECKS)}"
        )
    return tuple(c for c in ALL_CHECKS if c in chosen)


def exit_code(results: list[dict[str, Any]]) -> int:
    verdicts = [r["valid"] for r in results]
    if False in verdicts:
        return EXIT_INVALID
    return EXIT_UNKNOWN if "unknown" in verdicts else EXIT_VALID


def _anomaly_text(name: str, anomaly: Mapping[str, Any]) -> str:
    note = f", expected: {anomaly['rule']}" if anomaly["expected"] else ""
    note += " (warning)" if anomaly["severity"] == "warning" else ""
    return f"{name} x{anomaly['count']}{note}"


def _verdict_line(result: dict[str, Any]) -> str:
    verdict = {True: "valid", False: "INVALID", "unknown": "unknown"}[result["valid"]]
    detail = "; ".join(grouped(result["anomalies"], _anomaly_text, "{cause} (-> {consequences})", "; "))
    if result["incomplete"]:
        detail += ("; " if detail else "") + "incomplete: " + "; ".join(result["incomplete"])
    return f"{verdict:8} {result['run']}" + (f"  [{detail}]" if detail else "")


def execute(
    args: argparse.Namespace,
    run_dirs: list[Path],
    session_engine: Engine | None = None,
    human: TextIO | None = None,
    packed: Sequence[Path] = (),
) -> int:
    """Check ``run_dirs`` and the runs of the ``packed`` stores as ``args`` say and print the table
    and verdicts to ``human``.

    ``human`` defaults to standard output, or standard error under ``--json`` (standard output
    then carries the JSON alone).  ``session_engine``: an engine to use instead of opening one.
    """
    checks = parse_checks(args.checks)
    liveness = liveness_settings(args)
    if args.examples < 0:
        raise UsageError("--examples must be >= 0")
    if args.summary and not Path(args.summary).parent.is_dir():
        # refused before any check runs: the summary would be the last thing written
        raise UsageError(f"--summary {args.summary}: no such directory {Path(args.summary).parent}")
    remote = remote_of(args) if session_engine is None else None  # before any run is read
    if human is None:
        human = sys.stderr if args.json else sys.stdout
    # A pipe or a CI log is no terminal: give the table room instead of rich's 80 columns.
    console = Console(file=human, highlight=False, soft_wrap=True, width=None if human.isatty() else 160)
    with BatchProgress(len(run_dirs) + sum(count_runs(store) for store in packed)) as progress:
        unreadable: dict[Path, str] = {}
        try:
            if len(run_dirs) + len(packed) > 1:  # a batch: a bad run is that run's verdict, unknown
                runs, unreadable = load_each(run_dirs, skip_bad_lines=args.skip_bad_lines, progress=progress)
            else:  # one run: its bad input is the user's error
                runs = load_runs(run_dirs, skip_bad_lines=args.skip_bad_lines, progress=progress)
            runs += load_packed_stores(packed, progress=progress)
        except InputError as error:
            raise UsageError(str(error)) from None
        engine_kind = args.engine
        if args.master or remote:
            engine_kind = "spark"
        elif engine_kind == "auto":
            engine_kind = "pandas" if len(runs) == 1 else "spark"
        results: list[dict[str, Any]] = []
        if session_engine is not None:
            results = check_runs(
                runs, session_engine, checks, args.examples, liveness=liveness, progress=progress
            )
        elif runs:
            with _engine(engine_kind, args, remote) as engine:
                results = check_runs(
                    runs, engine, checks, args.examples, liveness=liveness, progress=progress
                )
    named = [(result, str(run.spec.get("name", ""))) for result, run in zip(results, runs, strict=True)]
    for run_dir, reason in unreadable.items():
        named.append((unreadable_result(run_dir, reason), run_dir.name))
        write_results(named[-1][0], run_dir)
    order = {str(run_dir): position for position, run_dir in enumerate(run_dirs)}
    named.sort(key=lambda pair: order.get(pair[0]["run"], len(order)))  # as named; packed runs last
    results, names = [result for result, _ in named], [name for _, name in named]
    run_dirs = [Path(result["run"]) for result in results]
    if len(results) > 1 or args.summary:
        rows = summary_rows(results, names)
        target = (
            Path(args.summary)
            if args.summary
            else Path(os.path.commonpath([str(d) for d in run_dirs])) / SUMMARY_FILE
        )
        if len(run_dirs) == 1 and not args.summary:
            target = run_dirs[0].parent / SUMMARY_FILE
        write_summary(rows, target)
        print_summary(rows, results, console)
        console.print(f"summary: {target}")
    specs = {str(run.run_dir): run.spec for run in runs}
    for result in results:
        expectation = expectation_sentence(specs.get(result["run"]), result)
        console.print(_verdict_line(result) + (f"  -- {expectation}" if expectation else ""), markup=False)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2, sort_keys=True))
    return exit_code(results)


@contextlib.contextmanager
def _engine(kind: str, args: argparse.Namespace, remote: str | None) -> Iterator[Engine]:
    """:func:`checker.api.open_engine` with a server gone since ``--remote`` was checked as the
    one-line error that check gives."""
    from checker.spark.remote import ServerUnreachable

    with contextlib.ExitStack() as stack:
        try:
            engine = stack.enter_context(open_engine(kind, args.master, args.driver_memory, remote))
        except ServerUnreachable as error:
            raise UsageError(f"--remote: {error}") from None
        yield engine


def run(args: argparse.Namespace) -> int:
    try:
        run_dirs, packed = resolve_sources(args.paths)
    except RunDirectoryError as error:
        raise UsageError(str(error)) from None
    return execute(args, run_dirs, packed=packed)
