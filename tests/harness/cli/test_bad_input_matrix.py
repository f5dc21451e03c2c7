"""Every subcommand that reads a file or a directory, fed the five bad inputs a newcomer makes.

The kinds: *missing* (no such path), *empty* (an empty file or directory), *truncated* (cut
short mid-way), *not UTF-8* (Latin-1 bytes where UTF-8 text belongs) and *wrong type* (a file
where a directory belongs, or the other way round; in a TOML file, a value of the wrong type).
A run directory carries the damage in both ``test.json`` and ``history.jsonl``, so a command
is held to whichever it reads.
Each must end as the CLI promises (issue 36): exit 254 -- the one bad-input code --, exactly
one line on stderr naming the path, and no traceback.  Commands run in-process (``main``), with
``DOCKER_HOST`` at a socket nobody serves, so none could start a container even by mistake.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS
from tests.checker.synthetic import Plan, write_run
from tests.harness.cli.commands import captured_one_line

KINDS = ("missing", "empty", "truncated", "not-utf8", "wrong-type")


def missing_or_a_file(kind: str, path: Path) -> bool:
    """For *missing* and *wrong type* where a directory belongs: leave ``path`` absent, or write a
    file there; whether ``kind`` was one of them."""
    if kind == "wrong-type":
        path.write_text("a file, not a directory\n", encoding="utf-8")
    return kind in ("missing", "wrong-type")


def run_dir_input(kind: str, tmp_path: Path) -> Path:
    """A run directory as bad as ``kind`` says (its ``test.json`` carrying the damage)."""
    path = tmp_path / "run"
    if missing_or_a_file(kind, path):
        return path
    path.mkdir()
    if kind in ("truncated", "not-utf8"):
        write_run(path, Plan(seed=1))
        spec, history = path / "test.json", path / "history.jsonl"
        if kind == "truncated":  # both cut mid-line: whichever a command reads first is named
            spec.write_bytes(spec.read_bytes()[:40])
            history.write_bytes(history.read_bytes()[:-20])
        else:
            spec.write_bytes(b'{"name": "caf\xe9"}\n')
            history.write_bytes(b'{"index": 0, "value": "caf\xe9"}\n' + history.read_bytes())
    return path


def toml_input(kind: str, tmp_path: Path, wrong_value: str) -> Path:
    """A TOML file as bad as ``kind`` says; ``wrong_value`` is the file's text for *wrong type*."""
    path = tmp_path / "bad.toml"
    content = {
        "empty": b"",
        "truncated": b'name = "x"\n[matri',
        "not-utf8": b'name = "caf\xe9"\n',
        "wrong-type": wrong_value.encode(),
    }
    if kind in content:
        path.write_bytes(content[kind])
    return path


def packed_input(kind: str, tmp_path: Path) -> Path:
    """A packed store (``tidemark store pack``) as bad as ``kind`` says (its index carrying it)."""
    path = tmp_path / "packed"
    if missing_or_a_file(kind, path):
        return path
    if kind == "empty":
        path.mkdir()
        return path
    write_run(tmp_path / "runs" / "a", Plan(seed=1))
    assert main(["store", "pack", str(tmp_path / "runs"), "--out", str(path)]) == 0
    index = path / "runs.parquet"
    index.write_bytes(index.read_bytes()[:100] if kind == "truncated" else b"caf\xe9 " * 40)
    return path


def _store(tmp_path: Path) -> list[str]:
    return ["--store", str(tmp_path / "store")]


Case = tuple[Callable[[str, Path], Path], Callable[[Path, Path], list[str]]]
CASES: dict[str, Case] = {
    "check": (run_dir_input, lambda path, tmp: ["check", str(path), "--engine", "pandas"]),
    "analyze": (run_dir_input, lambda path, tmp: ["analyze", str(path)]),
    "report": (run_dir_input, lambda path, tmp: ["report", str(path)]),
    "history-convert": (run_dir_input, lambda path, tmp: ["history", "convert", str(path)]),
    "history-replicas": (run_dir_input, lambda path, tmp: ["history", "replicas", str(path)]),
    "store-pack": (run_dir_input, lambda path, tmp: ["store", "pack", str(path), "--out", str(tmp / "out")]),
    "store-verify": (packed_input, lambda path, tmp: ["store", "verify", str(path)]),
    "rerun": (run_dir_input, lambda path, tmp: ["rerun", str(path), *_store(tmp)]),
    "shrink": (run_dir_input, lambda path, tmp: ["shrink", str(path), *_store(tmp)]),
    "scenario-show": (
        lambda kind, tmp: toml_input(
            kind, tmp, 'name = "s"\nnode_count = "three"\n[[step]]\nsleep = 1\nwhy = "w"\n'
        ),
        lambda path, tmp: ["scenario", "show", str(path)],
    ),
    "run-scenario": (
        lambda kind, tmp: toml_input(kind, tmp, 'name = "s"\n[[step]]\nsleep = "long"\nwhy = "w"\n'),
        lambda path, tmp: ["run", "--scenario", str(path), *_store(tmp)],
    ),
    "campaign": (
        lambda kind, tmp: toml_input(kind, tmp, '[matrix]\nnemesis = ["kill"]\nrepeats = "two"\n'),
        lambda path, tmp: ["campaign", str(path), *_store(tmp)],
    ),
}


@pytest.fixture(autouse=True)
def no_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", sorted(CASES))
def test_a_bad_input_is_one_line_naming_it(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, arguments = CASES[command]
    path = make(kind, tmp_path)
    capsys.readouterr()
    code = main(arguments(path, tmp_path))
    line = captured_one_line(capsys)
    assert code == EXIT_BAD_ARGUMENTS, (code, line)
    assert line.startswith(f"tidemark {arguments(path, tmp_path)[0]}: error: "), line
    assert path.name in line, line
    assert not (tmp_path / "store").exists() or not os.listdir(tmp_path / "store"), "nothing stored"


@pytest.mark.parametrize(
    ("budget", "fragment"),
    [("", "''"), ("-5m", "'-5m'"), ("ten minutes", "'ten minutes'"), ("caf\udce9", "caf"), ("10x", "'10x'")],
    ids=["empty", "negative", "wrong-type", "not-utf8", "unknown-unit"],
)
def test_a_bad_hunt_budget_is_one_line_naming_the_flag(
    budget: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hunt", "--budget", budget]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "--budget", fragment)


def test_the_demo_without_docker_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", "--store", str(tmp_path / "store")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "no Docker engine answers at")
    assert not (tmp_path / "store").exists()
