"""``--remote`` on every command that checks: one line naming the flag (exit 254) for a value that
is not ``sc://HOST:PORT``, for ``--master`` beside it, and for an address where no server answers
-- refused before a run is read or a cluster started.  No server and no JVM here; checks through a
live server are ``tests/checker/spark/test_connect_server.py``'s."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.checker.synthetic import Plan, write_run
from tests.harness.cli.commands import captured_one_line

COMMANDS = {
    "check": ["check", "{run}"],
    "analyze": ["analyze", "{run}"],
    "run": ["run", "--store", "{store}"],
    "rerun": ["rerun", "{run}", "--store", "{store}"],
    "hunt": ["hunt", "--budget", "1m", "--store", "{store}"],
    "campaign": ["campaign", "no-such-file.toml", "--store", "{store}"],
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "run"
    write_run(path, Plan(seed=3))
    return path


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound but not listening: every connection to it is refused."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        yield int(taken.getsockname()[1])


def _command(name: str, run_dir: Path, store: Path, *extra: str) -> list[str]:
    words = [word.format(run=run_dir, store=store) for word in COMMANDS[name]]
    return [*words, *extra]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_value_that_is_not_an_address_is_one_line_naming_the_flag(
    name: str, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_command(name, run_dir, tmp_path, "--remote", "localhost:15002"))
    assert code == 254
    captured_one_line(
        capsys, f"tidemark {name}: error: --remote: 'localhost:15002'", "expected sc://HOST:PORT"
    )
    assert not (run_dir / "results.json").exists()


@pytest.mark.parametrize("name", ["check", "run", "hunt", "campaign"])
def test_an_address_where_nothing_answers_is_one_line_naming_it(
    name: str, run_dir: Path, tmp_path: Path, silent_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"sc://127.0.0.1:{silent_port}"
    code = main(_command(name, run_dir, tmp_path, "--remote", address))
    assert code == 254
    captured_one_line(capsys, f"--remote: no Spark Connect server answers at {address} (")


def test_remote_and_master_together_are_refused(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(run_dir), "--remote", "sc://127.0.0.1:15002", "--master", "local[2]"])
    assert code == 254
    captured_one_line(capsys, "--remote and --master: choose one")
