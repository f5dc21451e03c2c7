"""What a cluster under test offers: one small role interface and optional abilities.

Every target -- the bundled broker in containers, an external Kafka-compatible cluster with
or without SSH access -- is a :class:`Cluster`: clients can reach it and it names its
broker nodes.  What else it can do is an *ability*, a separate protocol checked with
``isinstance`` where it is used (as Jepsen separates a DB from its optional ``Kill``,
``Pause`` and ``LogFiles``):

* :class:`NodeControl` -- the nemesis can act on its nodes (remotes, addresses, restarts);
* :class:`ReplicaDumps` -- every replica's log can be dumped after the run, so the checker
  can compare replicas (the bundled broker's offline dump tool; tansu's one PostgreSQL);
* :class:`LiveReplicas` -- a running broker's replica can be read where it lies (its log end,
  its HW checkpoint), so a scenario can wait on what a replica holds instead of sleeping;
* :class:`ReplicaNodes` -- the replicas live on nodes other than the brokers (tansu);
* :class:`LogFiles` -- node logs can be collected into the run directory;
* :class:`PowerLoss` -- the data directories sit on the lazy filesystem, so un-fsynced
  writes can be dropped;
* :class:`ClockControl` -- the brokers' wall clocks can be moved (libfaketime,
  :mod:`testbed.cluster.fake_clock`), when ``fake_clock`` says the brokers run under it;
* :class:`ControllerProcess` -- the controller node runs a controller process the nemesis can
  kill and start again (the bundled broker's, as :data:`CONTROLLER_DAEMON`).

A missing ability is not an error: the runner skips what the target cannot do and the
checker names the checks that therefore do not apply (no dumps, or one replica: divergence),
from what the runner recorded in ``test.json`` (``replica_evidence``,
:mod:`testbed.record.replicas`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from testbed.cluster.fake_clock import NodeClock
from testbed.nodes.remote import Remote


@runtime_checkable
class Cluster(Protocol):
    """A running cluster that Kafka clients reach at :attr:`bootstrap`."""

    @property
    def bootstrap(self) -> str:
        """``host:port[,host:port...]`` for Kafka clients."""
        ...

    @property
    def brokers(self) -> Sequence[str]:
        """Broker node names, e.g. ``["n1", "n2", "n3"]`` (empty: nodes not reachable)."""
        ...

    @property
    def controller(self) -> str | None:
        """The controller's node name, or None when the cluster's metadata lives elsewhere."""
        ...

    @property
    def node_ids(self) -> Mapping[str, int]:
        """Broker node name -> Kafka broker id."""
        ...

    def node_of(self, broker_id: int) -> str | None:
        """The node name of a Kafka broker id (None if not one of :attr:`brokers`)."""
        ...

    def answers(self, node: str) -> bool:
        """Whether ``node``'s broker answers Kafka requests now."""
        ...

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> object:
        """Block until every partition of ``topic`` has a leader; TimeoutError after ``timeout`` s."""
        ...

    def stop_brokers(self) -> None:
        """Stop the brokers cleanly after the run (a no-op where the harness does not own them)."""
        ...


@runtime_checkable
class NodeControl(Protocol):
    """Ability: the nemesis can act on the nodes (the role the nemesis needs)."""

    def remote(self, node: str) -> Remote: ...

    def ip(self, node: str) -> str:
        """The node's IPv4 address on the cluster network (the source address its peers see)."""
        ...

    def start_broker(self, node: str) -> None:
        """(Re)start the broker daemon on ``node`` where it is not running."""
        ...

    def leader_of(self, topic: str, partition: int) -> str | None:
        """The node currently leading ``topic``/``partition``, or None if there is none."""
        ...


@runtime_checkable
class ReplicaDumps(Protocol):
    """Ability: each broker's log can be dumped offline after :meth:`Cluster.stop_brokers`."""

    def dump_replica(self, node: str, target: Path) -> None:
        """Write ``node``'s replica dump (JSON lines, see ``testbed.record.replicas``) to ``target``."""
        ...


