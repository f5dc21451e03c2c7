"""The bundled broker in Docker (``--target bundled``, the default): ``broker_impl`` on ``n1``..``nN``
plus one controller node, every data directory optionally on the lazy filesystem.

It offers every ability of :mod:`testbed.cluster.protocol` but :class:`ReplicaNodes` (its replicas
are its brokers): the nemesis acts on its nodes (its controller's process too), every replica is dumped after the run (so the
checker compares replicas), a running replica can be read where it lies, node logs and event logs
are collected, and power loss drops un-fsynced writes.  Its settings are the broker's and the
controller's (:func:`testbed.cluster.bundled.effective_settings`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from harness.targets.base import (
    ContainerTarget,
    Progress,
    SpecRefused,
    TargetSpec,
    collect_logs,
    wants_request_proxies,
)
from nemesis.packages import PackageContext
from testbed.cluster import bundled
from testbed.cluster.protocol import (
    Cluster,
    ControllerProcess,
    DiskFaults,
    LiveReplicas,
    LogFiles,
    NodeControl,
    PowerLoss,
    ReplicaDumps,
)
from testbed.cluster.targets import DEFAULT_TARGET
from testbed.record.faults import CLOCK_FAULTS
from testbed.record.replicas import EVIDENCE_DUMPS
from testbed.record.rundir import RunDir

if TYPE_CHECKING:
    import docker

BROKER = "broker"
CONTROLLER_ROLE = "controller"


class BundledTarget(ContainerTarget):
    """The bundled broker: the one target that knows its nodes before it starts."""

    name = DEFAULT_TARGET
    abilities = frozenset(
        {NodeControl, ReplicaDumps, LiveReplicas, LogFiles, PowerLoss, DiskFaults, ControllerProcess}
    )
    event_logs = True

    def effective_settings(self, settings: Mapping[str, str]) -> dict[str, str]:
        return bundled.effective_settings(settings)

    def check(self, spec: TargetSpec) -> None:
        if spec.inventory:
            raise SpecRefused("--inventory needs --bootstrap")
        check_bundled_settings(spec.settings)

    def broker_names(self, spec: TargetSpec) -> list[str]:
        from testbed.cluster.docker_cluster import broker_names

        return broker_names(spec.node_count)

    def node_roles(self, spec: TargetSpec) -> dict[str, str]:
        from testbed.cluster.docker_cluster import CONTROLLER

        return {**dict.fromkeys(self.broker_names(spec), BROKER), CONTROLLER: CONTROLLER_ROLE}

    def replica_nodes(self, spec: TargetSpec) -> list[str]:
        return self.broker_names(spec)

    def replica_evidence(self, spec: TargetSpec) -> str:
        return EVIDENCE_DUMPS

    def package_context(self, spec: TargetSpec) -> PackageContext | None:
        """Its brokers, the workload's partitions and replication factor, the lazy filesystem, the
        controller node (metadata delay), the queue workload's marker sends, its client processes
        (client and consumer crashes) and its send rate."""
        return PackageContext(
            brokers=tuple(self.broker_names(spec)),
            partitions=spec.workload.partitions,
            replication_factor=spec.workload.replication_factor,
            power_loss=spec.power_loss_filesystem,
            metadata_delay=True,
            quiet_seconds=spec.nemesis.interval_seconds,
            markers=True,
            rules=spec.replication_rules(),
            client_crash=spec.workload.client_processes and spec.workload.producers > 0,
            consumer_crash=spec.workload.client_processes
            and spec.workload.consumers > 0
            and spec.workload.consume_via == "subscribe",
            send_rate=spec.workload.send_rate,
        )

    @contextmanager
    def cluster(self, spec: TargetSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
        """A DockerCluster with broker_impl started on it; logs collected and torn down on exit."""
        import docker

        from testbed.cluster.bundled import BundledCluster, ProxiedBundledCluster
        from testbed.cluster.docker_cluster import CONTROLLER, DockerCluster
        from testbed.cluster.image import ensure_image

        client = docker.from_env()
        image = ensure_image(client)
        with DockerCluster(
            client, image, brokers=spec.node_count, work_dir=run_dir.cluster_work
        ) as docker_cluster:
            names = docker_cluster.broker_names
            faults = spec.nemesis.injected_faults() | spec.scenario_faults()
            cluster = (ProxiedBundledCluster if wants_request_proxies(spec) else BundledCluster)(
                docker_cluster.remotes_via(spec.transport),
                {n: docker_cluster.ip(n) for n in docker_cluster.node_names},
                names,
                CONTROLLER,
                spec.settings,
                power_loss_filesystem=spec.power_loss_filesystem,
                # libfaketime preloaded only when a clock may be moved: nothing else pays for it.
                fake_clock=bool(CLOCK_FAULTS & faults),
            )
            try:
                cluster.configure()
                cluster.start()
                yield cluster
            finally:
                collect_logs(cluster, docker_cluster.node_names, run_dir, problems)

    def build_image(
        self,
        client: docker.DockerClient,
        *,
        base_image: str | None,
        apt_sources: Path | None,
        force: bool,
        progress: Progress,
    ) -> str:
        from testbed.cluster.image import ensure_image

        return ensure_image(
            client, base_image=base_image, apt_sources=apt_sources, force=force, progress=progress
        )


def check_bundled_settings(settings: Mapping[str, str]) -> None:
    """Refuse a setting the bundled broker and controller do not have (an external cluster's
    ``--set`` is checked against the same keys)."""
    try:
        bundled.split_settings(settings)
    except bundled.SettingsError as error:
        raise SpecRefused(str(error)) from None


BUNDLED = BundledTarget()
