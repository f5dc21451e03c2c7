"""``tidemark scenario list`` / ``show``: the bundled scenarios.

``list`` prints one line per bundled scenario, sorted by name, under a header line, in aligned
columns: ``NAME``, ``BUG`` (the bug it reproduces), ``SWITCH`` (the setting that turns the bug
on), ``DESCRIPTION`` (the first sentence of its description); a scenario that does not say
gives ``-``. ``show NAME`` prints a scenario file as it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from harness.cli.errors import UsageError
from harness.run.scenario_check import load_checked_scenario
from nemesis.scenario import Scenario, ScenarioError, library

COLUMNS = ("NAME", "BUG", "SWITCH", "DESCRIPTION")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="scenario_command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="list the bundled scenarios: name, bug, switch, description")
    show = commands.add_parser("show", help="print a scenario file")
    show.add_argument("name")


def run(args: argparse.Namespace) -> int:
    """Carry out ``args.scenario_command``; a scenario that cannot be loaded is a UsageError (exit 254)."""
    try:
        if args.scenario_command == "show":
            scenario = load_checked_scenario(args.name)
            print(Path(scenario.source).read_text(encoding="utf-8"), end="")
            return 0
        scenarios = [load_checked_scenario(str(path)) for _, path in sorted(library().items())]
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    for line in table(scenarios):
        print(line)
    return 0


def table(scenarios: Sequence[Scenario]) -> list[str]:
    """The header and one row per scenario, columns padded to their widest cell (the last is not padded)."""
    rows = [COLUMNS] + [
        (scenario.name, scenario.bug or "-", scenario.switch or "-", first_sentence(scenario.description))
        for scenario in scenarios
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in rows
    ]


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` on one line, ending with a full stop; ``-`` for an empty text."""
    flat = " ".join(text.split())
    if not flat:
        return "-"
    sentence = flat.split(". ", 1)[0].rstrip(".")
    return f"{sentence}."