@runtime_checkable
class LiveReplicas(Protocol):
    """Ability: what a broker's replica holds can be read while the broker runs.

    A follower answers no Kafka request about its own log, so this reads its data files (the
    bundled broker's dump tool, read-only).  Only a broker that is not replicating what it is
    asked about can be compared with another at a moment: a scenario uses it where a fault
    froze one side (a partitioned follower, a leader's successor cut off from the zombie).
    """

    def replica_log_end(self, node: str, topic: str, partition: int) -> int | None:
        """The log end offset of ``node``'s replica of ``topic``/``partition`` as its files hold it
        now, or None when ``node`` holds no replica of it.  Raises
        :class:`~testbed.cluster.kafka_admin.ClusterUnavailable` when the files cannot be read at
        this moment (waits poll again)."""
        ...

    def replica_checkpointed_high_watermark(self, node: str, topic: str, partition: int) -> int | None:
        """The high watermark of ``node``'s replica of ``topic``/``partition`` as its HW checkpoint
        file holds it now (what the replica would recover with; 0 before the first checkpoint
        that lists it), or None when ``node`` holds no replica of it.  Raises as
        :meth:`replica_log_end`.  A change in it tells that the broker has just rewritten its
        checkpoint, which pins the phase of the checkpoint timer for a scenario (KIP-101's loss
        is what lies between the checkpoint and a crash)."""
        ...


@runtime_checkable
class ReplicaNodes(Protocol):
    """Ability: the replicas :class:`ReplicaDumps` dumps live on nodes other than the brokers
    (tansu: stateless brokers, the log in one PostgreSQL node)."""

    @property
    def replica_nodes(self) -> Sequence[str]:
        """The nodes whose log :meth:`ReplicaDumps.dump_replica` can dump."""
        ...


def replica_nodes(cluster: Cluster) -> list[str]:
    """The nodes to dump after the run: :attr:`ReplicaNodes.replica_nodes`, else every broker."""
    return list(cluster.replica_nodes if isinstance(cluster, ReplicaNodes) else cluster.brokers)


@runtime_checkable
class LogFiles(Protocol):
    """Ability: node logs can be copied into the run directory."""

    def collect_logs(self, node: str, target: Path) -> None: ...


@runtime_checkable
class PowerLoss(Protocol):
    """Ability: broker data directories are on the lazy filesystem -- and, on a cluster whose
    controller node runs a :class:`ControllerProcess`, the controller's metadata directory too."""

    def drop_unsynced(self, node: str) -> None:
        """Discard every write to ``node``'s data directory (the controller node's: its metadata
        directory) that was not fsynced; the process writing there must be dead."""
        ...


@runtime_checkable
class DiskFaults(Protocol):
    """Ability: the lazy filesystem under a broker's data directory takes disk-fault rules
    (:mod:`nemesis.lazyfs.faults`); only with the data directories on it (``PowerLoss``)."""

    def lazyfs_control(self, node: str, command: str) -> None:
        """Send one control command (``fail ...``, ``slow-fsync ...``, ``clear``) to ``node``'s lazy
        filesystem; raises (a RemoteError) when it was not carried out."""
        ...


@runtime_checkable
class ClockControl(Protocol):
    """Ability: the brokers' wall clocks can be moved while they run (only when ``fake_clock``)."""

    fake_clock: bool

    def clock(self, node: str) -> NodeClock:
        """``node``'s wall clock as last set (:data:`~testbed.cluster.fake_clock.REAL_CLOCK` until then)."""
        ...

    def set_clock(self, node: str, clock: NodeClock) -> None:
        """``node``'s broker's wall clock follows ``clock`` from now on, across broker restarts."""
        ...


CONTROLLER_DAEMON: Final = "controller"
"""The Remote daemon name of the controller process on a :class:`ControllerProcess` cluster's controller node."""


@runtime_checkable
class ControllerProcess(Protocol):
    """Ability: the controller node (``controller``) runs the cluster's controller as the daemon
    :data:`CONTROLLER_DAEMON`, which the nemesis may signal through its remote and start again.
    Not every controller node is one: tansu's is its PostgreSQL, whose loss is another fault."""

    def start_controller(self) -> None:
        """Start the controller daemon where it is not running (its metadata is read back from its disk)."""
        ...


@runtime_checkable
class ControlledCluster(Cluster, NodeControl, Protocol):
    """A cluster whose nodes the nemesis can act on: what faults and scenarios need."""
