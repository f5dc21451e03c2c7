"""``tidemark hunt``: random tests back to back under a time budget until one finds an anomaly.

Takes every option of ``tidemark run`` (settings, workload, ``--nemesis`` with single faults and
fault packages) except ``--scenario``, plus the budget.  Each run draws a fresh seed; with
``--seed N`` the seeds come from a generator seeded with N, so the same hunt can be repeated.  Prints a line per run and, at the end, the time to the first anomaly, the runs, the
faults injected and the failing run's directory.  Exit codes: 1 when a run was invalid, 0 when
the budget ran out with every run valid, 2 when no run gave a verdict.

``--engine spark`` checks every run through one Spark Connect server started for the hunt
(``--remote``: that server; ``--no-spark-server``: a driver JVM per run):
:mod:`harness.run.check_server`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import random
import re
import sys
from pathlib import Path

from checker.definitions import ALL_CHECKS
from harness.cli import run as run_cli
from harness.cli.engine_options import add_server_option, engine_of, remote_of
from harness.cli.errors import UsageError
from harness.run.campaign import DOCKER_TARGETS
from harness.run.check_server import checking_remote
from harness.run.exit_codes import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from harness.run.hunt import default_nemesis, hunt
from harness.run.hunt import parse_duration as run_duration
from harness.targets.base import docker_unreachable
from nemesis.spec import NemesisSpecError, parse_name_list, written_mix


def parse_duration(text: str, flag: str) -> float:
    """A duration flag's value in seconds; :class:`UsageError` naming ``flag`` when it is not one."""
    try:
        return run_duration(text)
    except ValueError as error:
        raise UsageError(f"{flag} {error}") from None


def parse_anomaly_names(text: str, flag: str = "--stop-on") -> frozenset[str]:
    """A flag's anomaly names; :class:`UsageError` naming the flag and the known names."""
    try:
        return frozenset(parse_name_list(text, ALL_CHECKS, flag))
    except NemesisSpecError as error:
        raise UsageError(str(error)) from None


def accept_negative_durations(parser: argparse.ArgumentParser) -> None:
    """Let ``--budget -5m`` reach the budget's own check, as ``--budget=-5m`` does.

    argparse takes any word starting with ``-`` for an option unless it looks like a negative
    number; widening that pattern to durations (``-5m``, ``-1.5h``) makes such a word the flag's
    value, so the user reads "expected a positive duration" instead of "expected one argument".
    """
    parser._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[smh]?$|^-\d*\.\d+[smh]?$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    accept_negative_durations(parser)
    run_cli.add_arguments(parser)
    parser.set_defaults(seed=None)  # a hunt's default is fresh randomness, not run's seed 0
    parser.add_argument("--budget", required=True, metavar="DURATION", help="e.g. 10m: start no run after it")
    parser.add_argument(
        "--keep-going", action="store_true", help="spend the whole budget, do not stop at the first anomaly"
    )
    parser.add_argument(
        "--stop-on",
        metavar="ANOMALIES",
        help="comma-separated anomaly names: only a run reporting one of them ends the hunt "
        "(default: any invalid run)",
    )
    parser.add_argument(
        "--unexpected-only",
        action="store_true",
        help="only a run with an anomaly no rule of its configuration permits ends the hunt "
        "(e.g. producers without idempotence: their duplicates do not)",
    )
    add_server_option(parser)
    parser.add_argument(
        "--run-timeout",
        metavar="DURATION",
        help="stop a run that takes longer and record it unknown (default: from the time limit)",
    )


def run(args: argparse.Namespace) -> int:
    remote = remote_of(args)  # a bad address is refused before anything else is looked at
    if args.scenario:
        raise UsageError("--scenario: a hunt draws random faults; run a scenario with tidemark run")
    budget = parse_duration(args.budget, "--budget")
    run_timeout = parse_duration(args.run_timeout, "--run-timeout") if args.run_timeout else None
    base_seed = args.seed
    args.seed = 0 if base_seed is None else base_seed
    spec = run_cli.spec_from_arguments(args)
    if args.name is None:
        spec = dataclasses.replace(spec, name="hunt")
    if not spec.nemesis.faults:  # no --nemesis: the measured default mix, what of it applies
        spec = dataclasses.replace(spec, nemesis=default_nemesis(spec))
    run_cli.check_spec(spec)
    if spec.target_object().name in DOCKER_TARGETS:  # one line now, not three runs that die at start
        reason = docker_unreachable()
        if reason is not None:
            raise UsageError(reason)
    stop_on = parse_anomaly_names(args.stop_on) if args.stop_on else frozenset()
    engine = engine_of(args, remote)
    seeds = random.Random(base_seed) if base_seed is not None else random.SystemRandom()
    print(
        f"hunting for {budget / 60:g} min: {written_mix(spec.nemesis.faults, spec.nemesis.weights)}",
        file=sys.stderr,
    )
    say = functools.partial(print, file=sys.stderr)
    with checking_remote(engine, remote, start=not args.no_spark_server, say=say) as through:
        result = hunt(
            spec,
            Path(args.store),
            budget,
            keep_going=args.keep_going,
            run_timeout=run_timeout,
            seeds=lambda: seeds.randrange(2**31),
            stop_on=stop_on,
            unexpected_only=args.unexpected_only,
            engine=engine,
            remote=through,
        )
    runs = result.runs
    counts = {
        word: sum(1 for r in runs if r.verdict is value)
        for word, value in (("valid", True), ("invalid", False))
    }
    unknown = len(runs) - counts["valid"] - counts["invalid"]
    faults = sum(run.faults for run in runs)
    if result.first_invalid is not None and result.seconds_to_first_anomaly is not None:
        first = result.first_invalid
        found = ", ".join(f"{name} x{count}" for name, count in first.anomalies.items())
        print(
            f"first anomaly after {result.seconds_to_first_anomaly / 60:.1f} min "
            f"(run {runs.index(first) + 1}, seed {first.seed}): {found}"
        )
        print(f"failing run: {first.run_dir}")
    elif result.gave_up is not None:
        print(f"gave up after {result.elapsed_seconds / 60:.1f} min: {result.gave_up}")
    else:
        print(f"no anomaly in {result.elapsed_seconds / 60:.1f} min")
    print(
        f"runs: {len(runs)} ({counts['valid']} valid, {counts['invalid']} invalid, {unknown} unknown); "
        f"faults injected: {faults}"
    )
    print(f"hunt record: {result.directory / 'hunt.json'}")
    if counts["invalid"]:
        return EXIT_INVALID
    return EXIT_VALID if counts["valid"] else EXIT_UNKNOWN
