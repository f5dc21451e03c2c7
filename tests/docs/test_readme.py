"""README's commands work as written (issue 36: ``report store/latest`` after the demo failed).

Every command of README's ``bash`` blocks, and every concrete ``tidemark ...`` it quotes inline
(not the ones with placeholders such as ``RUN_DIR`` or ``[--master URL]``), is held to one of:

* **run for real**, in a scratch directory holding a store of synthetic runs laid out as a
  ``tidemark run`` and the demo lay them out (``store/latest``, ``store/demo/runs/<key>``):
  ``scenario``, ``report``, ``check`` (with ``--engine pandas`` added: no JVM), ``store``,
  ``campaign`` (with ``--dry-run``); exit 0 to 2, no traceback;
* **checked up to the start**: ``run``, ``hunt`` and ``rerun`` go through everything they do
  before a container starts -- arguments, scenario, settings the target must know, the target's
  refusals -- and are stopped where they would start one;
* **parsed** by the CLI's own parser (``image``, ``cluster``, ``demo``, and commands with a
  placeholder such as ``PORT``): every flag and choice exists;
* the other programs: ``scripts/setup.sh``'s mode is one the script handles, a script or module
  named exists and the flags given appear in its ``--help``.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli import hunt as hunt_cli
from harness.cli import rerun as rerun_cli
from harness.cli import run as run_cli
from harness.cli.main import build_parser, main
from testbed.record.store import point_latest
from tests.checker.synthetic import Plan, write_run

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PLACEHOLDER = re.compile(r"\b(?:[A-Z][A-Z_]{2,}|FILE\.toml)\b|\[|\.\.\.")
RUN_FOR_REAL = {"scenario", "report", "check", "store", "campaign", "history"}
UP_TO_THE_START = {"run", "hunt", "rerun"}


def readme_commands(text: str) -> list[str]:
    """Every command of README in the order a reader meets it: each line of a ``bash`` block
    (continuations folded, comments dropped) and each concrete ``tidemark`` command quoted
    inline (a subcommand and at least one argument, no placeholder), as ``.venv/bin/tidemark``."""
    found: list[tuple[int, str]] = []
    for block in re.finditer(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.group(1).replace("\\\n", " ").splitlines()
        found += [(block.start(), command) for line in lines if (command := line.split("  #", 1)[0].strip())]
    for span in re.finditer(r"`(tidemark [^`]+)`", text):
        words = span.group(1).split()
        if len(words) > 2 and not PLACEHOLDER.search(span.group(1)) and parses(words[1:]):
            found.append((span.start(), f".venv/bin/{span.group(1)}"))
    return [command for _, command in sorted(found, key=lambda entry: entry[0])]


def parses(arguments: list[str]) -> bool:
    """Whether the CLI's parser takes ``arguments`` up to a ``>`` (its usage message swallowed)."""
    arguments = arguments[: arguments.index(">")] if ">" in arguments else arguments
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(arguments)
    except SystemExit:
        return False
    return True


TEXT = README.read_text(encoding="utf-8")
COMMANDS = readme_commands(TEXT)


class Started(BaseException):
    """Raised where a command would start a cluster; a BaseException, so ``main`` passes it on."""


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A scratch directory with a store as README describes it: a run's ``store/<test>/<ts>``
    with ``store/latest``, and the demo's ``store/demo/runs/<key>``; nothing can start."""
    run_dir = tmp_path / "store" / "queue" / "20261129T000000Z"
    write_run(run_dir, Plan(seed=1))
    point_latest(tmp_path / "store", run_dir)
    for number, key in enumerate(("truncation.mode=high-watermark__r0", "truncation.mode=leader-epoch__r0")):
        write_run(tmp_path / "store" / "demo" / "runs" / key, Plan(seed=2 + number))

    def start(*arguments: Any, **named: Any) -> Any:
        raise Started()

    monkeypatch.setattr(run_cli, "run_and_report", start)
    monkeypatch.setattr(hunt_cli, "hunt", start)
    monkeypatch.setattr(
        hunt_cli, "docker_unreachable", lambda: None
    )  # checked up to the start, as with an engine
    monkeypatch.setattr(rerun_cli, "run_test", start)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def repository_paths(arguments: list[str], sandbox: Path) -> list[str]:
    """``arguments`` with every word that names a repository file (and nothing in the sandbox)
    made absolute, so the command runs from the sandbox as it would from a checkout."""
    return [
        str(ROOT / word) if not (sandbox / word).exists() and "/" in word and (ROOT / word).exists() else word
        for word in arguments
    ]


