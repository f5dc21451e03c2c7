"""The behaviour every ``Remote`` promises, run against real containers by each implementation's tests.

A test module subclasses ``RemoteContract`` and provides a ``remote`` fixture (and ``docker_remote``,
a Docker remote to the same node, used to look behind the remote under test).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.nodes.docker_remote import DockerRemote
from testbed.nodes.remote import CommandFailed, ExecResult, Remote, RemotePathNotFound, RemoteTimeout
from testbed.nodes.ssh_remote import SshRemote


def _both_implementations_are_remotes(docker_remote: DockerRemote, ssh_remote: SshRemote) -> list[Remote]:
    """Never called: mypy checks here that both classes satisfy the Remote protocol."""
    return [docker_remote, ssh_remote]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` if ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not true after {timeout} s")
        time.sleep(0.02)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class RemoteContract:
    def test_exec_returns_exit_code_and_both_streams(self, remote: Remote) -> None:
        assert remote.exec("echo out; echo err >&2") == ExecResult(0, b"out\n", b"err\n")

    def test_an_argv_reaches_the_program_without_a_shell(self, remote: Remote) -> None:
        tricky = ["$HOME; echo injected", "a'b\"c", "  spaced  ", ""]
        result = remote.exec(["printf", "[%s]", *tricky])
        assert result.stdout_text == "".join(f"[{argument}]" for argument in tricky)

    def test_a_non_zero_exit_raises_command_failed_with_everything(self, remote: Remote) -> None:
        with pytest.raises(CommandFailed) as failure:
            remote.exec("echo partial; echo broken >&2; exit 7")
        assert (failure.value.exit_code, failure.value.stdout, failure.value.stderr) == (
            7,
            b"partial\n",
            b"broken\n",
        )
        assert remote.node in str(failure.value) and "broken" in str(failure.value)
        assert remote.exec("exit 7", check=False).exit_code == 7

    def test_env_reaches_the_command(self, remote: Remote) -> None:
        result = remote.exec('printf %s "$GREETING"', env={"GREETING": "hello world; $(reboot)"})
        assert result.stdout_text == "hello world; $(reboot)"

    def test_a_timeout_raises_and_kills_the_command_on_the_node(
        self, remote: Remote, docker_remote: Remote
    ) -> None:
        pid_file = f"/tmp/{unique('timeout')}.pid"
        started = time.monotonic()
        with pytest.raises(RemoteTimeout):
            remote.exec(f"echo $$ > {pid_file}; exec sleep 300", timeout=1)
        assert time.monotonic() - started < 30  # returned long before the command would have ended
        pid = docker_remote.exec(["cat", pid_file]).stdout_text.strip()
        wait_until(
            lambda: docker_remote.exec(f"[ ! -e /proc/{pid} ]", check=False).exit_code == 0,
            10,
            f"pid {pid} gone",
        )

    def test_bytes_put_then_get_round_trip_with_mode_and_new_parents(
        self, remote: Remote, tmp_path: Path
    ) -> None:
        content = bytes(range(256)) * 1000
        remote_path = f"/tmp/{unique('put')}/deep/er/file.bin"
        remote.put(content, remote_path, mode=0o640)
        assert remote.exec(["stat", "-c", "%a %s", remote_path]).stdout_text.split() == [
            "640",
            str(len(content)),
        ]
        remote.get(remote_path, tmp_path / "back.bin")
        assert (tmp_path / "back.bin").read_bytes() == content

    def test_a_directory_tree_goes_out_and_comes_back(self, remote: Remote, tmp_path: Path) -> None:
        tree = tmp_path / "tree"
        (tree / "a" / "b").mkdir(parents=True)
        (tree / "top.txt").write_text("top\n")
        (tree / "a" / "b" / "leaf.log").write_bytes(b"\x00\x01leaf")
        (tree / "a" / "run.sh").write_text("#!/bin/sh\n")
        (tree / "a" / "run.sh").chmod(0o755)
        remote_dir = f"/tmp/{unique('tree')}"
        remote.put(tree, remote_dir)
        assert remote.exec(["test", "-x", f"{remote_dir}/a/run.sh"], check=False).exit_code == 0
        remote.get(remote_dir, tmp_path / "back")
        files = sorted(path.relative_to(tree).as_posix() for path in tree.rglob("*") if path.is_file())
        assert (
            sorted(
                p.relative_to(tmp_path / "back").as_posix()
                for p in (tmp_path / "back").rglob("*")
                if p.is_file()
            )
            == files
        )
        for relative in files:
            assert (tmp_path / "back" / relative).read_bytes() == (tree / relative).read_bytes()

    def test_get_of_a_missing_path_raises_path_not_found(self, remote: Remote, tmp_path: Path) -> None:
        with pytest.raises(RemotePathNotFound):
            remote.get(f"/tmp/{unique('absent')}", tmp_path / "x")
        assert not (tmp_path / "x").exists()

    def test_daemon_start_signal_and_death(self, remote: Remote) -> None:
        name = unique("daemon")
        log = f"/var/log/tidemark-test/{name}.log"
        pid = remote.start_daemon(
            name, ["sh", "-c", 'echo "up $GREETING"; exec sleep 600'], log_path=log, env={"GREETING": "hi"}
        )
        try:
            assert remote.is_alive(name)
            wait_until(
                lambda: remote.exec(["cat", log]).stdout_text == "up hi\n", 10, "daemon output in its log"
            )
            # detached: its own session and process group, so signals reach its children and no SIGHUP
            assert remote.exec(["ps", "-o", "sid=,pgid=", "-p", str(pid)]).stdout_text.split() == [
                str(pid),
                str(pid),
            ]
            with pytest.raises(CommandFailed, match="already runs"):
                remote.start_daemon(name, ["sleep", "600"], log_path=log)

            assert remote.signal(name, signal.SIGSTOP)
            wait_until(lambda: _state(remote, pid) == "T", 10, "daemon stopped")
            assert remote.is_alive(name)  # stopped is alive
            assert remote.signal(name, signal.SIGCONT)
            assert remote.signal(name, signal.SIGKILL)
            wait_until(lambda: not remote.is_alive(name), 10, "killed daemon no longer alive")
            assert not remote.signal(name, signal.SIGKILL)

            second = remote.start_daemon(name, ["sh", "-c", "echo again; exec sleep 600"], log_path=log)
            assert second != pid and remote.is_alive(name)
            wait_until(
                lambda: remote.exec(["cat", log]).stdout_text == "up hi\nagain\n",
                10,
                "log appended, not replaced",
            )
        finally:
            remote.signal(name, signal.SIGKILL)

    def test_a_signal_reaches_the_daemons_children(self, remote: Remote) -> None:
        name = unique("family")
        marker = f"{time.time_ns() % 10**6 + 10**6}"  # a sleep length no other process uses
        remote.start_daemon(
            name, ["sh", "-c", f"sleep {marker} & sleep {marker} & wait"], log_path=f"/tmp/{name}.log"
        )
        wait_until(lambda: _count(remote, f"sleep {marker}") == 2, 10, "both children started")
        assert remote.signal(name, signal.SIGKILL)
        wait_until(lambda: _count(remote, f"sleep {marker}") == 0, 10, "children killed with their parent")
        wait_until(lambda: not remote.is_alive(name), 10, "daemon dead")

    def test_unknown_daemons_and_reused_pids_are_not_alive(self, remote: Remote) -> None:
        name = unique("ghost")
        assert not remote.is_alive(name)
        assert not remote.signal(name, signal.SIGTERM)
        # A pid file naming a live process (PID 1) with another start time: the daemon died and its pid
        # was reused. It must count as dead, and must not be signalled.
        remote.put(b"1 1\n", f"/run/tidemark/{name}.pid")
        assert not remote.is_alive(name)
        assert not remote.signal(name, signal.SIGSTOP)
        assert _state(remote, 1) != "T"


def _state(remote: Remote, pid: int) -> str:
    stat = remote.exec(["cat", f"/proc/{pid}/stat"]).stdout_text
    return stat.rsplit(")", 1)[1].split()[0]


def _count(remote: Remote, command_line: str) -> int:
    result = remote.exec(["pgrep", "-c", "-f", f"^{command_line}$"], check=False)
    return int(result.stdout_text.strip() or 0)
