"""Real nodes without containers: Linux network namespaces on one bridge, reached through a ``Remote``.

Each node is a network namespace with its own interface, address and iptables tables, joined to
the others by veth pairs on a bridge in a hub namespace -- so the nemesis' iptables scripts, daemon
signals and restarts run for real, exactly as they would in a container, only without an image.
Needs root and iproute2. :class:`NetnsCluster` is a context manager: on exit it kills every daemon
it started and deletes every namespace, also when the test failed.

The "broker" on each node is a tiny TCP echo server (one Python process), enough to tell whether a
node is alive, paused or unreachable; :meth:`NetnsCluster.reachable` asks from inside one node
whether another's echo server answers.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from testbed.nodes.remote import (
    DEFAULT_TIMEOUT,
    KILL_GRACE_SECONDS,
    TIMEOUT_EXIT_CODES,
    Command,
    CommandFailed,
    ExecResult,
    RemoteError,
    RemotePathNotFound,
    RemoteTimeout,
    ShellDaemons,
    bounded_argv,
    command_text,
)

ECHO_PORT = 9555
ECHO_SERVER = f"""
import socket
server = socket.create_server(("0.0.0.0", {ECHO_PORT}))
while True:
    connection, _ = server.accept()
    with connection:
        connection.settimeout(5)
        try:
            connection.sendall(connection.recv(64))
        except OSError:
            pass
"""
PROBE = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as connection:
        connection.settimeout(float(sys.argv[3]))
        connection.sendall(b"ping")
        sys.exit(0 if connection.recv(64) == b"ping" else 1)
except OSError:
    sys.exit(1)
"""


