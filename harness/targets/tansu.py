"""tansu brokers sharing one PostgreSQL node in Docker (``--target tansu``; the cluster itself is
:mod:`testbed.cluster.tansu`).

Brokers ``n1``..``nN`` keep nothing on disk; the one replica is PostgreSQL's tables on node
``pg``.  So a run dumps that one replica and records that there is no second one to compare
(``replica_evidence`` ``single-store``: the checker reports divergence as not applicable).  Its
settings are PostgreSQL's (``postgresql.*``, :mod:`testbed.cluster.postgres`).  What it cannot do
is refused before anything starts: an external cluster, metadata delay (there is no controller
node), partitions that leave PostgreSQL out, a setting of another system -- and a machine where
the pinned tansu binary is not built yet (a 15-25 minute cargo build that a run must not start
unasked).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from harness.targets.base import ContainerTarget, Progress, SpecRefused, TargetSpec, collect_logs
from nemesis.spec import METADATA_DELAY
from testbed.cluster import postgres
from testbed.cluster.protocol import Cluster, LogFiles, NodeControl, PowerLoss, ReplicaDumps, ReplicaNodes
from testbed.record.rundir import RunDir

if TYPE_CHECKING:
    import docker

TANSU = "tansu"
BUILD_COMMAND = "tidemark image build --target tansu"


class TansuTarget(ContainerTarget):
    """tansu on PostgreSQL: both tiers faultable, one replica, PostgreSQL's settings."""

    name = TANSU
    abilities = frozenset({NodeControl, ReplicaDumps, ReplicaNodes, LogFiles, PowerLoss})
    builds_binary = True

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

    def check_ready(self, spec: TargetSpec) -> None:
        from testbed.cluster.tansu_image import cached_binary

        if cached_binary() is None:
            raise SpecRefused(
                f"--target tansu: the tansu binary is not built yet; run `{BUILD_COMMAND}` "
                "once (a cargo build, 15-25 min)"
            )

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

    @contextmanager
    def cluster(self, spec: TargetSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
        """tansu brokers on one PostgreSQL node in Docker; logs collected, torn down."""
        import docker

        from testbed.cluster.tansu import tansu_on_docker
        from testbed.cluster.tansu_image import ensure_tansu_image

        client = docker.from_env()
        with tansu_on_docker(
            client,
            ensure_tansu_image(client, build_binary=False),
            brokers=spec.node_count,
            settings=spec.settings,
            power_loss_filesystem=spec.power_loss_filesystem,
            transport=spec.transport,
            work_dir=run_dir.cluster_work,
        ) as (cluster, node_names):
            try:
                cluster.configure()
                cluster.start()
                yield cluster
            finally:
                collect_logs(cluster, node_names, run_dir, problems)

    def check_image_options(self, *, base_image: str | None) -> None:
        if base_image is not None:
            raise SpecRefused(
                "--target tansu builds on the registry-free base (PostgreSQL from Debian): no --base-image"
            )

    def build_image(
        self,
        client: docker.DockerClient,
        *,
        base_image: str | None,
        apt_sources: Path | None,
        force: bool,
        progress: Progress,
    ) -> str:
        from testbed.cluster.tansu_image import ensure_tansu_image

        return ensure_tansu_image(client, apt_sources=apt_sources, force=force, progress=progress)

    def build_binary(self, progress: Progress) -> Path:
        from testbed.cluster.tansu_image import ensure_binary

        return ensure_binary(progress=progress)


TANSU_TARGET = TansuTarget()
