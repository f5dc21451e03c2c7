"""One interface to the nodes of a cluster, whatever carries the commands (Docker exec or SSH).

The harness, the nemesis and the workloads' helpers talk to a node only through ``Remote``: run a
command, copy a file in or out, start a named daemon, signal it, ask whether it lives. Two
implementations exist, ``testbed.nodes.docker_remote.DockerRemote`` and ``testbed.nodes.ssh_remote.SshRemote``; both
are exercised against real containers in the tests.

Contracts every implementation keeps:

* Every call is bounded by its ``timeout`` (seconds). A command still running at its deadline is killed
  on the node (it runs under coreutils ``timeout``, so a hung command never outlives the call) and the
  call raises ``RemoteTimeout``.
* Errors are typed, because the history needs to know what is *certain*: ``CommandFailed`` means the
  command ran and exited non-zero (a definite outcome: a fault op may be recorded ``fail``);
  ``RemoteTimeout`` and any other ``RemoteError`` (connection lost, container gone, host key wrong)
  mean the effect is unknown (``info``).
* A command given as a string runs under ``/bin/sh -c``; given as a sequence it is an argv, no shell.
* Daemons are named. ``start_daemon`` detaches the process into its own session and process group
  (so it survives the call, gets no SIGHUP when an SSH session ends, and ``signal`` reaches its
  children too), appends its output to ``log_path`` and records ``<pid> <start time>`` in
  ``<state_dir>/<name>.pid``. The start time (from /proc) makes ``is_alive`` immune to PID reuse; a
  zombie counts as dead and a stopped (SIGSTOP) process as alive. The daemon logic is one shell script
  shared by both implementations (``ShellDaemons``), so they cannot drift apart.

Abilities only some remotes have are separate small protocols (``Reconnectable``,
``ContainerBacked``); check for them with ``isinstance``.

A Remote that must behave differently in one call only (the PostgreSQL node's ``signal``, which has
to reach processes outside the daemon's group) subclasses ``ForwardingRemote`` and overrides that
call; every other call is the wrapped Remote's, so the contracts above hold unchanged.
"""

from __future__ import annotations

import re
import shlex
import signal as signal_module
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

DEFAULT_TIMEOUT = 30.0
"""Seconds a remote call may take when the caller does not say."""
DEFAULT_STATE_DIR = "/run/tidemark"
"""Where daemon pid files live on the node: /run is cleared at boot, exactly when pids go stale."""
KILL_GRACE_SECONDS = 2
"""After SIGTERM at the deadline, coreutils ``timeout`` sends SIGKILL this much later."""
TIMEOUT_EXIT_CODES = (124, 137)  # coreutils timeout: 124 after SIGTERM, 137 when SIGKILL was needed

Command = str | Sequence[str]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NOT_RUNNING_EXIT = 3  # exit status the daemon scripts use for "no such live daemon"


