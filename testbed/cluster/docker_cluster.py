"""A Tidemark cluster in Docker: a private network, a controller container and N broker containers.

Usage (the lead's runner)::

    with DockerCluster(client, image_tag, brokers=3) as cluster:
        cluster.ip("n1"); cluster.remote("n1").start_daemon(...); cluster.ssh_remote("n2")

Contracts:

* Everything belongs to one run id: the network ``tidemark-<run>`` and the containers
  ``tidemark-<run>-<node>`` carry the labels ``tidemark=1``, ``tidemark.run=<run>``,
  ``tidemark.node=<node>`` (containers) and ``tidemark.role``. Teardown removes by label, not by the
  ids it remembers, so a container created just as an interrupt arrived is removed too, and
  :func:`testbed.cluster.docker_labels.remove_all` (``tidemark cluster down --all``) finds whatever a killed harness left behind.
* A cluster owned by its process (every run's; not ``tidemark cluster up``'s) also carries
  ``tidemark.owner=<host>:<pid>``. Starting a cluster first removes every run whose owner process on
  this host is gone (:func:`testbed.cluster.docker_labels.remove_orphans`): a harness killed with SIGKILL, or by the OOM killer,
  cannot tear down, so the next run does it.
* Capabilities: Docker's defaults plus NET_ADMIN (iptables partitions) and SYS_ADMIN with
  ``/dev/fuse`` (the FUSE power-loss filesystem); ``apparmor=unconfined`` only on AppArmor hosts. Never
  ``--privileged``.
* ``start`` returns when every container runs, every sshd listens, and each node's own host key is in
  the cluster's known_hosts (read through the Docker remote) with the run's public key authorized, so
  ``ssh_remote`` works at once with host-key checking on. Readiness is a condition each node waits on
  (sshd's pid file, written once it listens), never a fixed sleep.
* Teardown always runs: on leaving the ``with`` block normally or by an exception, on SIGINT and on
  SIGTERM (while a cluster is up, SIGTERM with the default disposition raises SystemExit(143) so the
  stack unwinds through ``__exit__``; a handler installed before is chained instead), at interpreter
  exit for a cluster never torn down, and when ``start`` itself is interrupted. SIGINT/SIGTERM arriving
  *during* teardown are held back until it has finished, then delivered.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions

from testbed.cluster.docker_labels import (
    LABEL,
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_ROLE,
    LABEL_RUN,
    owner_label,
    remove_orphans,
    remove_run,
)
from testbed.cluster.docker_labels import ClusterError as ClusterError
from testbed.nodes.docker_remote import DockerRemote
from testbed.nodes.remote import Remote, RemoteError
from testbed.nodes.ssh_remote import SshKeyPair, SshRemote, write_known_hosts

CONTROLLER = "controller"

logger = logging.getLogger(__name__)
CAPABILITIES = ("NET_ADMIN", "SYS_ADMIN")
_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}$")
_SSH_READY_SCRIPT = (
    "while [ ! -s /run/sshd.pid ] || [ ! -s /etc/ssh/ssh_host_ed25519_key.pub ]; do sleep 0.02; done;"
    " cat /etc/ssh/ssh_host_ed25519_key.pub"
)
_HOST_KEY_READS = 5
"""How often a node's host key is read before its start fails: a hunt's run once got an empty
answer (2026-11-29, 1 of 44 cluster starts), which then failed as a ValueError in known_hosts."""
_DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


@dataclass(frozen=True)
class ClusterNode:
    name: str  # "controller", "n1", "n2", ...
    role: str  # "controller" or "broker"
    container_id: str
    ip: str  # on the run's private network; reachable from the Docker host


def new_run_id() -> str:
    """A run id that sorts by start time and is unique enough to run clusters side by side."""
    return time.strftime("%Y%m%dt%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def broker_names(count: int) -> list[str]:
    return [f"n{index}" for index in range(1, count + 1)]


# -- signal handling shared by every live cluster of this process ----------------------------------

_live: list[DockerCluster] = []
_previous_handlers: dict[int, Any] = {}
_deferred_signals: list[int] = []
_defer_depth = 0
_registry_lock = threading.RLock()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _defer_depth > 0:
        _deferred_signals.append(signum)
        return
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(
            signum, frame
        )  # Python's SIGINT handler raises KeyboardInterrupt; a caller's own handler decides
    elif previous == signal.SIG_DFL:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)


def _register(cluster: DockerCluster) -> None:
    with _registry_lock:
        _live.append(cluster)
        if threading.current_thread() is threading.main_thread() and not _previous_handlers:
            for signum in (signal.SIGINT, signal.SIGTERM):
                _previous_handlers[signum] = signal.getsignal(signum)
                signal.signal(signum, _on_signal)


def _unregister(cluster: DockerCluster) -> None:
    with _registry_lock:
        if cluster in _live:
            _live.remove(cluster)
        if not _live and _previous_handlers and threading.current_thread() is threading.main_thread():
            for signum, handler in _previous_handlers.items():
                if (
                    signal.getsignal(signum) is _on_signal
                ):  # leave alone a handler someone installed after ours
                    signal.signal(signum, handler)
            _previous_handlers.clear()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back (on the main thread) until the block ends, then deliver them once."""
    global _defer_depth
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        _defer_depth += 1
    try:
        yield
    finally:
        if on_main:
            _defer_depth -= 1
            if _defer_depth == 0 and _deferred_signals:
                pending = sorted(set(_deferred_signals), reverse=True)  # SIGTERM before SIGINT
                _deferred_signals.clear()
                signal.raise_signal(pending[0])


