"""ShellDaemons.start_daemon when the start script's output does not arrive (no Docker: a fake exec)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from testbed.nodes.remote import Command, ExecResult, RemoteError, ShellDaemons


class LosingOutput(ShellDaemons):
    """Runs nothing: answers each exec from a script of results, noting the commands."""

    def __init__(self, answers: list[ExecResult]) -> None:
        self.answers = answers
        self.commands: list[str] = []

    @property
    def node(self) -> str:
        return "n1"

    def exec(
        self,
        command: Command,
        *,
        timeout: float = 10.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        self.commands.append(str(command))
        return self.answers.pop(0)


def test_the_pid_comes_from_the_pid_file_when_the_output_was_lost() -> None:
    remote = LosingOutput([ExecResult(0, b"", b""), ExecResult(0, b"4242 987654\n", b"")])
    assert remote.start_daemon("broker", ["sleep", "1"], log_path="/tmp/broker.log") == 4242
    assert remote.commands[1] == f"cat {remote.state_dir}/broker.pid"


def test_the_printed_pid_is_taken_as_it_is() -> None:
    remote = LosingOutput([ExecResult(0, b"noise\n4343\n", b"")])
    assert remote.start_daemon("broker", ["sleep", "1"], log_path="/tmp/broker.log") == 4343
    assert len(remote.commands) == 1


def test_no_pid_anywhere_is_a_remote_error_naming_node_and_daemon() -> None:
    remote = LosingOutput([ExecResult(0, b"", b""), ExecResult(1, b"", b"cat: no such file")])
    with pytest.raises(RemoteError, match=r"^n1: start broker: no pid in the start script's output"):
        remote.start_daemon("broker", ["sleep", "1"], log_path="/tmp/broker.log")
