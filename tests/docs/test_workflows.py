"""The CI workflows stay runnable: every command they give names files that exist and arguments
``tidemark`` accepts, and every campaign they run validates.

The nightly job once ran ``tidemark campaign harness/campaigns/nightly.toml`` for weeks after the
file had moved (issue 36): nothing read the workflow.  Here every ``run:`` command of
``.github/workflows/*.yml`` is read; each ``tidemark`` command is parsed by the CLI's own parser,
and a ``tidemark campaign`` is run with ``--dry-run`` (validate and print the plan, start
nothing); every repository path a command names must exist (paths into ``store``, which the job
writes, and shell variables aside); every artifact pattern under the store must name a file the
harness writes.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from checker.summary import SUMMARY_FILE
from harness.cli.main import build_parser
from harness.report.index import INDEX_FILE
from harness.report.junit import JUNIT_FILE
from harness.run.hunt import HUNT_FILE
from testbed.record.rundir import REPORT_FILE, RESULTS_FILE

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
TIDEMARK = ".venv/bin/tidemark"
STORE_FILES = {
    INDEX_FILE,
    REPORT_FILE,
    JUNIT_FILE,
    RESULTS_FILE,
    SUMMARY_FILE,
    HUNT_FILE,
    "shrunk.toml",
    "*.log",
}
"""What the harness writes into a store that an artifact may publish (``shrunk.toml``:
``tidemark shrink``'s scenario; ``*.log``: a campaign's logs)."""


def block_values(text: str, key: str) -> list[str]:
    """Every value of ``key:`` in a workflow: a one-line value, or a ``|`` block's lines joined
    (backslash continuations folded), one entry per line of the block."""
    values: list[str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        stripped = line.strip().removeprefix("- ")
        if not stripped.startswith(f"{key}:"):
            continue
        value = stripped[len(key) + 1 :].strip()
        if value not in ("|", ">"):
            values.append(value.strip("\"'"))
            continue
        indent = len(line) - len(line.lstrip()) + 1
        block = []
        for following in lines[number + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) < indent:
                break
            block.append(following.strip())
        values += [entry for entry in "\n".join(block).replace("\\\n", " ").splitlines() if entry]
    return values


def commands() -> list[tuple[str, list[str]]]:
    """(workflow, argv) of every ``run:`` command of every workflow, comments left out."""
    found = []
    for workflow in WORKFLOWS:
        for command in block_values(workflow.read_text(encoding="utf-8"), "run"):
            if not command.startswith("#"):
                found.append((workflow.name, shlex.split(command)))
    return found


COMMANDS = commands()
TIDEMARK_COMMANDS = [(name, argv) for name, argv in COMMANDS if argv[0] == TIDEMARK]


def test_the_workflows_are_found_and_run_tidemark() -> None:
    assert WORKFLOWS and TIDEMARK_COMMANDS, (WORKFLOWS, COMMANDS)


@pytest.mark.parametrize(("workflow", "argv"), COMMANDS, ids=[" ".join(argv) for _, argv in COMMANDS])
def test_every_path_a_workflow_command_names_exists(workflow: str, argv: list[str]) -> None:
    for word in (re.sub(r"^\w+=(\$\()?", "", word) for word in argv):  # NAME=value, NAME=$(command
        if "/" in word and not word.startswith(("-", "store", "$", '"$')) and "*" not in word:
            assert (ROOT / word).exists(), f"{workflow}: {' '.join(argv)} names {word}, which does not exist"


@pytest.mark.parametrize(
    ("workflow", "argv"), TIDEMARK_COMMANDS, ids=[" ".join(argv[1:]) for _, argv in TIDEMARK_COMMANDS]
)
def test_every_tidemark_command_of_a_workflow_parses_and_its_campaign_validates(
    workflow: str, argv: list[str], tmp_path: Path
) -> None:
    arguments = argv[1:]
    build_parser().parse_args(arguments)  # argparse exits (254) on a flag or choice it does not know
    if arguments[0] != "campaign":
        return
    dry = [
        "campaign",
        "--dry-run",
        *[a for a in arguments[1:] if a != "--dry-run"],
        "--store",
        str(tmp_path / "store"),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *dry],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, (workflow, result.stderr)
    assert result.stdout.startswith("campaign ") and "nothing started (--dry-run)" in result.stdout, (
        result.stdout
    )
    assert not (tmp_path / "store").exists(), "a dry run writes nothing"


def test_every_artifact_under_the_store_names_a_file_the_harness_writes() -> None:
    for workflow in WORKFLOWS:
        for path in block_values(workflow.read_text(encoding="utf-8"), "path"):
            if path.startswith("store/"):
                assert path.rsplit("/", 1)[1] in STORE_FILES, f"{workflow.name}: artifact {path}"
