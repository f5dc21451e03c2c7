"""nisshi on cluster nodes (``--target nisshi``): on PostgreSQL, or on its embedded SQLite engine.

nisshi (crates.io, pinned in :mod:`testbed.cluster.nisshi_image`) is tansu's maintained successor:
the same stateless-broker design, broker id 111 for every broker, tansu's command-line flags.
``--set nisshi.storage=`` picks where its log lives:

* ``postgresql`` (the default): N brokers sharing one PostgreSQL node, as tansu --
  :class:`NisshiCluster` is :class:`~testbed.cluster.shared_store.SharedStoreCluster` with
  nisshi's program.  nisshi creates its own tables at start-up (under an advisory lock, so brokers
  may start together), so Tidemark applies no schema.
* ``sqlite``: one broker whose log is a SQLite file (nisshi's ``libsql`` engine) in the broker
  node's data directory, on the lazy filesystem when the run offers power loss -- so a power loss
  tests nisshi's own durability: its engine opens the file in WAL mode with ``synchronous =
  normal`` (``nisshi-storage-sql`` 0.8.1 ``lite.rs``), which does not fsync at commit.  One broker
  only: each broker would have a file of its own, a separate cluster.  :class:`NisshiSqliteCluster`.

Either way there is one copy of the log (``replica_evidence`` ``single-store``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import docker

from testbed.cluster import postgres
from testbed.cluster.bundled import (
    BROKER_BEHIND_PROXY_PORT,
    DATA_DIR,
    KAFKA_PORT,
    LOG_DIR,
    PYTHON,
    data_dir_mount,
    request_proxy_control,
    start_request_proxy,
    stop_daemons,
)
from testbed.cluster.docker_cluster import DockerCluster
from testbed.cluster.kafka_admin import (
    PartitionInfo,
    all_partitions_led,
    broker_answers,
    node_named,
    wait_until,
)
from testbed.cluster.lazyfs_mount import LazyMount, not_mounted
from testbed.cluster.nisshi_image import NISSHI_IMAGE_PATH
from testbed.cluster.postgres_node import SERVER_DAEMON
from testbed.cluster.request_proxy.control import ProxyControl
from testbed.cluster.shared_store import (
    POSTGRES_NODE,
    BrokerProgram,
    RequestProxiedStore,
    SharedStoreCluster,
    broker_argv,
    shared_store_on_docker,
)
from testbed.nodes.remote import Remote
from testbed.record.replicas import EVIDENCE_SINGLE_STORE

NISSHI_NODE_ID = 111
"""The broker id every nisshi broker reports (``nisshi-broker`` 0.8.1 ``NODE_ID``)."""
NISSHI = BrokerProgram(
    "nisshi",
    NISSHI_IMAGE_PATH,
    NISSHI_NODE_ID,
    applies_schema=False,
    environment=(("RUST_LOG", "warn"), ("NO_COLOR", "1")),
)
"""How a nisshi broker starts: it creates its own tables; warnings and errors to its log."""

STORAGE_SETTING = "nisshi.storage"
"""``--set nisshi.storage=postgresql|sqlite``: where nisshi keeps its log."""
STORAGES = ("postgresql", "sqlite")
SQLITE_FILE = "nisshi.db"
"""The SQLite file's name in the broker's data directory (nisshi resolves ``sqlite://`` paths
against its working directory: ``database_file.rs``)."""
SQLITE_REPLICA_EVIDENCE = (
    f"{EVIDENCE_SINGLE_STORE}: the log lives in one SQLite file, no second replica to compare"
)


class SettingsError(ValueError):
    """A ``--set`` the nisshi target does not take (the message names it)."""


def storage_of(settings: Mapping[str, str]) -> str:
    """The storage ``settings`` ask for (:data:`STORAGE_SETTING`, default ``postgresql``)."""
    storage = settings.get(STORAGE_SETTING, "postgresql")
    if storage not in STORAGES:
        raise SettingsError(f"--set {STORAGE_SETTING}={storage}: must be one of {', '.join(STORAGES)}")
    return storage


def effective_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` complete: the storage, and PostgreSQL's settings when the log is there.

    Refuses a setting of another system, and ``postgresql.*`` with ``nisshi.storage=sqlite``
    (there is no PostgreSQL then).
    """
    storage = storage_of(settings)
    rest = {key: value for key, value in settings.items() if key != STORAGE_SETTING}
    if storage == "sqlite":
        if rest:
            raise SettingsError(
                f"--set {sorted(rest)[0]}: not a setting of the nisshi target on SQLite (known: {STORAGE_SETTING})"
            )
        return {STORAGE_SETTING: storage}
    try:
        return {STORAGE_SETTING: storage, **postgres.effective_settings(rest)}
    except postgres.SettingsError as error:
        raise SettingsError(f"{str(error).replace('the tansu target', 'the nisshi target')}") from None


