"""``Remote`` over SSH (paramiko): for real hosts, and for the containers' own sshd in tests.

Security and liveness are not optional here:

* Host keys are always verified against a known_hosts file; an unknown host or a different key raises
  ``HostKeyError`` before any command is sent. For the harness's containers the cluster collects each
  container's freshly generated host key through the Docker remote and writes the known_hosts file
  (see ``write_known_hosts``), so verification costs the user nothing.
* Every call has a deadline. paramiko blocks without limit in places (waiting for the reply to an exec
  or subsystem request), so a watchdog timer closes the call's channel at the deadline, which wakes
  every wait; the command itself runs under coreutils ``timeout`` on the node, so it dies too.
* A transport that died (node restarted, connection killed, keepalive failed) is replaced on the next
  call. If opening the channel fails on a transport that looked alive, the call reconnects and retries
  once: no command was sent yet, so the retry cannot run anything twice. A connection lost while a
  command runs raises RemoteError (outcome unknown) and is not retried.
"""

from __future__ import annotations

import contextlib
import posixpath
import select
import shlex
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from testbed.nodes.remote import (
    DEFAULT_STATE_DIR,
    DEFAULT_TIMEOUT,
    KILL_GRACE_SECONDS,
    TIMEOUT_EXIT_CODES,
    Command,
    CommandFailed,
    ExecResult,
    HostKeyError,
    RemoteError,
    RemotePathNotFound,
    RemoteTimeout,
    ShellDaemons,
    bounded_argv,
    command_text,
)

_NETWORK_SLACK_SECONDS = 2.0  # round trips on top of the command's own deadline
_CONNECTION_ERRORS = (paramiko.SSHException, EOFError, OSError)


@dataclass(frozen=True)
class SshKeyPair:
    """An Ed25519 client key: the private key in a 0600 file, the public key as an authorized_keys line."""

    private_key_path: Path
    public_key_line: str

    @classmethod
    def generate(cls, private_key_path: Path, comment: str = "tidemark") -> SshKeyPair:
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        private_key_path.parent.mkdir(parents=True, exist_ok=True)
        private_key_path.unlink(missing_ok=True)
        private_key_path.touch(mode=0o600)  # created private before the key is written into it
        private_key_path.write_bytes(private)
        return cls(private_key_path, f"{public.decode()} {comment}")


def known_hosts_line(host: str, port: int, public_key_line: str) -> str:
    """One known_hosts line for a host key as found in ``ssh_host_*_key.pub`` (``type base64 [comment]``)."""
    key_type, key_data = public_key_line.split()[:2]
    address = host if port == 22 else f"[{host}]:{port}"
    return f"{address} {key_type} {key_data}"


