"""``tidemark scenario list``: the bundled scenarios with one-line descriptions."""

from __future__ import annotations

import argparse
from pathlib import Path

from nemesis.scenario import library, load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="scenario_command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="list the bundled scenarios")
    show = commands.add_parser("show", help="print a scenario file")
    show.add_argument("name")


def run(args: argparse.Namespace) -> int:
    if args.scenario_command == "show":
        scenario = load_scenario(args.name)
        print(Path(scenario.source).read_text(encoding="utf-8"), end="")
        return 0
    for name, path in sorted(library().items()):
        scenario = load_scenario(str(path))
        first_sentence = scenario.description.replace("\n", " ").split(". ")[0].rstrip(".")
        print(f"{name:26} {first_sentence}.")
    return 0
