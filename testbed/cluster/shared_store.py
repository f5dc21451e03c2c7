"""Stateless Kafka-protocol brokers that keep their whole log in one shared PostgreSQL node.

tansu and its successor nisshi are built this way: every produce is one PostgreSQL transaction
that inserts the records and moves the partition's watermark, every fetch a query, so the brokers
are replaceable processes and the durable log -- the only replica -- is PostgreSQL's tables.  A
:class:`BrokerProgram` says how one such system's broker starts (its binary, its node id, whether
Tidemark must create its tables); :class:`SharedStoreCluster` offers the system through the
:mod:`testbed.cluster.protocol` abilities it can honestly have:

* :class:`~testbed.cluster.protocol.NodeControl` over *both tiers*: :attr:`SharedStoreCluster.brokers`
  -- the nodes the nemesis may fault -- are the brokers and the PostgreSQL node, each running its
  server as the daemon ``broker``; kill, pause and partition work on either, and
  :meth:`SharedStoreCluster.start_broker` restarts either.  Every broker answers for every
  partition (its Metadata names itself, one fixed broker id, as the leader), so the node a
  partition's writes depend on is the PostgreSQL node: :meth:`SharedStoreCluster.leader_of` names
  it, and the nemesis's ``leader``/``isolate-leader`` targets hit PostgreSQL while ``followers``
  hits the brokers.
* :class:`~testbed.cluster.protocol.PowerLoss` for the PostgreSQL node (its data directory on the
  lazy filesystem); a broker has no data directory, so its power loss is its kill.
* :class:`~testbed.cluster.protocol.ReplicaDumps` with one replica, the PostgreSQL node: its dump
  reads the committed records from PostgreSQL after the run; with a single copy there is nothing
  to compare, and the run records that (``test.json``'s ``replica_evidence``) so the checker
  reports divergence as not applicable.
* :class:`~testbed.cluster.protocol.LogFiles` for every node.

Settings: ``--set postgresql.fsync=off`` / ``postgresql.synchronous_commit=off``
(:func:`testbed.cluster.postgres.effective_settings`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import docker

from testbed.cluster import postgres
from testbed.cluster.bundled import (
    BROKER_BEHIND_PROXY_PORT,
    KAFKA_PORT,
    LOG_DIR,
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
from testbed.cluster.postgres_node import SERVER_DAEMON, PostgresNode
from testbed.cluster.request_proxy.control import ProxyControl
from testbed.nodes.remote import Remote
from testbed.record.replicas import EVIDENCE_SINGLE_STORE

POSTGRES_NODE = "pg"
"""The PostgreSQL node's name (beside the brokers ``n1``..``nN``)."""
REPLICA_EVIDENCE = f"{EVIDENCE_SINGLE_STORE}: the log lives in one PostgreSQL, no second replica to compare"
"""``test.json``'s ``replica_evidence`` for these targets (vocabulary: :mod:`testbed.record.replicas`)."""


@dataclasses.dataclass(frozen=True)
class BrokerProgram:
    """How one shared-store system's broker starts (see the module docstring)."""

    name: str
    """The system's name: the supervisor's messages and the broker's log file say it."""
    binary: str
    """Where the image holds the broker binary."""
    node_id: int
    """The broker id every broker of this system reports: its brokers are interchangeable."""
    applies_schema: bool
    """True when Tidemark creates the tables before any broker connects (tansu does not create
    them); False when the broker creates its own at start-up."""
    environment: tuple[tuple[str, str], ...] = ()
    """Environment variables the broker runs with."""

    @property
    def log_path(self) -> str:
        return f"{LOG_DIR}/{self.name}.log"


RESTART_DELAY_SECONDS = 1
"""How long the supervisor of a broker waits before starting it again after it exited."""


def supervised(argv: Sequence[str], name: str) -> list[str]:
    """``argv`` run again each time it exits on its own, as a service manager would run it.

    tansu 0.6.0 (and nisshi 0.8.1, ``pg/factory.rs``: a failed start-up ping exits 1) exits at once
    when PostgreSQL does not accept connections instead of retrying.  In production its supervisor
    starts it again; here, without one, a broker restarted together with a restarting PostgreSQL
    died at once and stayed down, so a tansu campaign run ended in "recovery timed out" (2 of its
    6 kill runs).  The loop is the daemon's process group with the broker in it: the nemesis's kill
    (SIGKILL to the group) ends both, pause and resume stop and continue both, so a fault still
    means what it says.
    """
    loop = (
        'while :; do "$@"; status=$?; '
        f'echo "tidemark: {name} exited with status $status, starting it again in {RESTART_DELAY_SECONDS} s" >&2; '
        f"sleep {RESTART_DELAY_SECONDS}; done"
    )
    return ["sh", "-c", loop, f"{name}-supervisor", *argv]


