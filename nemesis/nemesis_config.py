"""How a :class:`nemesis.mechanism.Nemesis` is set up: what it needs of a cluster, and its options.

* :class:`ClusterHandle` -- the cluster as the nemesis sees it: node names and
  :class:`~testbed.cluster.protocol.NodeControl`;
* :class:`NemesisConfig` -- everything beyond the spec, cluster and recorder, in one object (the
  nemesis once took eleven parameters);
* :func:`cluster_abilities` -- which abilities of :data:`nemesis.fault_declaration.ABILITIES` a cluster
  offers, so a fault kind's ``needs`` can be checked before anything is recorded, and
  :data:`ABILITY_MISSING`, how a refusal names a missing one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, Protocol

from nemesis.fault_declaration import (
    CONSUMER_GROUP,
    CONTROLLER_NODE,
    CONTROLLER_PROCESS,
    DISK_FAULTS_ABILITY,
    FAKE_CLOCK,
    NODE_CONTROL,
    POWER_LOSS_ABILITY,
    REQUEST_PROXY,
)
from nemesis.package_context import ReplicationRules
from nemesis.plan import TopicPartition
from nemesis.request_faults import RequestProxies
from testbed.cluster.protocol import (
    ClockControl,
    Cluster,
    ControllerProcess,
    DiskFaults,
    NodeControl,
    PowerLoss,
)


class ClusterHandle(NodeControl, Protocol):
    """What the nemesis needs from a cluster: its node names and :class:`NodeControl`."""

    @property
    def brokers(self) -> Sequence[str]:
        """Broker node names, e.g. ``["n1", "n2", "n3"]``."""
        ...

    @property
    def controller(self) -> str | None:
        """The controller's node name, or None when the cluster's metadata lives elsewhere."""
        ...


@dataclasses.dataclass(frozen=True)
class NemesisConfig:
    """How a :class:`Nemesis` works beyond its spec, cluster and recorder (all optional).

    ``leader_partitions`` are the topic partitions whose leader the ``leader``/``followers``/
    ``isolate-leader`` targets follow (one is drawn per step).  ``package_cluster`` (the cluster
    as a Kafka :class:`~testbed.cluster.protocol.Cluster`) and ``leader_partitions`` together let
    the schedule draw fault packages, with ``replication_factor`` (default: every broker),
    ``rules`` (the ISR lag, unclean elections, ELR and min ISR in force, where known) and
    ``group``, the workload's consumer group (a package's roles on its ``offsets`` partition), and
    ``send_rate``, the workload's records per second where its spec fixes them (a slowed link's size).
    ``workload`` is asked for the optional abilities some faults need (``consumer-churn``:
    :mod:`nemesis.consumer_churn`; marker sends for packages' ``produce`` steps:
    :class:`nemesis.scenario_run.MarkerSender`).  ``remote_timeout`` bounds every remote call;
    ``settle_timeout`` the wait for a SIGKILLed broker to be gone; ``heal_all_wait`` how long
    heal-all waits for a fault action in flight.
    """

    leader_partitions: Sequence[TopicPartition] = ()
    remote_timeout: float = 10.0
    settle_timeout: float = 10.0
    heal_all_wait: float = 30.0
    package_cluster: Cluster | None = None
    replication_factor: int | None = None
    workload: object | None = None
    rules: ReplicationRules = dataclasses.field(default_factory=ReplicationRules)
    group: str | None = None
    send_rate: float | None = None


ABILITY_MISSING: Final[Mapping[str, str]] = MappingProxyType(
    {
        POWER_LOSS_ABILITY: "a cluster whose data directories are on the lazy filesystem",
        DISK_FAULTS_ABILITY: "a cluster whose data directories are on the lazy filesystem and take its"
        " disk-fault rules (the bundled broker's)",
        CONTROLLER_NODE: "a controller node (this cluster's metadata lives elsewhere)",
        CONTROLLER_PROCESS: "a controller process on the controller node the harness can kill and start"
        " (the bundled broker's)",
        NODE_CONTROL: "a cluster whose nodes the harness controls",
        CONSUMER_GROUP: "the workload's consumer group (--consume-via subscribe)",
        REQUEST_PROXY: "a cluster whose brokers' clients go through request proxies",
        FAKE_CLOCK: "a cluster whose brokers run under libfaketime (the bundled broker's)",
    }
)
"""Each ability of :data:`nemesis.fault_declaration.ABILITIES`, as a refusal says what is missing."""


ABILITY_PROTOCOLS: Final[Mapping[str, type]] = MappingProxyType(
    {
        NODE_CONTROL: NodeControl,
        POWER_LOSS_ABILITY: PowerLoss,
        DISK_FAULTS_ABILITY: DiskFaults,
        REQUEST_PROXY: RequestProxies,
        CONTROLLER_PROCESS: ControllerProcess,
    }
)
"""The abilities a cluster has by implementing a protocol of :mod:`testbed.cluster.protocol`, so a
target that lists its protocols (``harness.targets``: ``Target.offers(protocol)``) answers a fault
kind's ``needs`` by name.  :data:`~nemesis.fault_kinds.CONTROLLER_NODE` is a fact of the cluster
(``controller`` is not None), :data:`~nemesis.fault_kinds.CONSUMER_GROUP` one of the workload."""


def cluster_abilities(cluster: ClusterHandle) -> frozenset[str]:
    """The target abilities of :data:`nemesis.fault_declaration.ABILITIES` that ``cluster`` offers."""
    offered = {NODE_CONTROL}
    if isinstance(cluster, PowerLoss):
        offered.add(POWER_LOSS_ABILITY)
    if isinstance(cluster, DiskFaults):
        offered.add(DISK_FAULTS_ABILITY)
    if cluster.controller is not None:
        offered.add(CONTROLLER_NODE)
        if isinstance(cluster, ControllerProcess):
            offered.add(CONTROLLER_PROCESS)
    if isinstance(cluster, RequestProxies):
        offered.add(REQUEST_PROXY)
    if isinstance(cluster, ClockControl) and cluster.fake_clock:
        offered.add(FAKE_CLOCK)
    return frozenset(offered)
