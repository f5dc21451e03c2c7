"""The lazy-filesystem mount both power-loss targets share (:mod:`testbed.cluster.lazyfs_mount`),
checked command by command against a recording fake remote (no Docker, no FUSE): the mount
sequence, that a live mount is left alone, the power loss with a dead filesystem process, and
the two users' options (the bundled broker's data dir; PostgreSQL's, open to other users)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

import pytest

from testbed.cluster.bundled import BACKING_DIR, DATA_DIR, PYTHON, BundledCluster
from testbed.cluster.lazyfs_mount import LazyMount
from testbed.cluster.postgres_node import PostgresNode
from testbed.nodes.remote import CommandFailed, ExecResult, RemoteError

LAZYFS = [PYTHON, "-m", "nemesis.lazyfs"]


class RecordingRemote:
    """Records every call with its timeout; ``alive`` daemons are running, and an exec whose argv
    contains a word of ``failing`` fails as a command that exited 1."""

    def __init__(self, node: str = "n1") -> None:
        self.node = node
        self.calls: list[tuple[str, object, object]] = []
        self.alive: set[str] = set()
        self.failing: set[str] = set()

    def exec(
        self, command: Sequence[str], *, timeout: float = 30, check: bool = True, **_: Any
    ) -> ExecResult:
        self.calls.append(("exec", list(command), timeout if check else (timeout, "unchecked")))
        if check and self.failing.intersection(command):
            raise CommandFailed(self.node, " ".join(command), 1, b"", b"")
        return ExecResult(0, b"", b"")

    def start_daemon(self, name: str, argv: Sequence[str], *, log_path: str, **_: Any) -> int:
        self.calls.append(("start_daemon", name, (list(argv), log_path)))
        self.alive.add(name)
        return 1

    def signal(self, name: str, sig: signal.Signals, *, timeout: float = 30) -> bool:
        self.calls.append(("signal", name, (sig, timeout)))
        return name in self.alive

    def is_alive(self, name: str, **_: Any) -> bool:
        return name in self.alive


def mount(remote: RecordingRemote, *, allow_other: bool = False) -> LazyMount:
    return LazyMount(
        remote,  # type: ignore[arg-type]  # the part of a Remote the mount uses
        python=PYTHON,
        backing="/b",
        mountpoint="/m",
        log_path="/log/lazyfs.log",
        allow_other=allow_other,
    )


def test_a_mount_clears_a_dead_one_then_serves_the_backing_dir_until_it_answers() -> None:
    remote = RecordingRemote()
    mount(remote).ensure()
    assert remote.calls == [
        ("exec", ["mkdir", "-p", "/b", "/m"], 10),
        ("exec", [*LAZYFS, "unmount", "/m"], (30.0, "unchecked")),
        ("start_daemon", "lazyfs", ([*LAZYFS, "mount", "/b", "/m", "--foreground"], "/log/lazyfs.log")),
        ("exec", [*LAZYFS, "control", "/m", "status"], 5.0),
    ]


def test_a_live_mount_is_left_alone_and_other_users_are_let_in_when_asked() -> None:
    remote = RecordingRemote()
    remote.alive.add("lazyfs")
    mount(remote).ensure()
    assert remote.calls == []
    remote.alive.clear()
    mount(remote, allow_other=True).ensure()
    (started,) = [call for call in remote.calls if call[0] == "start_daemon"]
    assert started[2] == ([*LAZYFS, "mount", "/b", "/m", "--foreground", "--allow-other"], "/log/lazyfs.log")


def test_power_loss_drops_and_sync_writes_back_through_the_control_command() -> None:
    remote = RecordingRemote()
    mount(remote).drop()
    mount(remote).sync()
    assert remote.calls == [
        ("exec", [*LAZYFS, "control", "/m", "drop"], 30.0),
        ("exec", [*LAZYFS, "control", "/m", "sync"], 30.0),
    ]


def test_a_dead_filesystem_process_is_a_power_loss_already_killed_for_certain_and_remounted() -> None:
    remote = RecordingRemote()
    remote.failing.add("drop")
    mount(remote).drop()
    assert [call[0:2] for call in remote.calls] == [
        ("exec", [*LAZYFS, "control", "/m", "drop"]),
        ("signal", "lazyfs"),
        ("exec", ["mkdir", "-p", "/b", "/m"]),
        ("exec", [*LAZYFS, "unmount", "/m"]),
        ("start_daemon", "lazyfs"),
        ("exec", [*LAZYFS, "control", "/m", "status"]),
    ]
    assert remote.calls[1][2] == (signal.SIGKILL, 5)


def test_both_targets_mount_over_the_node_data_dir_and_refuse_power_loss_without_it() -> None:
    broker, postgres = RecordingRemote("n1"), RecordingRemote("pg")
    cluster = BundledCluster({"n1": broker}, {"n1": "10.0.0.3"}, ["n1"], "n1", {}, power_loss_filesystem=True)  # type: ignore[dict-item]
    cluster.start_broker("n1")
    assert broker.calls[0] == ("exec", ["mkdir", "-p", BACKING_DIR, DATA_DIR], 10)
    node = PostgresNode(postgres, {}, lazy=True)  # type: ignore[arg-type]
    assert node.lazy_mount is not None and node.lazy_mount.allow_other
    assert (node.lazy_mount.backing, node.lazy_mount.mountpoint) == (BACKING_DIR, DATA_DIR)
    with pytest.raises(RemoteError, match="power loss needs the lazy filesystem"):
        BundledCluster({"n1": broker}, {}, ["n1"], "n1", {}).drop_unsynced("n1")  # type: ignore[dict-item]
    with pytest.raises(RemoteError, match="pg: power loss needs the lazy filesystem"):
        PostgresNode(postgres, {}, lazy=False).drop_unsynced()  # type: ignore[arg-type]


def test_disk_fault_rules_go_to_the_broker_s_mount_as_one_control_command() -> None:
    broker = RecordingRemote("n1")
    cluster = BundledCluster({"n1": broker}, {}, ["n1"], "n1", {}, power_loss_filesystem=True)  # type: ignore[dict-item]
    cluster.lazyfs_control("n1", "fail fsync EIO *.log always")
    cluster.lazyfs_control("n1", "clear")
    assert [call[1] for call in broker.calls] == [
        [*LAZYFS, "control", DATA_DIR, "fail", "fsync", "EIO", "*.log", "always"],
        [*LAZYFS, "control", DATA_DIR, "clear"],
    ]
    with pytest.raises(RemoteError, match="needs the lazy filesystem"):
        BundledCluster({"n1": broker}, {}, ["n1"], "n1", {}).lazyfs_control("n1", "clear")  # type: ignore[dict-item]