def broker_argv(
    binary: str, *, port: int, advertised_host: str, storage: str, listen_port: int | None = None
) -> list[str]:
    """A broker in the foreground, advertising ``advertised_host:port``, listening on
    ``listen_port`` (default ``port``; another when a request proxy owns ``port``) and storing in
    ``storage`` (tansu's flags, which nisshi kept: ``nisshi-cli`` 0.8.1 ``cli/broker.rs``)."""
    return [
        binary,
        "broker",
        f"--cluster-id={postgres.CLUSTER_ID}",
        f"--listener-url=tcp://0.0.0.0:{port if listen_port is None else listen_port}",
        f"--advertised-listener-url=tcp://{advertised_host}:{port}",
        f"--storage-engine={storage}",
    ]


class SharedStoreCluster:
    """:attr:`program`'s brokers on ``brokers`` sharing the PostgreSQL on ``postgres_node`` (see the
    module doc); each system is a subclass naming its program.  ``settings`` may hold other
    systems' keys: the PostgreSQL node takes the ``postgresql.*`` ones."""

    program: ClassVar[BrokerProgram]
    listen_port: ClassVar[int] = KAFKA_PORT
    """Where a broker listens (:class:`RequestProxiedStore`: behind its request proxy)."""

    def __init__(
        self,
        remotes: Mapping[str, Remote],
        ips: Mapping[str, str],
        brokers: Sequence[str],
        postgres_node: str,
        settings: Mapping[str, str],
        *,
        power_loss_filesystem: bool = False,
    ) -> None:
        program = self.program
        self._remotes = dict(remotes)
        self._ips = dict(ips)
        self.store_brokers = list(brokers)
        self.postgres_node = postgres_node
        self.postgres = PostgresNode(
            self._remotes[postgres_node],
            {key: value for key, value in settings.items() if key.startswith(postgres.SETTING_PREFIX)},
            lazy=power_loss_filesystem,
            schema=postgres.SCHEMA_FILE if program.applies_schema else None,
        )
        self.controller: str | None = None
        self.node_ids = {name: program.node_id for name in self.store_brokers}

    @property
    def brokers(self) -> list[str]:
        """Every node the nemesis may fault: the brokers, then the PostgreSQL node."""
        return [*self.store_brokers, self.postgres_node]

    @property
    def replica_nodes(self) -> list[str]:
        """The nodes holding the log: the PostgreSQL node alone."""
        return [self.postgres_node]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self._ips[name]}:{KAFKA_PORT}" for name in self.store_brokers)

    # ---- NodeControl ----------------------------------------------------------------------

    def remote(self, node: str) -> Remote:
        return self.postgres.remote if node == self.postgres_node else self._remotes[node]

    def ip(self, node: str) -> str:
        return self._ips[node]

    def node_of(self, broker_id: int) -> str | None:
        return node_named(self.node_ids, broker_id)

    def leader_of(self, topic: str, partition: int) -> str | None:
        """The PostgreSQL node: the one node every write to any partition goes through."""
        return self.postgres_node

    def answers(self, node: str) -> bool:
        """Whether ``node`` serves now: Kafka requests (a broker) or connections (PostgreSQL)."""
        if node == self.postgres_node:
            return self.postgres.answers()
        return broker_answers(f"{self._ips[node]}:{KAFKA_PORT}")

    def start_broker(self, node: str) -> None:
        """(Re)start ``node``'s server where it is not running: PostgreSQL or a broker."""
        if node == self.postgres_node:
            self.postgres.start()
            return
        remote = self._remotes[node]
        if remote.is_alive(SERVER_DAEMON):
            return
        remote.start_daemon(
            SERVER_DAEMON,
            supervised(
                broker_argv(
                    self.program.binary,
                    port=KAFKA_PORT,
                    advertised_host=self._ips[node],
                    storage=postgres.storage_url(self._ips[self.postgres_node]),
                    listen_port=self.listen_port,
                ),
                self.program.name,
            ),
            log_path=self.program.log_path,
            env=dict(self.program.environment) or None,
        )

    def drop_unsynced(self, node: str) -> None:
        """Power loss of ``node`` (its server is dead): PostgreSQL loses what it had not fsynced; a
        broker keeps nothing on disk, so there is nothing to lose."""
        if node == self.postgres_node:
            self.postgres.drop_unsynced()

    # ---- lifecycle ------------------------------------------------------------------------

    def configure(self) -> None:
        self.postgres.configure()
        for name in self.store_brokers:
            self._remotes[name].exec(["mkdir", "-p", LOG_DIR], timeout=10)

    def start(self, ready_timeout: float = 60.0) -> None:
        """PostgreSQL, its schema (when Tidemark creates it), then every broker; returns once every
        broker answers."""
        self.postgres.start(ready_timeout)
        if self.program.applies_schema:
            self.postgres.apply_schema()
        for name in self.store_brokers:
            self.start_broker(name)
        for name in self.store_brokers:
            wait_until(
                lambda name=name: self.answers(name),  # type: ignore[misc]
                ready_timeout,
                f"{self.program.name} on {name} to answer",
            )

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> list[PartitionInfo]:
        """Once every partition of the new ``topic`` has a leader, make the set-up durable.

        The runner calls this right after creating the topic, before the workload starts: from
        here on, a power loss may take only the workload's writes (:meth:`PostgresNode.settle`).
        """
        infos: list[PartitionInfo] = wait_until(
            lambda: all_partitions_led(self.bootstrap, topic, partitions),
            timeout,
            f"a leader for every partition of {topic}",
        )
        self.postgres.settle()
        return infos

    def stop_brokers(self, timeout: float = 15.0) -> None:
        """Stop the brokers (SIGTERM, then SIGKILL); PostgreSQL keeps running for the dump."""
        stop_daemons(self._remotes, self.store_brokers, SERVER_DAEMON, timeout, what=self.program.name)

    def dump_replica(self, node: str, target: Path) -> None:
        """The PostgreSQL node's committed records, in the replica-dump format."""
        if node != self.postgres_node:
            raise ValueError(
                f"{node} is a {self.program.name} broker: it holds no replica (only {self.postgres_node} does)"
            )
        self.postgres.dump(target)

    def collect_logs(self, node: str, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        self._remotes[node].get(LOG_DIR, target, timeout=60)


class RequestProxiedStore(SharedStoreCluster):
    """A shared-store cluster whose brokers clients reach only through a request proxy each, as
    :class:`testbed.cluster.bundled.ProxiedBundledCluster` is for the bundled broker: the proxy owns
    :data:`KAFKA_PORT`, which every broker advertises, and forwards to the broker listening on
    :data:`BROKER_BEHIND_PROXY_PORT` on its node.  These brokers have no peers, so every request
    through a proxy is a client's (producers', consumers', the admin's).  The PostgreSQL node has no
    proxy: its clients are the brokers.  Offers the ``request-proxy`` ability
    (:class:`nemesis.request_faults.RequestProxies`) -- only a system's ``Proxied*`` subclass does,
    so a cluster is never asked to hold a request it has no proxy for.  The proxy outlives kills
    and pauses of its broker: it is the network, not the process."""

    listen_port = BROKER_BEHIND_PROXY_PORT

    def request_proxy(self, node: str) -> ProxyControl:
        if node == self.postgres_node:
            raise ValueError(f"{node} runs PostgreSQL, not a broker: it has no request proxy")
        return request_proxy_control(self._ips[node])

    def start_broker(self, node: str) -> None:
        if node != self.postgres_node:
            start_request_proxy(self._remotes[node])
        super().start_broker(node)


@contextlib.contextmanager
def shared_store_on_docker(
    client: docker.DockerClient,
    image: str,
    *,
    cluster_class: type[SharedStoreCluster],
    brokers: int,
    settings: Mapping[str, str],
    power_loss_filesystem: bool,
    transport: str = "docker",
    work_dir: Path | None = None,
) -> Iterator[tuple[SharedStoreCluster, list[str]]]:
    """A ``cluster_class`` (one system's :class:`SharedStoreCluster`) on a :class:`DockerCluster`
    of ``image``, not yet configured or started (the caller does both, so it can collect the logs
    of a failed start), with the node names whose logs to collect; every container is removed on
    the way out."""
    with DockerCluster(client, image, brokers=brokers, work_dir=work_dir, controller=POSTGRES_NODE) as nodes:
        cluster = cluster_class(
            nodes.remotes_via(transport),
            {name: nodes.ip(name) for name in nodes.node_names},
            nodes.broker_names,
            POSTGRES_NODE,
            settings,
            power_loss_filesystem=power_loss_filesystem,
        )
        yield cluster, list(nodes.node_names)
