"""What a target is: the :class:`Target` protocol, what it reads of a spec, and shared helpers.

A *target* is one system under test.  It answers every question whose answer depends on the
system, so no caller branches on a target's name:

* **spec checks** -- :meth:`Target.check` refuses (:class:`SpecRefused`, one line naming the flag)
  what the spec asks and the system cannot do; :meth:`Target.check_ready` what this machine lacks
  to start it (a binary not built yet).  Both run before anything starts, through
  :func:`harness.targets.registry.check_spec`, for ``run``, ``hunt``, ``rerun`` and campaigns;
* **settings** -- :meth:`Target.effective_settings`: the settings in force, defaults applied (what
  ``test.json``'s ``broker_config`` records); a key the system does not have raises ``ValueError``;
* **cluster** -- :meth:`Target.cluster` starts it and yields a running
  :class:`~testbed.cluster.protocol.Cluster`; on the way out its node logs are collected and it is
  torn down, on every path;
* **nodes** -- :meth:`Target.node_roles` (known before it starts), :meth:`Target.replica_nodes` and
  :meth:`Target.replica_evidence` (``test.json``'s ``nodes`` and ``replica_evidence``: which replica
  checks apply, :mod:`testbed.record.replicas`);
* **abilities** -- :attr:`Target.abilities`, the ability protocols of
  :mod:`testbed.cluster.protocol` its clusters offer at best, known without starting one (the
  nemesis asks e.g. "power loss?"); :attr:`Target.event_logs` whether its brokers write the event
  logs of ``docs/events.md``;
* **external clusters** -- :meth:`Target.probe` before the run and :meth:`Target.unavailable` after
  a failed set-up turn "cannot be tested" into one line instead of a traceback;
* **images** -- :meth:`Target.build_image` / :meth:`Target.build_binary` (``tidemark image build``).

Targets read a spec through :class:`TargetSpec`, the fields they need, so that this room does not
import :mod:`harness.run.spec` (which asks the targets for its effective settings).
:class:`BaseTarget` holds the answers most targets share; a target overrides what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from nemesis.fault_declaration import REQUEST_PROXY
from nemesis.fault_kinds import REGISTRY, kind_of
from nemesis.package_context import ReplicationRules
from nemesis.packages import PackageContext
from nemesis.spec import NemesisSpec
from testbed.cluster.protocol import Cluster, LogFiles
from testbed.record.rundir import RunDir
from workloads.queue import QueueSpec

if TYPE_CHECKING:
    import docker

Progress = Callable[[str], None]
"""Where an image build reports its steps (one line each)."""


class SpecRefused(ValueError):
    """A spec its target cannot run, or a machine that cannot start it yet: one line that names
    the flag (or the command to run first).  The CLI turns it into a usage error (exit 254), a
    campaign into a :class:`~harness.run.campaign.CampaignError` naming the file and the run."""


class TargetSpec(Protocol):
    """What a target reads of a test spec (:class:`harness.run.spec.TestSpec` is one)."""

    @property
    def target(self) -> str: ...
    @property
    def bootstrap(self) -> str | None: ...
    @property
    def inventory(self) -> str | None: ...
    @property
    def settings(self) -> dict[str, str]: ...
    @property
    def node_count(self) -> int: ...
    @property
    def power_loss_filesystem(self) -> bool: ...
    @property
    def transport(self) -> str: ...
    @property
    def scenario(self) -> str | None: ...
    @property
    def topic(self) -> str: ...
    @property
    def workload(self) -> QueueSpec: ...
    @property
    def nemesis(self) -> NemesisSpec: ...

    def scenario_faults(self) -> set[str]: ...

    def replication_rules(self) -> ReplicationRules: ...


@runtime_checkable
class Target(Protocol):
    """One system under test (see the module doc); every registered target offers all of it."""

    @property
    def name(self) -> str:
        """How specs, scenarios and campaigns name it (``target``); the external target's name is
        not one a spec gives: ``--bootstrap`` picks it."""
        ...

    @property
    def abilities(self) -> frozenset[type]:
        """The ability protocols of :mod:`testbed.cluster.protocol` its clusters offer at best (an
        external cluster's node abilities need ``--inventory``)."""
        ...

    @property
    def event_logs(self) -> bool:
        """Whether its brokers write the event logs of ``docs/events.md`` (the white-box checks)."""
        ...

    @property
    def sizes_cluster(self) -> bool:
        """Whether a spec's ``node_count`` is the number of brokers it starts (so the replication
        factor must fit it); False where the cluster exists already."""
        ...

    @property
    def builds_binary(self) -> bool:
        """Whether ``tidemark image build --binary-only`` builds something for it."""
        ...

    def claims(self, spec: TargetSpec) -> bool:
        """Whether ``spec`` runs on this target (the registry asks each in turn)."""
        ...

    def offers(self, ability: type) -> bool:
        """Whether its clusters may offer ``ability`` (one of :attr:`abilities`)."""
        ...

    def effective_settings(self, settings: Mapping[str, str]) -> dict[str, str]: ...

    def package_context(self, spec: TargetSpec) -> PackageContext | None:
        """What fault packages get on its cluster, known before it starts; None when only the
        running cluster knows its nodes (then packages are checked when they are planned)."""
        ...

    def check(self, spec: TargetSpec) -> None:
        """Raise :class:`SpecRefused` for what ``spec`` asks and this system cannot do."""
        ...

    def check_ready(self, spec: TargetSpec) -> None:
        """Raise :class:`SpecRefused` when this machine cannot start the system yet."""
        ...

    def node_roles(self, spec: TargetSpec) -> dict[str, str]:
        """Node name -> role (``broker``, ``controller``, ``postgresql``), as far as known before
        the cluster starts (an external cluster's from its inventory, if any)."""
        ...

    def replica_nodes(self, spec: TargetSpec) -> list[str]:
        """``test.json``'s ``nodes``: the nodes whose replica a run dumps."""
        ...

    def replica_evidence(self, spec: TargetSpec) -> str:
        """``test.json``'s ``replica_evidence`` (:mod:`testbed.record.replicas`)."""
        ...

    def cluster(
        self, spec: TargetSpec, run_dir: RunDir, problems: list[str]
    ) -> AbstractContextManager[Cluster]:
        """Start the system; yield it running; collect its node logs into ``run_dir`` (a failure is
        appended to ``problems``) and tear it down on every path out."""
        ...

    def probe(self, spec: TargetSpec) -> str | None:
        """Before the run: None when the system can be tested, else the one-line reason why not;
        :class:`SpecRefused` when the spec does not fit it."""
        ...

    def unavailable(self, spec: TargetSpec, error: Exception) -> str | None:
        """The one-line reason when ``error``, raised by a run, means the system could not be set
        up for testing (verdict unknown, no traceback); None: a bug, to be raised."""
        ...

    def check_image_options(self, *, base_image: str | None) -> None:
        """Raise :class:`SpecRefused` for an image build option this target's image cannot take."""
        ...

    def build_image(
        self,
        client: docker.DockerClient,
        *,
        base_image: str | None,
        apt_sources: Path | None,
        force: bool,
        progress: Progress,
    ) -> str:
        """Build (or reuse) the node image; its tag."""
        ...

    def build_binary(self, progress: Progress) -> Path:
        """Build (or find) the binary built outside the image (:attr:`builds_binary`); its path."""
        ...


class BaseTarget:
    """The answers most targets share: claimed by name, no pre-start package context, nothing to
    probe, ready once checked, no binary of its own.  A target subclasses it and overrides."""

    name = ""
    abilities: frozenset[type] = frozenset()
    event_logs = False
    sizes_cluster = True
    builds_binary = False

    def claims(self, spec: TargetSpec) -> bool:
        return spec.target == self.name

    def offers(self, ability: type) -> bool:
        return ability in self.abilities

    def package_context(self, spec: TargetSpec) -> PackageContext | None:
        return None

    def check_ready(self, spec: TargetSpec) -> None:
        return None

    def probe(self, spec: TargetSpec) -> str | None:
        return None

    def unavailable(self, spec: TargetSpec, error: Exception) -> str | None:
        return None

    def check_image_options(self, *, base_image: str | None) -> None:
        return None

    def build_binary(self, progress: Progress) -> Path:
        raise SpecRefused(f"the {self.name} target has no binary built outside its image")

    def __repr__(self) -> str:
        return f"<target {self.name}>"


def wants_request_proxies(spec: TargetSpec) -> bool:
    """Whether ``spec``'s cluster needs a request proxy in front of each broker: only when a fault
    it may inject (drawn, in a package, or a scenario step) acts through one -- the proxy is a hop
    every request pays for."""
    faults = spec.nemesis.injected_faults() | spec.scenario_faults()
    return any(REQUEST_PROXY in kind_of(fault).needs for fault in faults if fault in REGISTRY)


def collect_logs(cluster: Cluster, nodes: list[str], run_dir: RunDir, problems: list[str]) -> None:
    """Fetch every node's logs into ``nodes/<node>/``; a node that fails is a problem, not an abort
    (a cluster without :class:`~testbed.cluster.protocol.LogFiles` has none to fetch)."""
    if not isinstance(cluster, LogFiles):
        return
    for node in nodes:
        try:
            cluster.collect_logs(node, run_dir.node_dir(node))
        except Exception as error:
            problems.append(f"logs of {node} not collected: {error}")


def docker_unreachable() -> str | None:
    """Why no run can start a container (no Docker engine answers at ``DOCKER_HOST``, named as
    ``tidemark cluster ls`` names it), or None when one answers.  Asked once, before a campaign
    writes anything, so that an unreachable engine is one line rather than a traceback per run
    and an empty run directory."""
    from testbed.nodes.docker_remote import DockerUnavailable, connect_docker

    try:
        connect_docker(timeout=10).close()
    except DockerUnavailable as error:
        return " ".join(str(error).split())
    return None


class ContainerTarget(BaseTarget):
    """A target whose clusters are Docker containers: it cannot be tested while no Docker engine
    answers, which its probe says in one line before any run directory exists."""

    def probe(self, spec: TargetSpec) -> str | None:
        return docker_unreachable()
