"""tansu brokers sharing one PostgreSQL node in Docker (``--target tansu``; the cluster itself is
:mod:`testbed.cluster.tansu`).

Brokers ``n1``..``nN`` keep nothing on disk; the one replica is PostgreSQL's tables on node
``pg``.  So a run dumps that one replica and records that there is no second one to compare
(``replica_evidence`` ``single-store``: the checker reports divergence as not applicable).  Its
settings are PostgreSQL's (``postgresql.*``, :mod:`testbed.cluster.postgres`).  What it cannot do
is refused before anything starts: an external cluster, metadata delay (there is no controller
node), partitions that leave PostgreSQL out, a setting of another system -- and a machine where
the pinned tansu binary is not built yet (a 4-10 minute cargo build that a run must not start
unasked).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.targets.base import SpecRefused, TargetSpec
from harness.targets.crate_target import CrateTarget, DockerClusters
from nemesis.spec import METADATA_DELAY
from testbed.cluster import postgres
from testbed.cluster.protocol import LogFiles, NodeControl, PowerLoss, ReplicaDumps, ReplicaNodes

if TYPE_CHECKING:
    from testbed.cluster.crate_image import CrateImage

TANSU = "tansu"
BUILD_COMMAND = "tidemark image build --target tansu"


class TansuTarget(CrateTarget):
    """tansu on PostgreSQL: both tiers faultable, one replica, PostgreSQL's settings."""

    name = TANSU
    abilities = frozenset({NodeControl, ReplicaDumps, ReplicaNodes, LogFiles, PowerLoss})

    def effective_settings(self, settings: Mapping[str, str]) -> dict[str, str]:
        return postgres.effective_settings(settings)

    def check(self, spec: TargetSpec) -> None:
        """What ``--target tansu`` cannot do, refused in one line each."""
        if spec.bootstrap or spec.inventory:
            raise SpecRefused(
                "--target tansu starts its own brokers and PostgreSQL: not with --bootstrap/--inventory"
            )
        if METADATA_DELAY in spec.nemesis.injected_faults() | spec.scenario_faults():
            raise SpecRefused(
                f"--nemesis {METADATA_DELAY} cuts brokers off a controller node; tansu keeps its metadata "
                "in PostgreSQL (node pg): partition it instead"
            )
        if spec.workload.txn:
            raise SpecRefused(
                "--txn: tansu 0.6.0 offers no EndTxn (its ApiVersions lacks key 26), so no transaction"
                " can end; measured 2026-11-29: every commit failed IncompatibleBrokerVersion and the"
                " aborted transactions' writes were read (G1a 44)"
            )
        if spec.nemesis.partition_scope == "all":
            raise SpecRefused(
                "--partition-scope all: with --target tansu partitions always include the PostgreSQL node"
            )
        try:
            postgres.effective_settings(spec.settings)
        except postgres.SettingsError as error:
            raise SpecRefused(str(error)) from None

    def node_roles(self, spec: TargetSpec) -> dict[str, str]:
        from testbed.cluster.docker_cluster import broker_names
        from testbed.cluster.tansu import POSTGRES_NODE

        return {**dict.fromkeys(broker_names(spec.node_count), "broker"), POSTGRES_NODE: "postgresql"}

    def replica_nodes(self, spec: TargetSpec) -> list[str]:
        from testbed.cluster.tansu import POSTGRES_NODE

        return [POSTGRES_NODE]

    def replica_evidence(self, spec: TargetSpec) -> str:
        from testbed.cluster.tansu import REPLICA_EVIDENCE

        return REPLICA_EVIDENCE

    def crate_image(self) -> CrateImage:
        from testbed.cluster.tansu_image import TANSU_IMAGE

        return TANSU_IMAGE

    def docker_clusters(self, request_proxies: bool) -> DockerClusters:
        from testbed.cluster.shared_store import shared_store_on_docker
        from testbed.cluster.tansu import ProxiedTansuCluster, TansuCluster

        cluster_class = ProxiedTansuCluster if request_proxies else TansuCluster
        return functools.partial(shared_store_on_docker, cluster_class=cluster_class)


TANSU_TARGET = TansuTarget()
