"""nisshi, tansu's maintained successor, in Docker (``--target nisshi``; the clusters are
:mod:`testbed.cluster.nisshi`): brokers sharing one PostgreSQL node (``nisshi.storage=postgresql``,
the default) or one broker on its embedded SQLite file (``nisshi.storage=sqlite``).

One replica either way (``replica_evidence`` ``single-store``: divergence is not applicable).
Refused before anything starts: an external cluster, metadata delay (no controller node),
partitions that leave PostgreSQL out, transactions (nisshi 0.8.1 refuses every transactional
InitProducerId, whatever its configuration), disk faults on PostgreSQL (its node has no
lazy-filesystem rules), more than one broker on SQLite, a setting of another system -- and a
machine where the pinned nisshi binary is not built yet (a 5-15 minute cargo build that a run
must not start unasked).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.targets.base import SpecRefused, TargetSpec
from harness.targets.crate_target import CrateTarget, DockerClusters
from nemesis.fault_kinds import DISK_ERROR, SLOW_DISK
from nemesis.spec import METADATA_DELAY
from testbed.cluster.protocol import (
    DiskFaults,
    LogFiles,
    NodeControl,
    PowerLoss,
    ReplicaDumps,
    ReplicaNodes,
)

if TYPE_CHECKING:
    from testbed.cluster.crate_image import CrateImage

NISSHI = "nisshi"
TRANSACTIONS_REFUSED = (
    "--txn: nisshi 0.8.1 refuses transactions -- every InitProducerId with a transactional id is answered"
    " TRANSACTIONAL_ID_AUTHORIZATION_FAILED before storage is asked (nisshi-storage 0.8.1"
    " service/init_producer_id.rs), and no flag, ACL or user enables them"
)


class NisshiTarget(CrateTarget):
    """nisshi on PostgreSQL (both tiers faultable) or on SQLite (one broker, its own disk)."""

    name = NISSHI
    abilities = frozenset({NodeControl, ReplicaDumps, ReplicaNodes, LogFiles, PowerLoss, DiskFaults})

    def effective_settings(self, settings: Mapping[str, str]) -> dict[str, str]:
        from testbed.cluster.nisshi import effective_settings

        return effective_settings(settings)

    def check(self, spec: TargetSpec) -> None:
        """What ``--target nisshi`` cannot do, refused in one line each."""
        from testbed.cluster.nisshi import SettingsError, storage_of

        if spec.bootstrap or spec.inventory:
            raise SpecRefused("--target nisshi starts its own brokers: not with --bootstrap/--inventory")
        try:
            self.effective_settings(spec.settings)
        except SettingsError as error:
            raise SpecRefused(str(error)) from None
        faults = spec.nemesis.injected_faults() | spec.scenario_faults()
        if METADATA_DELAY in faults:
            raise SpecRefused(
                f"--nemesis {METADATA_DELAY} cuts brokers off a controller node; nisshi keeps its metadata "
                "in its store: partition or kill it instead"
            )
        if spec.workload.txn:
            raise SpecRefused(TRANSACTIONS_REFUSED)
        storage = storage_of(spec.settings)
        if storage == "postgresql":
            if spec.nemesis.partition_scope == "all":
                raise SpecRefused(
                    "--partition-scope all: with --target nisshi on PostgreSQL partitions always include the"
                    " PostgreSQL node"
                )
            if faults & {DISK_ERROR, SLOW_DISK}:
                raise SpecRefused(
                    "--nemesis disk-error/slow-disk: nisshi on PostgreSQL keeps its log in PostgreSQL's files;"
                    " disk faults run with --set nisshi.storage=sqlite"
                )
        elif spec.node_count != 1:
            raise SpecRefused(
                f"--nodes {spec.node_count}: nisshi on SQLite runs one broker (each broker would have its own"
                " file, a separate cluster): --nodes 1 --replication-factor 1"
            )

    def node_roles(self, spec: TargetSpec) -> dict[str, str]:
        from testbed.cluster.docker_cluster import broker_names
        from testbed.cluster.nisshi import POSTGRES_NODE, storage_of

        brokers = dict.fromkeys(broker_names(spec.node_count), "broker")
        return (
            {**brokers, POSTGRES_NODE: "postgresql"} if storage_of(spec.settings) == "postgresql" else brokers
        )

    def replica_nodes(self, spec: TargetSpec) -> list[str]:
        from testbed.cluster.docker_cluster import broker_names
        from testbed.cluster.nisshi import POSTGRES_NODE, storage_of

        return [POSTGRES_NODE] if storage_of(spec.settings) == "postgresql" else broker_names(1)

    def replica_evidence(self, spec: TargetSpec) -> str:
        from testbed.cluster.nisshi import SQLITE_REPLICA_EVIDENCE, storage_of
        from testbed.cluster.shared_store import REPLICA_EVIDENCE

        return REPLICA_EVIDENCE if storage_of(spec.settings) == "postgresql" else SQLITE_REPLICA_EVIDENCE

    def crate_image(self) -> CrateImage:
        from testbed.cluster.nisshi_image import NISSHI_IMAGE

        return NISSHI_IMAGE

    def docker_clusters(self, request_proxies: bool) -> DockerClusters:
        from testbed.cluster.nisshi import nisshi_on_docker

        return functools.partial(nisshi_on_docker, request_proxies=request_proxies)


NISSHI_TARGET = NisshiTarget()
