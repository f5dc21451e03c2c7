"""``tidemark COMMAND --help`` gives every option's default and says what each option is for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from harness.cli.main import build_parser


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser below it, each once."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from parsers(child)


def test_every_option_with_a_default_shows_it_in_help() -> None:
    missing = []
    for parser in parsers(build_parser()):
        text = parser.format_help()
        for action in parser._actions:
            default = action.default
            if not action.option_strings or default is None or default is False or default in ("", [], ()):
                continue
            if default is argparse.SUPPRESS or action.help == argparse.SUPPRESS:
                continue
            if "default" not in (action.help or "").lower():
                missing.append(f"{parser.prog} {action.option_strings[0]}")
        assert "%(default)" not in text, parser.prog
    assert not missing, missing


def test_the_run_help_shows_a_number_default_and_the_demo_says_what_its_options_do() -> None:
    (run,) = [parser for parser in parsers(build_parser()) if parser.prog == "tidemark run"]
    assert "(default: 3)" in " ".join(run.format_help().split())  # --nodes
    (demo,) = [parser for parser in parsers(build_parser()) if parser.prog == "tidemark demo"]
    options = [action for action in demo._actions if action.option_strings and action.dest != "help"]
    assert options and all(action.help and not action.help.startswith("default") for action in options)
