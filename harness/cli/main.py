"""The ``tidemark`` command line.

Each subcommand lives in the module that owns its job; this file only routes.  A
subcommand module exposes two functions:

* ``add_arguments(parser: argparse.ArgumentParser) -> None``
* ``run(args: argparse.Namespace) -> int`` -- the process exit code.

Exit codes (shared by every subcommand, see DESIGN §8): 0 valid / success,
1 anomalies found, 2 unknown, 254 bad arguments or bad input, 255 internal error.
Modules are imported lazily so that ``tidemark --help`` does not start a JVM or import
the docker SDK.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2
EXIT_BAD_ARGUMENTS = 254
EXIT_INTERNAL_ERROR = 255

# (subcommand, module, one-line help)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    (
        "demo",
        "harness.cli.demo",
        "the demo: KIP-101 loss found with HW truncation, absent with leader epochs",
    ),
    ("run", "harness.cli.run", "run one test (a workload with a nemesis, or a scenario) and check it"),
    ("campaign", "harness.cli.campaign", "run a matrix of tests from a TOML file and check them together"),
    (
        "check",
        "harness.cli.check",
        "check stored runs for lost writes and replica divergence (Spark or pandas)",
    ),
    ("analyze", "harness.cli.analyze", "re-run the checker on one stored run"),
    ("report", "harness.cli.report", "re-render report.html / index.html"),
    ("history", "harness.cli.history", "history file tools (convert JSON lines to Parquet)"),
    ("image", "harness.cli.image", "build the container image without a registry"),
    ("cluster", "harness.cli.cluster", "manage clusters (down --all removes everything Tidemark started)"),
    ("scenario", "harness.cli.scenario", "list the scripted fault scenarios"),
)


class UsageError(Exception):
    """Bad arguments or bad input: printed as one line, exit code 254."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_ARGUMENTS, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tidemark", description="Fault-injection testing for Kafka-style replicated logs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, module_name, help_text in SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue  # a subcommand whose module has not landed yet is simply absent
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


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
