"""What every target built from a crates.io crate shares (tansu, nisshi): its binary and image.

Such a system is a pinned binary, built once with cargo and cached, copied into an image made
like the node image on the registry-free base (:class:`testbed.cluster.crate_image.CrateImage`).
So its target refuses a run on a machine where the binary is not built yet (a long cargo build a
run must not start unasked), takes no ``--base-image``, builds binary and image for ``tidemark
image build``, and starts its cluster on that image, collecting the nodes' logs on the way out.
A subclass names its image (:meth:`CrateTarget.crate_image`) and how its cluster starts on Docker
(:meth:`CrateTarget.on_docker`); the rest of :class:`~harness.targets.base.Target` is its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.targets.base import (
    ContainerTarget,
    Progress,
    SpecRefused,
    TargetSpec,
    collect_logs,
    wants_request_proxies,
)
from testbed.cluster.protocol import Cluster
from testbed.record.rundir import RunDir

if TYPE_CHECKING:
    import docker

    from testbed.cluster.crate_image import CrateImage


class StartableCluster(Cluster, Protocol):
    """A cluster that is laid out, then started, by the target that made it."""

    def configure(self) -> None: ...

    def start(self, ready_timeout: float = 60.0) -> None: ...


class DockerClusters(Protocol):
    """``testbed.cluster.<system>``'s ``*_on_docker``: its cluster on a Docker image."""

    def __call__(
        self,
        client: docker.DockerClient,
        image: str,
        *,
        brokers: int,
        settings: Mapping[str, str],
        power_loss_filesystem: bool,
        transport: str = "docker",
        work_dir: Path | None = None,
    ) -> AbstractContextManager[tuple[StartableCluster, list[str]]]: ...


class CrateTarget(ContainerTarget):
    """A target whose system is a pinned crates.io binary in an image (see the module doc)."""

    builds_binary = True

    def crate_image(self) -> CrateImage:
        """The system's pinned binary and image."""
        raise NotImplementedError

    def docker_clusters(self, request_proxies: bool) -> DockerClusters:
        """How the system's cluster starts in Docker (``testbed.cluster.<system>``'s ``*_on_docker``);
        with ``request_proxies``, its brokers behind a request proxy each (the ``request-proxy``
        ability the request-path faults need)."""
        raise NotImplementedError

    def on_docker(
        self, client: docker.DockerClient, image: str, spec: TargetSpec, run_dir: RunDir
    ) -> AbstractContextManager[tuple[StartableCluster, list[str]]]:
        """The system's cluster on ``image``, not yet configured or started, with the node names
        whose logs to collect; every container removed on the way out."""
        return self.docker_clusters(wants_request_proxies(spec))(
            client,
            image,
            brokers=spec.node_count,
            settings=spec.settings,
            power_loss_filesystem=spec.power_loss_filesystem,
            transport=spec.transport,
            work_dir=run_dir.cluster_work,
        )

    def check_ready(self, spec: TargetSpec) -> None:
        image = self.crate_image()
        if image.cached_binary() is None:
            raise SpecRefused(
                f"--target {self.name}: the {self.name} binary is not built yet; run "
                f"`tidemark image build --target {self.name}` once (a cargo build, {image.build_minutes} min)"
            )

    @contextmanager
    def cluster(self, spec: TargetSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
        """The system in Docker, configured and started; logs collected, torn down."""
        import docker

        client = docker.from_env()
        image = self.crate_image().ensure(client, build_binary=False)
        with self.on_docker(client, image, spec, run_dir) as (cluster, node_names):
            try:
                cluster.configure()
                cluster.start()
                yield cluster
            finally:
                collect_logs(cluster, node_names, run_dir, problems)

    def check_image_options(self, *, base_image: str | None) -> None:
        if base_image is not None:
            raise SpecRefused(
                f"--target {self.name} builds on the registry-free base (PostgreSQL from Debian): no --base-image"
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
        return self.crate_image().ensure(client, apt_sources=apt_sources, force=force, progress=progress)

    def build_binary(self, progress: Progress) -> Path:
        return self.crate_image().ensure_binary(progress)