class RemoteError(Exception):
    """A remote call did not complete; its effect on the node is unknown."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node


class RemoteTimeout(RemoteError):
    """The call did not finish within its timeout; any command it ran has been killed on the node."""

    def __init__(self, node: str, what: str, timeout: float) -> None:
        super().__init__(node, f"{what} did not finish within {timeout:g} s")
        self.timeout = timeout


class CommandFailed(RemoteError):
    """The command ran and exited non-zero: a definite outcome."""

    def __init__(self, node: str, command: str, exit_code: int, stdout: bytes, stderr: bytes) -> None:
        detail = (stderr or stdout).decode(errors="replace").strip()[-2000:]
        super().__init__(node, f"{command!r} exited {exit_code}" + (f": {detail}" if detail else ""))
        self.command = command
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr


class RemotePathNotFound(RemoteError):
    """``get`` was asked for a path that does not exist on the node (a definite outcome)."""


class HostKeyError(RemoteError):
    """SSH host key unknown or different from the one recorded in known_hosts."""


@dataclass(frozen=True)
class ExecResult:
    """What a finished command left behind."""

    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")


class Remote(Protocol):
    """A node the harness controls. Failures raise RemoteError subclasses (see the module doc); malformed
    arguments (a relative remote path, a bad daemon or variable name) raise ValueError before anything runs."""

    @property
    def node(self) -> str:
        """The node's name in the cluster (used in errors and logs)."""
        ...

    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command``; with ``check`` a non-zero exit raises CommandFailed."""
        ...

    def put(
        self, source: Path | bytes, remote_path: str, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        """Write a local file, a local directory (recursively) or bytes to ``remote_path``; parents are created."""
        ...

    def get(self, remote_path: str, local_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Copy a remote file to ``local_path``, or a remote directory's regular files under ``local_path``."""
        ...

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: str,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> int:
        """Start ``argv`` detached as daemon ``name``; return its pid. Raises CommandFailed if it already runs."""
        ...

    def signal(self, name: str, sig: signal_module.Signals, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Send ``sig`` to daemon ``name``'s process group; False if the daemon is not running."""
        ...

    def is_alive(self, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Whether daemon ``name`` runs (or is stopped); False for never started, exited or zombie."""
        ...

    def close(self) -> None:
        """Release connections; the remote may be used again afterwards (it reconnects)."""
        ...


class ForwardingRemote:
    """A Remote that hands every call unchanged to ``inner`` (see the module docstring).

    A subclass overrides the one call it changes.  Only the :class:`Remote` protocol is forwarded:
    the optional abilities (``Reconnectable``, ``ContainerBacked``) are not, so ``isinstance``
    checks for them answer for the wrapper, which does not have them.
    """

    def __init__(self, inner: Remote) -> None:
        self.inner = inner

    @property
    def node(self) -> str:
        return self.inner.node

    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        return self.inner.exec(command, timeout=timeout, check=check, env=env)

    def put(
        self, source: Path | bytes, remote_path: str, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.inner.put(source, remote_path, mode=mode, timeout=timeout)

    def get(self, remote_path: str, local_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.inner.get(remote_path, local_path, timeout=timeout)

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: str,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> int:
        return self.inner.start_daemon(name, argv, log_path=log_path, env=env, timeout=timeout)

    def signal(self, name: str, sig: signal_module.Signals, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        return self.inner.signal(name, sig, timeout=timeout)

    def is_alive(self, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        return self.inner.is_alive(name, timeout=timeout)

    def close(self) -> None:
        self.inner.close()


@runtime_checkable
class Reconnectable(Protocol):
    """A remote over a connection that can die and be re-opened (SSH)."""

    def reconnect(self) -> None: ...


@runtime_checkable
class ContainerBacked(Protocol):
    """A remote that is a Docker container, for operations that need the container itself."""

    @property
    def container_id(self) -> str: ...


def validate_name(name: str, what: str = "daemon name") -> str:
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r} must be 1-64 of [A-Za-z0-9_.-], starting with a letter or digit")
    return name


def command_text(command: Command) -> str:
    """The command as one shell-quoted line (for messages and for SSH)."""
    if isinstance(command, str):
        return command
    return shlex.join(command)


def bounded_argv(command: Command, timeout: float, env: Mapping[str, str] | None = None) -> list[str]:
    """argv that runs ``command`` under coreutils ``timeout`` with ``env`` added to the environment."""
    if not isinstance(command, str) and (not command or not all(isinstance(part, str) for part in command)):
        raise ValueError(f"command must be a string or a non-empty sequence of strings, not {command!r}")
    seconds = f"{max(timeout, 0.001):.3f}"
    argv = ["timeout", f"--kill-after={KILL_GRACE_SECONDS}", seconds]
    if env:
        argv += ["env", "--", *(f"{_env_name(key)}={value}" for key, value in env.items())]
    if isinstance(command, str):
        return [*argv, "/bin/sh", "-c", command]
    return [*argv, *command]


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"environment variable name {name!r} is not a valid identifier")
    return name


# Shared by the daemon scripts: `alive PID START` succeeds if that very process exists and is not a
# zombie. /proc/PID/stat's second field (comm) may hold spaces and parentheses: split after the last ')'.
_ALIVE_FUNCTION = r"""
alive() {
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    expected_start=$2
    set -- ${stat##*) }
    [ "$1" != Z ] && [ "$1" != X ] && [ "${20}" = "$expected_start" ]
}
"""


def daemon_start_script(
    state_dir: str, name: str, argv: Sequence[str], log_path: str, env: Mapping[str, str] | None
) -> str:
    validate_name(name)
    if not argv:
        raise ValueError(f"daemon {name}: argv is empty")
    environment = " ".join(shlex.quote(f"{_env_name(key)}={value}") for key, value in (env or {}).items())
    pid_file = shlex.quote(f"{state_dir}/{name}.pid")
    log = shlex.quote(log_path)
    # Without job control the background child is not a process-group leader, so setsid does not
    # fork again and $! is the daemon's own pid.
    return f"""set -eu
{_ALIVE_FUNCTION}
mkdir -p {shlex.quote(state_dir)} "$(dirname -- {log})"
if [ -s {pid_file} ]; then
    read -r old_pid old_start < {pid_file} || true
    if alive "$old_pid" "$old_start"; then echo "daemon {name} already runs as pid $old_pid" >&2; exit {_NOT_RUNNING_EXIT}; fi
fi
cd /
setsid env -- {environment} {shlex.join(argv)} >> {log} 2>&1 < /dev/null &
pid=$!
stat=$(cat "/proc/$pid/stat")
set -- ${{stat##*) }}
echo "$pid ${{20}}" > {pid_file}.new
mv -f {pid_file}.new {pid_file}
echo "$pid"
"""


def daemon_signal_script(state_dir: str, name: str, sig: signal_module.Signals) -> str:
    validate_name(name)
    pid_file = shlex.quote(f"{state_dir}/{name}.pid")
    signal_name = signal_module.Signals(sig).name.removeprefix("SIG")
    return f"""{_ALIVE_FUNCTION}
[ -s {pid_file} ] || exit {_NOT_RUNNING_EXIT}
read -r pid start < {pid_file} || exit {_NOT_RUNNING_EXIT}
alive "$pid" "$start" || exit {_NOT_RUNNING_EXIT}
kill -s {signal_name} -- "-$pid" 2>/dev/null || kill -s {signal_name} "$pid"
"""


def daemon_alive_script(state_dir: str, name: str) -> str:
    validate_name(name)
    pid_file = shlex.quote(f"{state_dir}/{name}.pid")
    return f"""{_ALIVE_FUNCTION}
[ -s {pid_file} ] || exit {_NOT_RUNNING_EXIT}
read -r pid start < {pid_file} || exit {_NOT_RUNNING_EXIT}
alive "$pid" "$start" || exit {_NOT_RUNNING_EXIT}
"""


class ShellDaemons(ABC):
    """start_daemon / signal / is_alive for any remote that can ``exec``, via the scripts above."""

    state_dir: str = DEFAULT_STATE_DIR

    @property
    @abstractmethod
    def node(self) -> str: ...

    @abstractmethod
    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: str,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> int:
        script = daemon_start_script(self.state_dir, name, argv, log_path, env)
        result = self.exec(script, timeout=timeout)
        words = result.stdout_text.split()
        if words and words[-1].isdigit():
            return int(words[-1])
        # The script succeeded, so it wrote the pid file; its output was lost on the way (seen
        # once under heavy load with Docker's exec stream).  The pid file says what it printed.
        record = self.exec(f"cat {shlex.quote(f'{self.state_dir}/{name}.pid')}", timeout=timeout, check=False)
        recorded = record.stdout_text.split()
        if record.exit_code == 0 and recorded and recorded[0].isdigit():
            return int(recorded[0])
        raise RemoteError(
            self.node,
            f"start {name}: no pid in the start script's output ({result.stdout_text!r}) nor in its pid file",
        )

    def signal(self, name: str, sig: signal_module.Signals, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        result = self.exec(daemon_signal_script(self.state_dir, name, sig), timeout=timeout, check=False)
        return self._daemon_status(result, f"signal {name}")

    def is_alive(self, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        result = self.exec(daemon_alive_script(self.state_dir, name), timeout=timeout, check=False)
        return self._daemon_status(result, f"is_alive {name}")

    def _daemon_status(self, result: ExecResult, what: str) -> bool:
        if result.exit_code == 0:
            return True
        if result.exit_code == _NOT_RUNNING_EXIT:
            return False
        raise CommandFailed(self.node, what, result.exit_code, result.stdout, result.stderr)
