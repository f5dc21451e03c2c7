"""``tidemark`` as the command-line tests drive it: a spec from ``run``'s flags, the command itself
in a subprocess, and the one-line error every refusal must be.

The promise the CLI keeps, and these helpers check in one place: a run the harness refuses or
cannot test ends with one line on stderr naming what failed, never a traceback, and the exit code
of the run contract (254 bad arguments, 2 unknown) -- see ``harness.run.exit_codes``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import run as run_cli
from harness.run.spec import TestSpec

ROOT = Path(__file__).resolve().parents[3]
TIDEMARK = Path(sys.executable).with_name("tidemark")
"""The installed entry point; without it the tests run ``python -m harness.cli.main``."""


def spec_of(*arguments: str) -> TestSpec:
    """The spec ``tidemark run ARGUMENTS`` would run, from the CLI's own parser (no subprocess)."""
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    return run_cli.spec_from_arguments(parser.parse_args(list(arguments)))


def tidemark(*arguments: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``tidemark ARGUMENTS`` in a subprocess from the checkout, its output captured as text."""
    command = [str(TIDEMARK)] if TIDEMARK.exists() else [sys.executable, "-m", "harness.cli.main"]
    return subprocess.run([*command, *arguments], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def one_line_error(result: subprocess.CompletedProcess[str], exit_code: int, *fragments: str) -> str:
    """The single stderr line, after checking the exit code and that it names ``fragments``."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def captured_one_line(capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    """The single stderr line of the command just run in-process (``main([...])``), after checking
    that there is no traceback and that it names ``fragments``."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
