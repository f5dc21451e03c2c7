"""A test is data: :class:`TestSpec`, typed and serialisable (it is ``test.json``).

Everything that decides what a run does is in the spec -- the workload, the nemesis,
the broker settings, node count, time limits, seed, and the scenario's whole definition
(not just its name or path) -- so a stored run can be re-run exactly from its own
directory (``tidemark rerun RUN_DIR``) and a campaign is just a list of specs.
``from_dict`` checks every field and names the bad one; unknown fields are errors, not
silently ignored.

``test.json`` also carries facts derived from the spec once, here, for every later
reader: ``broker_config`` (the effective settings: the bundled broker's defaults with
``--set`` applied, plus the workload's ``acks``) and ``scenario_faults`` (the fault kinds
injected through scenario steps: a scripted scenario's, and the nemesis's fault packages').  The checker's expectations, the reports and the scenario
verdicts read those fields and apply no defaults of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from harness.targets.base import Target
from harness.targets.registry import asked_target, find_target, target_of
from nemesis.client_crash_plan import CRASH_ROLES
from nemesis.fault_declaration import POWER_LOSS_ABILITY
from nemesis.fault_kinds import REGISTRY
from nemesis.package_context import ReplicationRules
from nemesis.packages import PackageContext
from nemesis.scenario import Scenario, ScenarioError, parse_scenario
from nemesis.spec import CONSUMER_CHURN, NemesisSpec
from testbed.cluster.targets import DEFAULT_TARGET as DEFAULT_TARGET
from testbed.cluster.targets import TARGETS as TARGETS
from testbed.record.rundir import SPEC_SCHEMA_VERSION
from workloads.queue import QueueSpec

DERIVED_FIELDS = ("broker_config", "scenario_faults", "nodes", "replica_evidence", "versions", "run_id")
"""Fields of ``test.json`` computed from the spec (here or by the runner); ``from_dict`` ignores them."""


_PARSED_SCENARIO = "_parsed_scenario"
"""Where :meth:`TestSpec.scenario_object` keeps the parsed scenario (an instance attribute)."""


class SpecError(ValueError):
    """A test spec field is missing, unknown or out of range; the message names it."""


@dataclasses.dataclass(frozen=True)
class TestSpec:
    name: str = "queue"
    topic: str = "tidemark"
    node_count: int = 3
    """Brokers (the controller is one more node)."""
    time_limit: float = 30.0
    """Seconds of main phase (workload + nemesis)."""
    recovery_timeout: float = 60.0
    """Seconds allowed for the cluster to recover (every partition led, ISR full) after healing."""
    drain_timeout: float = 60.0
    seed: int = 0
    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    """Broker and controller settings (Kafka key names), as ``--set`` gives them."""
    workload: QueueSpec = dataclasses.field(default_factory=QueueSpec)
    nemesis: NemesisSpec = dataclasses.field(default_factory=NemesisSpec)
    scenario: str | None = None
    """The scenario's name (display); what runs is :attr:`scenario_definition`."""
    scenario_definition: dict[str, Any] | None = None
    """The scenario file's content as parsed TOML (set by :meth:`with_scenario`)."""
    power_loss_filesystem: bool = False
    """Mount every broker's data directory through the lazy filesystem (needed by power-loss)."""
    transport: str = "docker"
    """How the harness reaches the nodes: ``docker`` (exec) or ``ssh`` (the containers' sshd)."""
    bootstrap: str | None = None
    """An external Kafka-compatible cluster (``--bootstrap``); None runs the bundled broker in Docker."""
    inventory: str | None = None
    """With ``bootstrap``: an SSH inventory file, so the nemesis can reach the nodes."""
    target: str = DEFAULT_TARGET
    """Which system runs in Docker (:data:`TARGETS`); ``node_count`` counts its brokers.  The
    system a run tests is :meth:`target_object` (with ``bootstrap``: the external cluster)."""

    __test__ = False  # not a pytest test class, despite the name

    def __post_init__(self) -> None:
        problems = []
        target = find_target(self)
        if not self.name.strip():
            problems.append("name must not be empty")
        if self.node_count < 1:
            problems.append("node_count must be >= 1")
        if self.workload.replication_factor > self.node_count and (target is None or target.sizes_cluster):
            problems.append(
                f"workload.replication_factor {self.workload.replication_factor} > node_count {self.node_count}"
            )
        for field in ("time_limit", "recovery_timeout", "drain_timeout"):
            if getattr(self, field) <= 0:
                problems.append(f"{field} must be > 0")
        if self.transport not in ("docker", "ssh"):
            problems.append(f"transport must be docker or ssh, not {self.transport!r}")
        if target is None:
            problems.append(f"target must be one of {', '.join(TARGETS)}, not {self.target!r}")
        if CONSUMER_CHURN in self.nemesis.faults and self.workload.consume_via != "subscribe":
            problems.append(
                f"--nemesis {CONSUMER_CHURN} needs --consume-via subscribe: it replaces a member of the "
                "workload's consumer group, and with --consume-via assign there is no group"
            )
        if CRASH_ROLES.keys() & set(self.nemesis.injected_faults()) and not self.workload.client_processes:
            object.__setattr__(self, "workload", dataclasses.replace(self.workload, client_processes=True))
        if needs_lazy_filesystem(self.nemesis.injected_faults()) and not self.power_loss_filesystem:
            object.__setattr__(self, "power_loss_filesystem", True)
        if problems:
            raise SpecError("; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SPEC_SCHEMA_VERSION,
            "name": self.name,
            "topic": self.topic,
            "node_count": self.node_count,
            "time_limit": self.time_limit,
            "recovery_timeout": self.recovery_timeout,
            "drain_timeout": self.drain_timeout,
            "seed": self.seed,
            "settings": dict(self.settings),
            "workload": self.workload.to_dict(),
            "nemesis": self.nemesis.to_dict(),
            "scenario": self.scenario,
            "scenario_definition": self.scenario_definition,
            "broker_config": self.broker_config(),
            "scenario_faults": sorted(self.scenario_faults()),
            "power_loss_filesystem": self.power_loss_filesystem,
            "transport": self.transport,
            "bootstrap": self.bootstrap,
            "inventory": self.inventory,
            "target": self.target,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestSpec:
        data = dict(data)
        version = data.pop("schema_version", SPEC_SCHEMA_VERSION)
        if version != SPEC_SCHEMA_VERSION:
            raise SpecError(f"schema_version {version!r}: this Tidemark reads version {SPEC_SCHEMA_VERSION}")
        for derived in DERIVED_FIELDS:
            data.pop(derived, None)
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown test spec fields: {', '.join(unknown)}")
        try:
            if "workload" in data:
                data["workload"] = QueueSpec.from_dict(data["workload"])
            if "nemesis" in data:
                data["nemesis"] = NemesisSpec.from_dict(data["nemesis"])
            if "settings" in data:
                data["settings"] = {str(k): str(v) for k, v in dict(data["settings"]).items()}
            return cls(**data)
        except (TypeError, ValueError) as error:
            raise SpecError(str(error)) from None

    def target_object(self) -> Target:
        """The system this spec runs on (:mod:`harness.targets`): what it checks, starts and offers."""
        return target_of(self)

    def effective_settings(self) -> dict[str, str]:
        """Settings in force, as the target defines them: the bundled broker's with its defaults
        applied, tansu's PostgreSQL's (``postgresql.*``), an external cluster's only what was asked
        (``--set``).  A key the target does not have raises ``ValueError``."""
        return self.target_object().effective_settings(self.settings)

    def broker_config(self) -> dict[str, str]:
        """``test.json``'s ``broker_config``: the effective settings plus the workload's acks."""
        return {**self.effective_settings(), "acks": self.workload.acks}

    def scenario_object(self) -> Scenario | None:
        """The embedded scenario, typed (None for a random-nemesis run).

        Parsed on the first call and held by this spec: the definition cannot change under a
        frozen spec (a changed one is a new spec, from :func:`dataclasses.replace`), and a run asks
        for it several times (target, faults, expectations, the runner).  The cache lives outside
        the dataclass fields, so it is neither compared, serialised nor copied by ``replace``."""
        if self.scenario_definition is None:
            return None
        cached = self.__dict__.get(_PARSED_SCENARIO)
        if isinstance(cached, Scenario):
            return cached
        try:
            parsed = parse_scenario(
                self.scenario_definition, f"scenario {self.scenario} (embedded in the test spec)"
            )
        except ScenarioError as error:
            raise SpecError(str(error)) from None
        object.__setattr__(self, _PARSED_SCENARIO, parsed)
        return parsed

    def scenario_faults(self) -> set[str]:
        """Fault kinds injected through scenario steps -- the scripted scenario's, and those
        the nemesis mix's fault packages may inject (the checker's expectations need them)."""
        scenario = self.scenario_object()
        scripted = (
            set() if scenario is None else {str(step["fault"]) for step in scenario.steps if "fault" in step}
        )
        packaged = set(self.nemesis.injected_faults()) - set(self.nemesis.faults)
        return scripted | packaged

    def with_scenario(self, scenario: Scenario) -> TestSpec:
        """This spec running ``scenario``: its set-up applied (``--set`` wins over the
        scenario's settings), its target (:func:`scenario_target`, this spec's target counting as
        asked unless it is the default) and its whole definition embedded."""
        workload = QueueSpec.from_dict({**self.workload.to_dict(), **scenario.workload})
        power_loss = needs_lazy_filesystem(str(step.get("fault")) for step in scenario.steps)
        asked = asked_target(self.target)
        return dataclasses.replace(
            self,
            target=scenario_target(asked, scenario, "target"),
            node_count=scenario.node_count,
            workload=workload,
            scenario=scenario.name,
            scenario_definition=scenario.definition,
            settings={**scenario.settings, **self.settings},
            power_loss_filesystem=self.power_loss_filesystem or power_loss,
        )

    def package_context(self) -> PackageContext | None:
        """What the nemesis's fault packages will be given on this spec's cluster, known before it
        starts (:meth:`harness.targets.base.Target.package_context`; None where only the running
        cluster knows its nodes: an external cluster, tansu)."""
        return self.target_object().package_context(self)

    def replication_rules(self) -> ReplicationRules:
        """The ISR rules in force, each None where it is not known (tansu, or an external cluster
        the run did not ``--set`` it for): ``replica.lag.time.max.ms`` in seconds, the bundled
        broker's ``eligible.leader.replicas.enable`` (and, negated, whether a broker back from a
        crash keeps its ISR memberships), ``unclean.leader.election.enable`` and
        ``min.insync.replicas``."""
        settings = self.effective_settings()

        def number(key: str) -> int | None:
            value = settings.get(key)
            return int(value) if value is not None and value.isdigit() else None

        def switch(key: str) -> bool | None:
            value = settings.get(key)
            return None if value is None else value == "true"

        lag_ms, elr = number("replica.lag.time.max.ms"), switch("eligible.leader.replicas.enable")
        return ReplicationRules(
            isr_lag_seconds=None if lag_ms is None else lag_ms / 1000,
            unclean_restart_keeps_isr=None if elr is None else not elr,
            eligible_leader_replicas=elr,
            unclean_election=switch("unclean.leader.election.enable"),
            min_insync_replicas=number("min.insync.replicas"),
        )

    def scenario_problems(self, results: Mapping[str, Any]) -> list[str] | None:
        """For a scenario run, what in ``results`` contradicts the scenario's expected verdict
        under this run's effective settings (``[]``: as expected); None for a random-nemesis run."""
        scenario = self.scenario_object()
        if scenario is None:
            return None
        expectation = scenario.expectation_for(self.effective_settings())
        if expectation is None:
            return ["no expectation written for these settings"]
        return expectation.problems(results)


def scenario_target(asked: str | None, scenario: Scenario, asked_by: str) -> str:
    """The target a run of ``scenario`` starts: ``asked`` (``--target``, a campaign's ``target``),
    else the scenario's own ``target``, else :data:`DEFAULT_TARGET`.

    SpecError, one line naming both (``asked_by`` says where ``asked`` came from, e.g.
    ``--target``), when ``asked`` and the scenario's target differ.
    """
    if asked is not None and scenario.target is not None and asked != scenario.target:
        raise SpecError(
            f"{asked_by} {asked} conflicts with scenario {scenario.name}'s target = "
            f'"{scenario.target}" ({scenario.source}): leave {asked_by} out, or give the same'
        )
    return asked or scenario.target or DEFAULT_TARGET


def needs_lazy_filesystem(faults: Iterable[str]) -> bool:
    """Whether one of ``faults`` needs the brokers' data directories on the lazy filesystem (the
    power-loss ability: ``power-loss`` itself, the disk faults), so the run mounts it unasked."""
    return any(fault in REGISTRY and POWER_LOSS_ABILITY in REGISTRY[fault].needs for fault in faults)