def run_tidemark(arguments: list[str], sandbox: Path) -> None:
    """Hold one ``tidemark`` command to what the module docstring says, by its subcommand."""
    redirect = None
    if ">" in arguments:
        arguments, redirect = arguments[: arguments.index(">")], arguments[arguments.index(">") + 1]
    build_parser().parse_args(arguments)  # exits (254) on a flag or a choice the command does not have
    command = arguments[0]
    if PLACEHOLDER.search(" ".join(arguments)) or command not in RUN_FOR_REAL | UP_TO_THE_START:
        return
    arguments = repository_paths(arguments, sandbox)
    if command == "campaign":
        arguments = [*arguments, "--dry-run", "--store", str(sandbox / "campaign-store")]
    if command == "check" and "--engine" not in arguments and "--master" not in arguments:
        arguments = [*arguments, "--engine", "pandas"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(arguments)
        except Started:
            assert command in UP_TO_THE_START, arguments
            code = 0
    assert "Traceback" not in err.getvalue(), err.getvalue()
    assert code in (0, 1, 2), (arguments, code, err.getvalue())
    if redirect is not None:
        (sandbox / redirect).write_text(out.getvalue(), encoding="utf-8")


def setup_modes() -> set[str]:
    """The modes ``scripts/setup.sh`` handles (its closing ``case``)."""
    script = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    return set(re.findall(r"^\s+([a-z]+)\)", script.rsplit('case "$mode" in', 1)[1], flags=re.M))


def check_other_program(words: list[str]) -> None:
    """A command of another program: its script or module exists, and its flags are its own."""
    words = [word for word in words if not re.fullmatch(r"[A-Z_]+=\S*", word)]  # environment settings
    if words[:2] == ["bash", "scripts/setup.sh"]:
        assert (words[2] if len(words) > 2 else "setup") in setup_modes(), words
    elif words[0] == "spark-submit":
        script = next(word for word in words if word.endswith(".py"))
        assert (ROOT / script).is_file(), script
    elif words[0].endswith("python") and words[1] == "-m":
        result = subprocess.run(
            [sys.executable, "-m", words[2], "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert result.returncode == 0, result.stderr
        for flag in (word for word in words[3:] if word.startswith("--")):
            assert flag in result.stdout, (flag, result.stdout)
    else:
        pytest.fail(f"README runs a program this test does not know: {words}")


def test_the_readme_has_commands_of_every_kind() -> None:
    subcommands = {
        shlex.split(command)[1] for command in COMMANDS if command.startswith(".venv/bin/tidemark")
    }
    assert {"run", "hunt", "check", "report", "campaign", "scenario", "store", "rerun"} <= subcommands, (
        subcommands
    )
    assert any(command.startswith("bash scripts/setup.sh") for command in COMMANDS)


@pytest.mark.third_party
def test_every_readme_command_works_as_written_in_order(sandbox: Path) -> None:
    """One scratch directory for the whole README, as a reader would go through it: a command may
    use what an earlier one made (``mine.toml``, ``packed/``).

    Marked ``third_party``: README's ``--target tansu``/``nisshi`` commands go up to the start,
    which checks that the binary is built -- on a fresh machine it is still building while the
    tests that need neither Docker nor it run (``scripts/run-tests.sh``'s first phase), and this
    test failed there (2026-11-29: the first CI on a machine without the tansu binary cached)."""
    failures = []
    for command in COMMANDS:
        words = shlex.split(command)
        try:
            if words[0] == ".venv/bin/tidemark":
                run_tidemark(words[1:], sandbox)
            else:
                check_other_program(words)
        except (AssertionError, SystemExit) as error:
            failures.append(f"{command}: {error!r}")
    assert not failures, "\n".join(failures)
