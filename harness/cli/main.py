"""The ``tidemark`` command line: the router.

Each subcommand is one module of this package exposing two functions:

* ``add_arguments(parser: argparse.ArgumentParser) -> None``
* ``run(args: argparse.Namespace) -> int`` -- the process exit code.

Exit codes (:mod:`harness.run.exit_codes`, shared by every subcommand): 0 valid / success,
1 anomalies found, 2 unknown, 254 bad arguments or bad input (a :class:`UsageError`,
printed as one line), 255 internal error (a traceback: a bug in Tidemark).  Subcommand
modules import their heavy dependencies (the docker SDK, PySpark, matplotlib) inside
their functions, so ``tidemark --help`` starts neither a JVM nor a Docker client.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from harness.cli import (
    analyze,
    campaign,
    check,
    cluster,
    demo,
    history,
    hunt,
    image,
    report,
    rerun,
    run,
    scenario,
    shrink,
    spark,
    store,
)
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_INTERNAL_ERROR

# (subcommand, module, one-line help)
SUBCOMMANDS: tuple[tuple[str, ModuleType, str], ...] = (
    (
        "demo",
        demo,
        "the demo: KIP-101 loss found with HW truncation, absent with leader epochs",
    ),
    ("run", run, "run one test (a workload with a nemesis, or a scenario) and check it"),
    ("rerun", rerun, "run a stored run again from its own directory (its test.json)"),
    ("hunt", hunt, "random tests back to back under a time budget until one finds an anomaly"),
    ("shrink", shrink, "turn a failing run into the smallest scenario that still reproduces it"),
    ("campaign", campaign, "run a matrix of tests from a TOML file and check them together"),
    (
        "check",
        check,
        "check stored runs for lost writes and replica divergence (Spark or pandas)",
    ),
    ("analyze", analyze, "re-run the checker on one stored run"),
    ("spark", spark, "run a Spark Connect server that checks go through (tidemark check --remote)"),
    ("report", report, "re-render report.html / index.html"),
    ("history", history, "history file tools (convert JSON lines to Parquet)"),
    ("store", store, "pack many stored runs into a few Parquet files for batch checks, and verify them"),
    ("image", image, "build the container image without a registry"),
    ("cluster", cluster, "manage clusters (down --all removes everything Tidemark started)"),
    ("scenario", scenario, "list the scripted fault scenarios"),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_ARGUMENTS, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tidemark", description="Fault-injection testing for Kafka-style replicated logs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, module, help_text in SUBCOMMANDS:
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_run=module.run)
    show_defaults(parser)
    return parser


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Make ``--help`` give every option's default, in every subcommand at any depth.

    An option whose help does not already say its default gets ``(default: VALUE)``; one with no
    help at all gets that alone.  Options whose default is "not given" (None), off (False) or
    empty (``""``, ``[]``) say nothing: argparse's own ``ArgumentDefaultsHelpFormatter`` would print
    ``(default: None)`` for them, and skips options without help, which are the ones that most
    need it.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                show_defaults(child)
            continue
        default = action.default
        unset = default is None or default is False or default is argparse.SUPPRESS or default in ("", [], ())
        if unset or not action.option_strings:
            continue
        if action.help == argparse.SUPPRESS or "default" in (action.help or "").lower():
            continue
        action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args._run(args)
        return code
    except UsageError as error:
        print(f"tidemark {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except KeyboardInterrupt:
        print(f"tidemark {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        print(
            f"tidemark {args.command}: internal error (the traceback above is a bug in Tidemark)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