def write_known_hosts(path: Path, entries: Iterable[tuple[str, int, str]]) -> None:
    """Write a known_hosts file for ``(host, port, public key line)`` entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(known_hosts_line(*entry) + "\n" for entry in entries), encoding="utf-8")


class _RejectUnknownHost(paramiko.MissingHostKeyPolicy):
    def __init__(self, node: str, known_hosts: Path) -> None:
        self._node = node
        self._known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise HostKeyError(
            self._node,
            f"host {hostname} is not in {self._known_hosts} (offered {key.get_name()} {key.fingerprint})",
        )


class _Watchdog:
    """Calls ``on_expiry`` once ``seconds`` have passed unless the block ended first."""

    def __init__(self, seconds: float, on_expiry: Callable[[], None]) -> None:
        self.expired = False
        self._on_expiry = on_expiry
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.expired = True
        self._on_expiry()

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_exception: object) -> None:
        self._timer.cancel()


class SshRemote(ShellDaemons):
    """A host reached over SSH with key authentication. Thread-safe: calls share one transport."""

    def __init__(
        self,
        host: str,
        *,
        key_path: Path,
        known_hosts: Path,
        node: str | None = None,
        port: int = 22,
        user: str = "root",
        connect_timeout: float = 10.0,
        keepalive_seconds: int = 5,
        state_dir: str = DEFAULT_STATE_DIR,
    ) -> None:
        self._host = host
        self._port = port
        self._user = user
        self._node = node or host
        self._key_path = key_path
        self._known_hosts = known_hosts
        self._connect_timeout = connect_timeout
        self._keepalive_seconds = keepalive_seconds
        self.state_dir = state_dir
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None

    @property
    def node(self) -> str:
        return self._node

    def __repr__(self) -> str:
        return f"SshRemote({self._node!r}, {self._user}@{self._host}:{self._port})"

    # -- connection --------------------------------------------------------------------------------

    def _connect(self, deadline: float) -> paramiko.Transport:
        timeout = max(min(self._connect_timeout, deadline - time.monotonic()), 0.001)
        try:
            key = paramiko.PKey.from_path(self._key_path)
        except (OSError, paramiko.SSHException) as error:
            raise RemoteError(self._node, f"cannot load SSH key {self._key_path}: {error}") from error
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(str(self._known_hosts))
        except OSError as error:
            raise HostKeyError(self._node, f"cannot read known_hosts {self._known_hosts}: {error}") from error
        client.set_missing_host_key_policy(_RejectUnknownHost(self._node, self._known_hosts))
        where = f"{self._user}@{self._host}:{self._port}"
        try:
            client.connect(
                self._host,
                port=self._port,
                username=self._user,
                pkey=key,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyError(
                self._node,
                f"host key of {where} ({error.key.get_name()} {error.key.fingerprint}) differs from the one "
                f"in {self._known_hosts} ({error.expected_key.fingerprint})",
            ) from error
        except paramiko.AuthenticationException as error:
            client.close()
            raise RemoteError(
                self._node, f"authentication as {where} with {self._key_path} failed: {error}"
            ) from error
        except (*_CONNECTION_ERRORS, TimeoutError) as error:
            client.close()
            raise RemoteError(
                self._node, f"cannot connect to {where}: {error or type(error).__name__}"
            ) from error
        transport = client.get_transport()
        if transport is None:  # connect() succeeded, so this means the peer hung up at once
            client.close()
            raise RemoteError(self._node, f"connection to {where} closed right after it opened")
        transport.set_keepalive(self._keepalive_seconds)
        self._client = client
        return transport

    def _transport(self, deadline: float, *, fresh: bool = False) -> paramiko.Transport:
        with self._lock:
            transport = self._client.get_transport() if self._client is not None else None
            if fresh or transport is None or not transport.is_active():
                if self._client is not None:
                    self._client.close()
                    self._client = None
                transport = self._connect(deadline)
            return transport

    def reconnect(self) -> None:
        """Drop the current connection and open a new one now."""
        self._transport(time.monotonic() + self._connect_timeout, fresh=True)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _open_channel(self, deadline: float, what: str, timeout: float) -> paramiko.Channel:
        for attempt in (1, 2):
            transport = self._transport(deadline, fresh=attempt == 2)
            try:
                channel = transport.open_session(timeout=max(deadline - time.monotonic(), 0.001))
            except _CONNECTION_ERRORS as error:
                if time.monotonic() >= deadline:
                    raise RemoteTimeout(self._node, what, timeout) from error
                if attempt == 2:
                    raise RemoteError(
                        self._node, f"cannot open an SSH channel: {error or type(error).__name__}"
                    ) from error
                continue
            channel.settimeout(max(deadline - time.monotonic(), 0.001))
            return channel
        raise AssertionError("unreachable")

    # -- commands ----------------------------------------------------------------------------------

    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        line = shlex.join(bounded_argv(command, timeout, env))
        text = command_text(command)
        started = time.monotonic()
        deadline = started + timeout + KILL_GRACE_SECONDS + _NETWORK_SLACK_SECONDS
        channel = self._open_channel(deadline, f"exec {text!r}", timeout)
        watchdog = _Watchdog(deadline - time.monotonic(), channel.close)
        try:
            with watchdog:
                channel.exec_command(line)
                result = _collect_output(channel, deadline)
        except _CONNECTION_ERRORS as error:
            if watchdog.expired or time.monotonic() >= deadline:
                raise RemoteTimeout(self._node, f"exec {text!r}", timeout) from error
            raise RemoteError(
                self._node, f"connection lost during {text!r}: {error or type(error).__name__}"
            ) from error
        finally:
            channel.close()
        if result is None or watchdog.expired:
            raise RemoteTimeout(self._node, f"exec {text!r}", timeout)
        if result.exit_code in TIMEOUT_EXIT_CODES and time.monotonic() - started >= timeout:
            raise RemoteTimeout(self._node, f"exec {text!r}", timeout)
        if check and result.exit_code != 0:
            raise CommandFailed(self._node, text, result.exit_code, result.stdout, result.stderr)
        return result

    # -- files -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _sftp(self, what: str, timeout: float) -> Iterator[paramiko.SFTPClient]:
        deadline = time.monotonic() + timeout
        channel = self._open_channel(deadline, what, timeout)
        watchdog = _Watchdog(deadline - time.monotonic(), channel.close)
        try:
            with watchdog:
                channel.invoke_subsystem("sftp")
                with paramiko.SFTPClient(channel) as sftp:
                    yield sftp
        except FileNotFoundError as error:
            raise RemotePathNotFound(self._node, f"{what}: {error.filename or error}") from error
        except (*_CONNECTION_ERRORS, TimeoutError) as error:
            if watchdog.expired or time.monotonic() >= deadline:
                raise RemoteTimeout(self._node, what, timeout) from error
            raise RemoteError(self._node, f"{what}: {error or type(error).__name__}") from error
        finally:
            channel.close()

    def put(
        self, source: Path | bytes, remote_path: str, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if not posixpath.isabs(remote_path):
            raise ValueError(f"remote path {remote_path!r} must be absolute")
        if not isinstance(source, bytes) and not source.exists():
            raise FileNotFoundError(f"put: {source} is not a file or directory")
        started = time.monotonic()
        remote_path = remote_path.rstrip("/") or "/"
        self.exec(["mkdir", "-p", posixpath.dirname(remote_path) or "/"], timeout=timeout)
        with self._sftp(f"put {remote_path}", max(timeout - (time.monotonic() - started), 0.001)) as sftp:
            if isinstance(source, bytes):
                with sftp.open(remote_path, "wb") as handle:
                    handle.chmod(mode)  # before the content: a key never sits there world-readable
                    handle.set_pipelined(True)
                    handle.write(source)
            elif source.is_dir():
                _put_tree(sftp, source, remote_path)
            else:
                sftp.put(str(source), remote_path, confirm=True)
                sftp.chmod(remote_path, mode)

    def get(self, remote_path: str, local_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        with self._sftp(f"get {remote_path}", timeout) as sftp:
            attributes = sftp.stat(remote_path)  # a missing path raises FileNotFoundError
            if stat.S_ISDIR(attributes.st_mode or 0):
                _get_tree(sftp, remote_path, local_path)
            elif stat.S_ISREG(attributes.st_mode or 0):
                local_path.parent.mkdir(parents=True, exist_ok=True)
                sftp.get(remote_path, str(local_path))
            else:
                raise RemoteError(self._node, f"get {remote_path}: not a regular file or directory")


def _collect_output(channel: paramiko.Channel, deadline: float) -> ExecResult | None:
    """Read stdout and stderr until the command ends; None if the deadline passes first.

    Both streams are drained as data arrives (the channel's file descriptor signals either), so a
    command writing much to stderr cannot stall on a full window while stdout is read.
    """
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    while True:
        while channel.recv_ready():
            stdout.append(channel.recv(1 << 16))
        while channel.recv_stderr_ready():
            stderr.append(channel.recv_stderr(1 << 16))
        if channel.eof_received or channel.closed:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        select.select([channel], [], [], remaining)
    if not channel.status_event.wait(max(deadline - time.monotonic(), 0.0)):
        return None
    while channel.recv_ready():
        stdout.append(channel.recv(1 << 16))
    while channel.recv_stderr_ready():
        stderr.append(channel.recv_stderr(1 << 16))
    exit_code = channel.recv_exit_status()
    if exit_code == -1:  # closed without an exit status: the connection died (or the watchdog closed it)
        raise EOFError("the channel closed before the command's exit status arrived")
    return ExecResult(exit_code, b"".join(stdout), b"".join(stderr))


def _put_tree(sftp: paramiko.SFTPClient, local_root: Path, remote_root: str) -> None:
    for directory in [local_root, *sorted(path for path in local_root.rglob("*") if path.is_dir())]:
        relative = directory.relative_to(local_root).as_posix()
        target = remote_root if relative == "." else posixpath.join(remote_root, relative)
        with contextlib.suppress(OSError):  # exists already
            sftp.mkdir(target)
        for path in sorted(directory.iterdir()):
            if path.is_file():
                remote_file = posixpath.join(target, path.name)
                sftp.put(str(path), remote_file, confirm=True)
                sftp.chmod(remote_file, path.stat().st_mode & 0o777)


def _get_tree(sftp: paramiko.SFTPClient, remote_root: str, local_root: Path) -> None:
    local_root.mkdir(parents=True, exist_ok=True)
    for entry in sftp.listdir_attr(remote_root):
        remote = posixpath.join(remote_root, entry.filename)
        if stat.S_ISDIR(entry.st_mode or 0):
            _get_tree(sftp, remote, local_root / entry.filename)
        elif stat.S_ISREG(entry.st_mode or 0):
            sftp.get(remote, str(local_root / entry.filename))