class NisshiCluster(SharedStoreCluster):
    """nisshi brokers on ``brokers`` sharing the PostgreSQL on ``postgres_node``."""

    program = NISSHI


def sqlite_dump_script(database: str) -> str:
    """A Python program for the node: print :func:`postgres.dump_sql` ``sqlite``'s rows as psql
    prints them (tab-separated), reading ``database`` once the broker is stopped."""
    sql = postgres.dump_sql("sqlite")
    return (
        "import sqlite3, sys\n"
        f"connection = sqlite3.connect({database!r})\n"
        f"for query in {sql!r}.split(';'):\n"
        "    if query.strip():\n"
        "        for row in connection.execute(query):\n"
        "            sys.stdout.write('\\t'.join('' if v is None else str(v) for v in row) + '\\n')\n"
    )


class NisshiSqliteCluster:
    """One nisshi broker on ``broker`` whose log is a SQLite file on its own disk (module doc)."""

    listen_port: ClassVar[int] = KAFKA_PORT
    """Where the broker listens (:class:`ProxiedNisshiSqliteCluster`: behind its request proxy)."""

    def __init__(
        self,
        remotes: Mapping[str, Remote],
        ips: Mapping[str, str],
        broker: str,
        *,
        power_loss_filesystem: bool = False,
    ) -> None:
        self._remotes = dict(remotes)
        self._ips = dict(ips)
        self.broker = broker
        self.power_loss_filesystem = power_loss_filesystem
        self.controller: str | None = None
        self.node_ids = {broker: NISSHI_NODE_ID}

    @property
    def brokers(self) -> list[str]:
        return [self.broker]

    @property
    def replica_nodes(self) -> list[str]:
        """The node holding the log: the broker itself (its SQLite file)."""
        return [self.broker]

    @property
    def bootstrap(self) -> str:
        return f"{self._ips[self.broker]}:{KAFKA_PORT}"

    # ---- NodeControl ----------------------------------------------------------------------

    def remote(self, node: str) -> Remote:
        return self._remotes[node]

    def ip(self, node: str) -> str:
        return self._ips[node]

    def node_of(self, broker_id: int) -> str | None:
        return node_named(self.node_ids, broker_id)

    def leader_of(self, topic: str, partition: int) -> str | None:
        return self.broker

    def answers(self, node: str) -> bool:
        return broker_answers(f"{self._ips[node]}:{KAFKA_PORT}")

    def start_broker(self, node: str) -> None:
        remote = self._remotes[node]
        if remote.is_alive(SERVER_DAEMON):
            return
        if self.power_loss_filesystem:
            self._lazy_mount(node).ensure()
        argv = broker_argv(
            NISSHI.binary,
            port=KAFKA_PORT,
            advertised_host=self._ips[node],
            storage=f"sqlite://{SQLITE_FILE}",
            listen_port=self.listen_port,
        )
        remote.start_daemon(
            SERVER_DAEMON,
            ["sh", "-c", 'cd "$0" && exec "$@"', DATA_DIR, *argv],  # the file is the working directory's
            log_path=NISSHI.log_path,
            env=dict(NISSHI.environment),
        )

    # ---- the lazy filesystem (power loss, disk faults) -------------------------------------

    def _lazy_mount(self, node: str) -> LazyMount:
        return data_dir_mount(self._remotes[node])

    def drop_unsynced(self, node: str) -> None:
        """Power loss of the broker's disk (the broker must already be dead): SQLite's unsynced
        pages -- its WAL's tail, with ``synchronous = normal`` -- are gone."""
        if not self.power_loss_filesystem:
            raise not_mounted(node)
        self._lazy_mount(node).drop()

    def lazyfs_control(self, node: str, command: str) -> None:
        """:class:`~testbed.cluster.protocol.DiskFaults`: one command to ``node``'s lazy filesystem."""
        if not self.power_loss_filesystem:
            raise not_mounted(node)
        self._lazy_mount(node).control(*command.split())

    # ---- lifecycle ------------------------------------------------------------------------

    def configure(self) -> None:
        self._remotes[self.broker].exec(["mkdir", "-p", LOG_DIR, DATA_DIR], timeout=10)

    def start(self, ready_timeout: float = 60.0) -> None:
        self.start_broker(self.broker)
        wait_until(lambda: self.answers(self.broker), ready_timeout, f"nisshi on {self.broker} to answer")

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> list[PartitionInfo]:
        """Once every partition of ``topic`` answers, make the set-up durable (lazyfs ``sync``): from
        here on a power loss may take only the workload's writes."""
        infos: list[PartitionInfo] = wait_until(
            lambda: all_partitions_led(self.bootstrap, topic, partitions),
            timeout,
            f"a leader for every partition of {topic}",
        )
        if self.power_loss_filesystem:
            self._lazy_mount(self.broker).sync()
        return infos

    def stop_brokers(self, timeout: float = 15.0) -> None:
        stop_daemons(self._remotes, [self.broker], SERVER_DAEMON, timeout, what="nisshi")

    def dump_replica(self, node: str, target: Path) -> None:
        """The SQLite file's committed records, in the replica-dump format (the broker is stopped)."""
        if node != self.broker:
            raise ValueError(f"{node} holds no replica (only {self.broker} does)")
        script = sqlite_dump_script(f"{DATA_DIR}/{SQLITE_FILE}")
        result = self._remotes[node].exec([PYTHON, "-c", script], timeout=300)
        lines = list(postgres.dump_lines(result.stdout_text.splitlines()))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(lines), encoding="utf-8")

    def collect_logs(self, node: str, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        self._remotes[node].get(LOG_DIR, target, timeout=60)


NisshiClusters = SharedStoreCluster | NisshiSqliteCluster


class ProxiedNisshiCluster(RequestProxiedStore, NisshiCluster):
    """nisshi brokers on PostgreSQL, each behind a request proxy (:class:`RequestProxiedStore`)."""


class ProxiedNisshiSqliteCluster(NisshiSqliteCluster):
    """The nisshi broker on SQLite behind a request proxy, as :class:`RequestProxiedStore` puts
    the PostgreSQL ones: the request-path faults act on its clients' requests."""

    listen_port = BROKER_BEHIND_PROXY_PORT

    def request_proxy(self, node: str) -> ProxyControl:
        return request_proxy_control(self._ips[node])

    def start_broker(self, node: str) -> None:
        start_request_proxy(self._remotes[node])
        super().start_broker(node)


@contextlib.contextmanager
def nisshi_on_docker(
    client: docker.DockerClient,
    image: str,
    *,
    brokers: int,
    settings: Mapping[str, str],
    power_loss_filesystem: bool,
    transport: str = "docker",
    work_dir: Path | None = None,
    request_proxies: bool = False,
) -> Iterator[tuple[NisshiClusters, list[str]]]:
    """The cluster ``settings``' storage asks for, on Docker, not yet configured or started, with the
    node names whose logs to collect (with ``request_proxies``, each broker behind a request proxy);
    every container is removed on the way out."""
    if storage_of(settings) == "postgresql":
        with shared_store_on_docker(
            client,
            image,
            cluster_class=ProxiedNisshiCluster if request_proxies else NisshiCluster,
            brokers=brokers,
            settings=settings,
            power_loss_filesystem=power_loss_filesystem,
            transport=transport,
            work_dir=work_dir,
        ) as started:
            yield started
        return
    if brokers != 1:
        raise ValueError(f"nisshi on SQLite runs one broker (each would have its own file), not {brokers}")
    with DockerCluster(client, image, brokers=1, work_dir=work_dir, controller=None) as nodes:
        cluster = (ProxiedNisshiSqliteCluster if request_proxies else NisshiSqliteCluster)(
            nodes.remotes_via(transport),
            {name: nodes.ip(name) for name in nodes.node_names},
            nodes.broker_names[0],
            power_loss_filesystem=power_loss_filesystem,
        )
        yield cluster, list(nodes.node_names)


__all__ = [
    "NISSHI",
    "POSTGRES_NODE",
    "NisshiCluster",
    "NisshiSqliteCluster",
    "ProxiedNisshiCluster",
    "ProxiedNisshiSqliteCluster",
    "nisshi_on_docker",
]