@atexit.register
def _tear_down_leftovers() -> None:
    for cluster in list(_live):
        with contextlib.suppress(Exception):
            cluster.teardown()


# -- the cluster ----------------------------------------------------------------------------------


class DockerCluster:
    """A controller plus ``brokers`` broker containers of ``image`` on a private network (see module doc)."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        *,
        brokers: int = 3,
        run_id: str | None = None,
        ready_timeout: float = 60.0,
        fuse: bool = True,
        work_dir: Path | None = None,
        owned: bool = True,
        controller: str | None = CONTROLLER,
    ) -> None:
        """``controller`` names the one node that is not a broker (role label ``controller``): the
        bundled broker's controller, or another target's metadata store (tansu's PostgreSQL);
        None for a cluster of brokers alone (nisshi on its embedded SQLite)."""
        if brokers < 1:
            raise ValueError(f"brokers must be at least 1, not {brokers}")
        self.run_id = run_id or new_run_id()
        if not _RUN_ID.match(self.run_id):
            raise ValueError(
                f"run id {self.run_id!r} must be 1-48 of [a-z0-9_.-], starting with a letter or digit"
            )
        self.image = image
        self.network_name = f"tidemark-{self.run_id}"
        self.broker_names = broker_names(brokers)
        if controller is not None and (controller in self.broker_names or not _RUN_ID.match(controller)):
            raise ValueError(f"controller node name {controller!r} must be a new name of [a-z0-9_.-]")
        self.controller = controller
        self.node_names = [*([] if controller is None else [controller]), *self.broker_names]
        self.nodes: dict[str, ClusterNode] = {}
        self._client = client
        self._ready_timeout = ready_timeout
        self._fuse = fuse
        self._given_work_dir = work_dir
        self._labels = {LABEL: "1", LABEL_RUN: self.run_id, **({LABEL_OWNER: owner_label()} if owned else {})}
        self._work_dir: Path | None = None
        self._ssh_key: SshKeyPair | None = None
        self._ssh_remotes: list[SshRemote] = []
        self._state = "new"  # new → starting → up → down

    def __enter__(self) -> DockerCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.teardown()

    @property
    def work_dir(self) -> Path:
        """Holds the run's SSH client key and known_hosts; removed at teardown unless the caller gave it."""
        if self._work_dir is None:
            raise ClusterError("the cluster has not been started")
        return self._work_dir

    @property
    def known_hosts_path(self) -> Path:
        return self.work_dir / "known_hosts"

    @property
    def ssh_key_path(self) -> Path:
        return self.work_dir / "id_ed25519"

    def ip(self, name: str) -> str:
        return self._node(name).ip

    def remote(self, name: str) -> DockerRemote:
        node = self._node(name)
        return DockerRemote(self._client, node.container_id, node=name)

    def remotes(self) -> dict[str, DockerRemote]:
        return {name: self.remote(name) for name in self.node_names}

    def ssh_remote(self, name: str, *, connect_timeout: float = 10.0) -> SshRemote:
        """An SSH remote to ``name`` with host-key checking against the cluster's known_hosts; closed at teardown."""
        remote = SshRemote(
            self.ip(name),
            node=name,
            key_path=self.ssh_key_path,
            known_hosts=self.known_hosts_path,
            connect_timeout=connect_timeout,
        )
        self._ssh_remotes.append(remote)
        return remote

    def remotes_via(self, transport: str) -> dict[str, Remote]:
        """A remote to every node over ``transport`` (a run's ``--transport``): ``ssh`` gives
        :meth:`ssh_remote` s, anything else the Docker engine's :meth:`remotes`."""
        if transport == "ssh":
            return {name: self.ssh_remote(name) for name in self.node_names}
        return dict(self.remotes())

    def _node(self, name: str) -> ClusterNode:
        if self._state != "up":
            raise ClusterError(f"cluster {self.run_id} is {self._state}, not up")
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(
                f"no node {name!r} in cluster {self.run_id} (nodes: {', '.join(self.node_names)})"
            ) from None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> DockerCluster:
        """Create network and containers and wait until every node is ready; tears down on any failure."""
        if self._state != "new":
            raise ClusterError(f"cluster {self.run_id} was already started")
        self._state = "starting"
        try:
            removed = remove_orphans(self._client)
        except _DOCKER_ERRORS as error:  # cleaning up after others must not stop this run
            logger.warning("could not look for clusters left by dead harness processes: %s", error)
        else:
            if removed:
                logger.warning("removed clusters left by dead harness processes: %s", ", ".join(removed))
        _register(self)
        try:
            self._work_dir = self._given_work_dir or Path(tempfile.mkdtemp(prefix=f"tidemark-{self.run_id}-"))
            self._work_dir.mkdir(parents=True, exist_ok=True)
            self._ssh_key = SshKeyPair.generate(self.ssh_key_path, comment=f"tidemark-{self.run_id}")
            # An interrupt inside this call could leave the daemon creating the network after
            # teardown has already looked for it (seen once in CI): let the call finish first.
            with _signals_deferred():
                self._client.networks.create(
                    self.network_name,
                    driver="bridge",
                    labels=self._labels,
                    check_duplicate=True,
                )
            options = self._container_options()
            self._in_parallel(lambda name: self._create_node(name, options))
            host_keys = self._in_parallel(self._prepare_ssh)
            write_known_hosts(
                self.known_hosts_path,
                [(self.nodes[name].ip, 22, host_keys[name]) for name in self.node_names],
            )
        except BaseException as error:
            self.teardown()
            if isinstance(error, (*_DOCKER_ERRORS, RemoteError)):
                raise ClusterError(f"cluster {self.run_id} did not start: {error}") from error
            raise
        self._state = "up"
        return self

    def detach(self) -> None:
        """Leave the cluster running past this process (``tidemark cluster up``): no teardown on exit or signal."""
        _unregister(self)

    def teardown(self) -> None:
        """Remove every container and the network of this run. Idempotent; signals wait until it is done."""
        with _signals_deferred():
            if self._state in ("new", "down"):
                return
            for remote in self._ssh_remotes:
                with contextlib.suppress(Exception):
                    remote.close()
            try:
                remove_run(self._client, self.run_id)
            except _DOCKER_ERRORS as error:
                raise ClusterError(f"teardown of cluster {self.run_id} failed: {error}") from error
            finally:
                if self._given_work_dir is None and self._work_dir is not None:
                    shutil.rmtree(self._work_dir, ignore_errors=True)
                elif self._work_dir is not None:
                    # A given work dir is kept (its known_hosts tells which host keys were seen), but
                    # never the private key: a run directory is something people share.
                    for key in (self.ssh_key_path, self.ssh_key_path.with_suffix(".pub")):
                        key.unlink(missing_ok=True)
                self._state = "down"
                _unregister(self)

    def _container_options(self) -> dict[str, Any]:
        security_options = [str(option) for option in self._client.info().get("SecurityOptions") or []]
        return {
            "cap_add": list(CAPABILITIES),
            "devices": ["/dev/fuse:/dev/fuse:rwm"] if self._fuse else [],
            "security_opt": ["apparmor=unconfined"]
            if any("apparmor" in option for option in security_options)
            else [],
            "privileged": False,
            "detach": True,
            "network": self.network_name,
        }

    def _in_parallel(self, work: Callable[[str], Any]) -> dict[str, Any]:
        """Run ``work`` for every node at once; wait for all of them (also when interrupted) before returning."""
        pool = ThreadPoolExecutor(
            max_workers=len(self.node_names), thread_name_prefix=f"tidemark-{self.run_id}"
        )
        try:
            futures = {name: pool.submit(work, name) for name in self.node_names}
            return {name: future.result() for name, future in futures.items()}
        finally:
            pool.shutdown(
                wait=True, cancel_futures=True
            )  # no container may appear after teardown listed them

    def _create_node(self, name: str, options: dict[str, Any]) -> None:
        role = "controller" if name == self.controller else "broker"
        container = self._client.containers.create(
            self.image,
            name=f"{self.network_name}-{name}",
            hostname=name,
            labels={**self._labels, LABEL_NODE: name, LABEL_ROLE: role},
            networking_config={
                self.network_name: docker.types.EndpointConfig(self._client.api.api_version, aliases=[name])
            },
            **options,
        )
        container.start()
        container.reload()
        ip = container.attrs["NetworkSettings"]["Networks"][self.network_name]["IPAddress"]
        self.nodes[name] = ClusterNode(name=name, role=role, container_id=container.id, ip=ip)

    def _prepare_ssh(self, name: str) -> str:
        """Wait for sshd, authorize the run's key, and return the node's host public key."""
        assert self._ssh_key is not None
        remote = DockerRemote(self._client, self.nodes[name].container_id, node=name)
        try:
            host_key = ""
            for _ in range(_HOST_KEY_READS):
                host_key = remote.exec(_SSH_READY_SCRIPT, timeout=self._ready_timeout).stdout_text.strip()
                if len(host_key.split()) >= 2:
                    break
            else:
                raise ClusterError(
                    f"node {name}: its SSH host key read back as {host_key!r} {_HOST_KEY_READS} times"
                )
        except RemoteError as error:
            logs = (
                self._client.api.logs(self.nodes[name].container_id, tail=20).decode(errors="replace").strip()
            )
            raise ClusterError(
                f"node {name}: sshd did not come up: {error}; container log: {logs or '(empty)'}"
            ) from error
        remote.put(self._ssh_key.public_key_line.encode() + b"\n", "/root/.ssh/authorized_keys", mode=0o600)
        return host_key
