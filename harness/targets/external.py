"""A Kafka-compatible cluster the harness did not start (``--bootstrap``; the cluster itself is
:mod:`testbed.cluster.external`).

``--bootstrap`` picks this target (a spec that also names another target than the default is that
target's to refuse).  Without an ``--inventory`` the harness cannot reach the nodes: the run is
fault-free, and faults, scenarios and power loss are refused.  With one, the harness (re)starts
each broker over SSH, so the nemesis can act on them and their logs are collected.  Tidemark
cannot dump an external cluster's replicas, so a run records ``replica_evidence`` ``none`` and
the checker names the replica checks not applicable.  Settings are only what ``--set`` asked
(checked against the bundled broker's keys); nothing is known of the cluster's defaults.

Whether the cluster can be tested at all is found out before the run
(:meth:`ExternalTarget.probe`, :mod:`testbed.cluster.external_probe`); a set-up that fails after
the probe passed is reported in one line too (:meth:`ExternalTarget.unavailable`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from harness.targets.base import BaseTarget, Progress, SpecRefused, TargetSpec, collect_logs
from harness.targets.bundled import check_bundled_settings
from testbed.cluster.protocol import Cluster, LogFiles, NodeControl
from testbed.cluster.targets import DEFAULT_TARGET
from testbed.record.replicas import EVIDENCE_NONE
from testbed.record.rundir import RunDir

if TYPE_CHECKING:
    import docker

EXTERNAL = "external"
REPLICA_EVIDENCE = f"{EVIDENCE_NONE}: an external cluster (Tidemark cannot dump its logs)"


class ExternalTarget(BaseTarget):
    """An external cluster: reached at ``--bootstrap``, its nodes (if any) through ``--inventory``."""

    name = EXTERNAL
    abilities = frozenset({NodeControl, LogFiles})
    sizes_cluster = False

    def claims(self, spec: TargetSpec) -> bool:
        return spec.bootstrap is not None and spec.target == DEFAULT_TARGET

    def effective_settings(self, settings: Mapping[str, str]) -> dict[str, str]:
        return dict(settings)

    def check(self, spec: TargetSpec) -> None:
        from testbed.cluster.external_probe import BootstrapAddressError, parse_bootstrap

        assert spec.bootstrap is not None
        try:
            parse_bootstrap(spec.bootstrap)
        except BootstrapAddressError as error:
            raise SpecRefused(str(error)) from None
        if spec.power_loss_filesystem:
            raise SpecRefused(
                "power-loss needs the bundled broker's lazy filesystem: not available with --bootstrap"
            )
        if not spec.inventory and spec.scenario:
            raise SpecRefused(
                "a scenario against an external cluster needs --inventory (SSH access to its nodes)"
            )
        if not spec.inventory and spec.nemesis.faults:
            raise SpecRefused("faults against an external cluster need --inventory (SSH access to its nodes)")
        self.node_roles(spec)  # a bad inventory is refused here, naming file, node and key
        check_bundled_settings(spec.settings)

    def node_roles(self, spec: TargetSpec) -> dict[str, str]:
        from testbed.cluster.external import InventoryError, load_inventory

        if not spec.inventory:
            return {}
        try:
            return {node.name: "broker" for node in load_inventory(Path(spec.inventory))}
        except InventoryError as error:
            raise SpecRefused(str(error)) from None

    def replica_nodes(self, spec: TargetSpec) -> list[str]:
        return []

    def replica_evidence(self, spec: TargetSpec) -> str:
        return REPLICA_EVIDENCE

    @contextmanager
    def cluster(self, spec: TargetSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
        """A cluster the harness did not start; brokers under SSH control if an inventory is given."""
        from testbed.cluster.external import ExternalCluster, load_inventory

        assert spec.bootstrap is not None
        inventory = load_inventory(Path(spec.inventory)) if spec.inventory else []
        cluster = ExternalCluster(spec.bootstrap, inventory)
        try:
            cluster.start()
            yield cluster
        finally:
            collect_logs(cluster, cluster.brokers, run_dir, problems)

    def probe(self, spec: TargetSpec) -> str | None:
        """Probe the cluster before anything runs (with an inventory it is probed once the harness
        started its brokers): :class:`SpecRefused` when the arguments do not fit it (partitions
        or a replication factor it refuses), the reason when it cannot be tested, else None."""
        from testbed.cluster.external_probe import ClusterMismatch, ExternalClusterError, probe_cluster

        if spec.bootstrap is None or spec.inventory:
            return None
        try:
            probe_cluster(
                spec.bootstrap, spec.topic, spec.workload.partitions, spec.workload.replication_factor
            )
        except ClusterMismatch as error:
            raise SpecRefused(str(error)) from None
        except ExternalClusterError as error:
            return str(error)
        return None

    def unavailable(self, spec: TargetSpec, error: Exception) -> str | None:
        from testbed.cluster.external_probe import ExternalClusterError
        from testbed.cluster.kafka_admin import ClusterUnavailable

        if isinstance(error, ExternalClusterError):  # with an inventory: its brokers, once started
            return str(error)
        if isinstance(error, ClusterUnavailable | TimeoutError):  # set-up failed after the probe
            return f"--bootstrap {spec.bootstrap}: {error}"
        return None

    def build_image(
        self,
        client: docker.DockerClient,
        *,
        base_image: str | None,
        apt_sources: Path | None,
        force: bool,
        progress: Progress,
    ) -> str:
        raise SpecRefused("an external cluster runs on its own machines: Tidemark builds no image for it")


EXTERNAL_TARGET = ExternalTarget()