def namespaces_available() -> str | None:
    """None if network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("iptables") is None:
        return "iproute2 and iptables are needed"
    name = f"tmprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


class NamespaceRemote(ShellDaemons):
    """A node that is a network namespace on this host: commands run under ``ip netns exec``."""

    def __init__(self, node: str, namespace: str, state_dir: Path) -> None:
        self._node = node
        self.namespace = namespace
        self.state_dir = str(state_dir)
        self.calls: list[str] = []

    @property
    def node(self) -> str:
        return self._node

    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        text = command_text(command)
        self.calls.append(text)
        argv = ["ip", "netns", "exec", self.namespace, *bounded_argv(command, timeout, env)]
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout + KILL_GRACE_SECONDS + 2)
        except subprocess.TimeoutExpired:
            raise RemoteTimeout(self._node, f"exec {text!r}", timeout) from None
        except OSError as error:
            raise RemoteError(self._node, f"exec {text!r}: {error}") from error
        if done.returncode in TIMEOUT_EXIT_CODES and time.monotonic() - started >= timeout:
            raise RemoteTimeout(self._node, f"exec {text!r}", timeout)
        if check and done.returncode != 0:
            raise CommandFailed(self._node, text, done.returncode, done.stdout, done.stderr)
        return ExecResult(done.returncode, done.stdout, done.stderr)

    def put(
        self, source: Path | bytes, remote_path: str, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        # Namespaces share the host's filesystem: a copy is the whole job.
        target = Path(remote_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            target.write_bytes(source)
            target.chmod(mode)
        elif source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
            target.chmod(mode)

    def get(self, remote_path: str, local_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        source = Path(remote_path)
        if not source.exists():
            raise RemotePathNotFound(self._node, f"{remote_path} does not exist")
        if source.is_dir():
            shutil.copytree(source, local_path, dirs_exist_ok=True)
        else:
            local_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, local_path)

    def close(self) -> None:
        pass


class NetnsCluster:
    """Brokers (and optionally a controller) as namespaces on a private bridge; a ClusterHandle for the nemesis.

    ``leader`` is what ``leader_of`` answers (tests set it). The controller node runs no broker.
    """

    def __init__(
        self, workdir: Path, brokers: Sequence[str] = ("n1", "n2", "n3"), controller: str | None = "c"
    ) -> None:
        self.workdir = workdir
        self.brokers = list(brokers)
        self.controller = controller
        self.leader: str | None = self.brokers[0]
        self.prefix = f"tm{secrets.token_hex(3)}"
        self.hub = f"{self.prefix}-hub"
        nodes = [*self.brokers, *([controller] if controller else [])]
        self._addresses = {node: f"10.213.0.{number}" for number, node in enumerate(nodes, start=1)}
        self._remotes = {
            node: NamespaceRemote(node, f"{self.prefix}-{node}", workdir / node / "run") for node in nodes
        }
        self.broker_starts: list[str] = []

    @property
    def nodes(self) -> list[str]:
        return list(self._remotes)

    # ClusterHandle ------------------------------------------------------------------

    def remote(self, node: str) -> NamespaceRemote:
        return self._remotes[node]

    def ip(self, node: str) -> str:
        return self._addresses[node]

    def start_broker(self, node: str) -> None:
        self.broker_starts.append(node)
        self._remotes[node].start_daemon(
            "broker", [sys.executable, "-c", ECHO_SERVER], log_path=str(self.workdir / node / "broker.log")
        )

    def leader_of(self, topic: str, partition: int) -> str | None:
        return self.leader

    # Test helpers -------------------------------------------------------------------

    def reachable(self, source: str, target: str, timeout: float = 1.0) -> bool:
        """Whether ``target``'s echo server answers a connection made from inside ``source``."""
        result = self._remotes[source].exec(
            [sys.executable, "-c", PROBE, self._addresses[target], str(ECHO_PORT), str(timeout)],
            timeout=timeout * 2 + 5,
            check=False,
        )
        return result.exit_code == 0

    def broker_state(self, node: str) -> str:
        """The broker process' state letter from /proc (``S``/``R`` running, ``T`` stopped), or ``dead``."""
        try:
            pid, start = (self.workdir / node / "run" / "broker.pid").read_text().split()
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            return "dead"
        if fields[19] != start or fields[0] in ("Z", "X"):
            return "dead"
        return fields[0]

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    # Lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> NetnsCluster:
        try:
            self._ip("netns", "add", self.hub)
            self._ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            self._ip("-n", self.hub, "link", "set", "br0", "up")
            for number, (node, remote) in enumerate(self._remotes.items(), start=1):
                (self.workdir / node).mkdir(parents=True, exist_ok=True)
                self._ip("netns", "add", remote.namespace)
                self._ip(
                    "link",
                    "add",
                    "eth0",
                    "netns",
                    remote.namespace,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"p{number}",
                    "netns",
                    self.hub,
                )
                self._ip("-n", self.hub, "link", "set", f"p{number}", "master", "br0", "up")
                self._ip("-n", remote.namespace, "addr", "add", f"{self._addresses[node]}/24", "dev", "eth0")
                self._ip("-n", remote.namespace, "link", "set", "eth0", "up")
                self._ip("-n", remote.namespace, "link", "set", "lo", "up")
            for node in self.brokers:
                self.start_broker(node)
            self.broker_starts.clear()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.destroy()

    def destroy(self) -> None:
        """Kill every daemon (SIGCONT first: a stopped one must die too) and delete every namespace."""
        for node, remote in self._remotes.items():
            pid_file = self.workdir / node / "run" / "broker.pid"
            if pid_file.exists() and self.broker_state(node) != "dead":
                pid = int(pid_file.read_text().split()[0])
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, sig)
            subprocess.run(["ip", "netns", "del", remote.namespace], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.hub], capture_output=True)

    def leftovers(self) -> list[str]:
        """Namespaces of this cluster that still exist (empty after a clean destroy)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in listed.splitlines() if line.startswith(self.prefix)]

    @staticmethod
    def _ip(*arguments: str) -> None:
        done = subprocess.run(["ip", *arguments], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(arguments)}: {done.stderr.strip()}")
