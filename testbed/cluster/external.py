"""Runs against a Kafka-compatible cluster the harness did not start (``--bootstrap``).

The queue workload and the checker need nothing but the bootstrap address, so any Kafka,
Redpanda or bundled-broker cluster can be tested.  Faults need the nodes themselves: an
**inventory** (TOML) names each broker node, how to reach it over SSH (host keys are
verified against ``known_hosts``), its Kafka broker id, and the argv that runs its broker
in the foreground.  With an inventory the harness (re)starts each broker as the Remote
daemon ``broker`` -- so it can SIGKILL, SIGSTOP and restart it -- and partitions with
iptables (root and iptables on the nodes).  Without one the run is fault-free.

Replica dumps need the bundled broker's offline dump tool, so a run against an external
cluster has no replica evidence: the runner records that (``replica_evidence`` ``none``), the
checker names the replica checks not applicable, and the verdict rests on the client history
and the final drain.  A cluster that cannot be tested at all -- unreachable, not
Kafka, protocol versions the clients cannot use, refusing the run's topic -- is found by
:mod:`testbed.cluster.external_probe` before the run starts and reported in one line.
Inventory format::

    [defaults]                       # any node key, applied to every node
    user = "root"
    key = "~/.ssh/id_ed25519"
    known_hosts = "~/.ssh/known_hosts"
    start = ["/opt/kafka/bin/kafka-server-start.sh", "/opt/kafka/config/server.properties"]
    logs = ["/var/log/tidemark/broker.log"]

    [nodes.kafka1]
    host = "10.0.0.11"
    broker_id = 1
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from testbed.cluster.kafka_admin import leader_node, node_named, wait_until
from testbed.nodes.remote import Remote

BROKER_LOG = "/var/log/tidemark/broker.log"
BROKER_START_TIMEOUT = 60.0
"""Seconds the inventory's brokers may take to answer Kafka requests once started."""
NODE_KEYS = {"host", "port", "user", "key", "known_hosts", "broker_id", "start", "logs"}


class InventoryError(ValueError):
    """A bad inventory file; the message names the file, the node and the key."""


@dataclasses.dataclass(frozen=True)
class InventoryNode:
    name: str
    host: str
    port: int
    user: str
    key: Path
    known_hosts: Path
    broker_id: int
    start: tuple[str, ...]
    logs: tuple[str, ...]


def load_inventory(path: Path) -> list[InventoryNode]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InventoryError(f"{path}: cannot read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise InventoryError(f"{path}: {error}") from None
    defaults = data.get("defaults", {})
    nodes = data.get("nodes", {})
    if not isinstance(nodes, dict) or not nodes:
        raise InventoryError(f"{path}: no [nodes.NAME] tables")
    result = []
    for name, entry in nodes.items():
        merged = {**defaults, **entry}
        unknown = sorted(set(merged) - NODE_KEYS)
        if unknown:
            raise InventoryError(f"{path}: nodes.{name}: unknown keys {', '.join(unknown)}")
        for required in ("host", "broker_id", "start"):
            if required not in merged:
                raise InventoryError(f"{path}: nodes.{name}: {required} is required")
        if not isinstance(merged["start"], list) or not all(isinstance(a, str) for a in merged["start"]):
            raise InventoryError(f"{path}: nodes.{name}: start must be a list of strings (an argv)")
        result.append(
            InventoryNode(
                name=name,
                host=str(merged["host"]),
                port=int(merged.get("port", 22)),
                user=str(merged.get("user", "root")),
                key=Path(str(merged.get("key", "~/.ssh/id_ed25519"))).expanduser(),
                known_hosts=Path(str(merged.get("known_hosts", "~/.ssh/known_hosts"))).expanduser(),
                broker_id=int(merged["broker_id"]),
                start=tuple(merged["start"]),
                logs=tuple(merged.get("logs", [BROKER_LOG])),
            )
        )
    return result


class ExternalCluster:
    """A :class:`~testbed.cluster.protocol.Cluster` with :class:`~testbed.cluster.protocol.NodeControl`
    and :class:`~testbed.cluster.protocol.LogFiles` over an SSH inventory (or none: fault-free).

    No :class:`~testbed.cluster.protocol.ReplicaDumps`: dumps need the bundled broker's
    offline tool (see the module docstring)."""

    def __init__(self, bootstrap: str, inventory: list[InventoryNode]) -> None:
        from testbed.nodes.ssh_remote import SshRemote

        self.bootstrap = bootstrap
        self.controller: str | None = None
        self._nodes = {node.name: node for node in inventory}
        self.brokers = list(self._nodes)
        self.node_ids = {node.name: node.broker_id for node in inventory}
        self._remotes: dict[str, Remote] = {
            node.name: SshRemote(
                node.host,
                key_path=node.key,
                known_hosts=node.known_hosts,
                node=node.name,
                port=node.port,
                user=node.user,
            )
            for node in inventory
        }

    def remote(self, node: str) -> Remote:
        return self._remotes[node]

    def ip(self, node: str) -> str:
        return self._nodes[node].host

    def node_of(self, broker_id: int) -> str | None:
        return node_named(self.node_ids, broker_id)

    def leader_of(self, topic: str, partition: int) -> str | None:
        return leader_node(self.bootstrap, self.node_ids, topic, partition)

    def start_broker(self, node: str) -> None:
        remote = self._remotes[node]
        if not remote.is_alive("broker"):
            remote.exec(["mkdir", "-p", str(Path(BROKER_LOG).parent)], timeout=10)
            remote.start_daemon("broker", list(self._nodes[node].start), log_path=BROKER_LOG)

    def answers(self, node: str) -> bool:
        from kafka import KafkaAdminClient

        try:
            KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000).close()
            return True
        except Exception:
            return False

    # ---- lifecycle used by the runner ---------------------------------------------------

    def start(self) -> None:
        """Make sure every inventory broker runs under the harness's control, and answers.

        Raises :class:`~testbed.cluster.external_probe.ExternalClusterError` (one line naming
        the address) when no broker answers Kafka within a minute of being started, or one
        answers with protocol versions the clients cannot use."""
        from testbed.cluster.external_probe import probe_cluster

        for node in self.brokers:
            self.start_broker(node)
        if self.brokers:
            probe_cluster(self.bootstrap, wait=BROKER_START_TIMEOUT)

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> object:
        from testbed.cluster.kafka_admin import all_partitions_led

        return wait_until(
            lambda: all_partitions_led(self.bootstrap, topic, partitions),
            timeout,
            f"a leader for every partition of {topic}",
        )

    def stop_brokers(self) -> None:
        """Nothing: an external cluster keeps running after the test."""

    def collect_logs(self, node: str, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        for path in self._nodes[node].logs:
            self._remotes[node].get(path, target / Path(path).name, timeout=60)
