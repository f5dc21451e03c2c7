"""``Remote`` over the Docker engine API: exec for commands, put_archive / get_archive for files.

No SSH, no network path to the node needed: the engine reaches into the container. That makes it
the remote the harness uses by default for its own containers (and the one that bootstraps SSH:
the cluster reads each container's host key and installs the authorized key through it).

Every call runs the engine request in a worker thread and waits at most its timeout (plus the
grace coreutils ``timeout`` needs to kill the command), so a hung engine cannot hang the harness; the
command itself is killed inside the container at its deadline.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from testbed.nodes.remote import (
    DEFAULT_STATE_DIR,
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

T = TypeVar("T")
_ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)
_ENGINE_SLACK_SECONDS = 2.0  # engine round trips on top of the command's own deadline


class DockerUnavailable(Exception):
    """No Docker engine answers; the message names where it was looked for."""


def connect_docker(timeout: float = 60.0) -> docker.DockerClient:
    """A client for the engine the environment names (DOCKER_HOST, else the local socket), checked with a ping."""
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        raise DockerUnavailable(f"no Docker engine answers at {where}: {error}") from error
    return client


def _bounded(node: str, what: str, timeout: float, call: Callable[[threading.Event], T]) -> T:
    """Run ``call`` in a daemon thread; raise RemoteTimeout (and set the event it got) if it overruns."""
    cancelled = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, call(cancelled)))
        except BaseException as error:
            outcome.append((False, error))

    thread = threading.Thread(target=target, name=f"docker-remote-{node}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        cancelled.set()
        raise RemoteTimeout(node, what, timeout)
    succeeded, value = outcome[0]
    if succeeded:
        return value  # type: ignore[no-any-return]
    if isinstance(value, _ENGINE_ERRORS) and not isinstance(value, RemoteError):
        raise RemoteError(node, f"{what}: {value}") from value
    raise value


class DockerRemote(ShellDaemons):
    """A container reached through the Docker engine. Thread-safe; ``close`` is a no-op (the caller owns the client)."""

    def __init__(
        self,
        client: docker.DockerClient,
        container: str,
        *,
        node: str | None = None,
        state_dir: str = DEFAULT_STATE_DIR,
    ) -> None:
        self._api = client.api
        self._container = container
        self._node = node or container
        self.state_dir = state_dir

    @property
    def node(self) -> str:
        return self._node

    @property
    def container_id(self) -> str:
        return self._container

    def __repr__(self) -> str:
        return f"DockerRemote({self._node!r}, container={self._container[:12]!r})"

    def exec(
        self,
        command: Command,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        argv = bounded_argv(command, timeout, env)
        text = command_text(command)

        def run(cancelled: threading.Event) -> ExecResult:
            exec_id = self._api.exec_create(self._container, argv, stdout=True, stderr=True)["Id"]
            stdout, stderr = self._api.exec_start(exec_id, demux=True)
            # The output stream ends when the process exits; the engine records the exit code a moment later.
            while (state := self._api.exec_inspect(exec_id))["Running"] and not cancelled.is_set():
                time.sleep(0.01)
            return ExecResult(
                int(state["ExitCode"] if state["ExitCode"] is not None else -1), stdout or b"", stderr or b""
            )

        started = time.monotonic()
        result = _bounded(
            self._node, f"exec {text!r}", timeout + KILL_GRACE_SECONDS + _ENGINE_SLACK_SECONDS, run
        )
        if result.exit_code in TIMEOUT_EXIT_CODES and time.monotonic() - started >= timeout:
            raise RemoteTimeout(self._node, f"exec {text!r}", timeout)
        if check and result.exit_code != 0:
            raise CommandFailed(self._node, text, result.exit_code, result.stdout, result.stderr)
        return result

    def put(
        self, source: Path | bytes, remote_path: str, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if not posixpath.isabs(remote_path):
            raise ValueError(f"remote path {remote_path!r} must be absolute")
        deadline = time.monotonic() + timeout
        parent, name = posixpath.split(remote_path.rstrip("/"))
        with tempfile.SpooledTemporaryFile(max_size=16 * 2**20) as archive:
            _write_archive(archive, source, name, mode)
            self.exec(["mkdir", "-p", parent or "/"], timeout=timeout)
            archive.seek(0)
            accepted = _bounded(
                self._node,
                f"put {remote_path}",
                max(deadline - time.monotonic(), 0.001),
                lambda _cancelled: self._api.put_archive(self._container, parent or "/", archive),
            )
        if accepted is not True:
            raise RemoteError(self._node, f"put {remote_path}: the engine did not accept the archive")

    def get(self, remote_path: str, local_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        def fetch(cancelled: threading.Event) -> IO[bytes]:
            try:
                stream, _stat = self._api.get_archive(self._container, remote_path)
            except docker.errors.NotFound as error:
                if "no such container" in str(error.explanation).lower():
                    raise
                raise RemotePathNotFound(
                    self._node, f"get {remote_path}: no such file or directory"
                ) from error
            spool = tempfile.TemporaryFile()  # noqa: SIM115 -- handed to the caller, who closes it
            try:
                for chunk in stream:
                    if cancelled.is_set():
                        raise RemoteTimeout(self._node, f"get {remote_path}", timeout)
                    spool.write(chunk)
            except BaseException:
                spool.close()
                raise
            spool.seek(0)
            return spool

        with _bounded(self._node, f"get {remote_path}", timeout, fetch) as spool:
            _extract_archive(
                spool, posixpath.basename(remote_path.rstrip("/")), local_path, self._node, remote_path
            )

    def close(self) -> None:
        """Nothing to release: the Docker client belongs to the caller."""


def _write_archive(archive: IO[bytes], source: Path | bytes, name: str, mode: int) -> None:
    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=archive, mode="w") as tar:
        if isinstance(source, bytes):
            info = as_root(tarfile.TarInfo(name))
            info.size, info.mode, info.mtime = len(source), mode, int(time.time())
            tar.addfile(info, io.BytesIO(source))
        elif source.is_dir():
            tar.add(source, arcname=name, filter=as_root)
        elif source.is_file():
            info = as_root(tar.gettarinfo(source, arcname=name))
            info.mode = mode
            with source.open("rb") as content:
                tar.addfile(info, content)
        else:
            raise FileNotFoundError(f"put: {source} is not a file or directory")


def _extract_archive(archive: IO[bytes], top: str, local_path: Path, node: str, remote_path: str) -> None:
    """Write the archive's regular files and directories under ``local_path``.

    Only regular files and directories are taken (links and devices are skipped) and every member must
    lie under the archive's top entry, so a hostile container cannot write outside ``local_path``.
    """
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        for member in tar:
            parts = member.name.split("/")
            if parts[0] != top or any(part in ("", ".", "..") for part in parts[1:]):
                raise RemoteError(node, f"get {remote_path}: unexpected archive member {member.name!r}")
            target = local_path.joinpath(*parts[1:])
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                content = tar.extractfile(member)
                if content is None:
                    raise RemoteError(node, f"get {remote_path}: cannot read {member.name!r}")
                with target.open("wb") as out:
                    while block := content.read(1 << 20):
                        out.write(block)
                target.chmod((member.mode & 0o777) | 0o600)
            elif len(parts) == 1:
                raise RemoteError(node, f"get {remote_path}: not a regular file or directory")
