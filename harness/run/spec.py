"""A test is data: :class:`TestSpec`, typed and serialisable (it is ``test.json``).

Everything that decides what a run does is in the spec -- the workload, the nemesis,
the broker settings, node count, time limits, seed, scenario -- so a stored run can be
re-run exactly and a campaign is just a list of specs.  ``from_dict`` checks every
field and names the bad one; unknown fields are errors, not silently ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nemesis.spec import NemesisSpec
from workloads.queue import QueueSpec

SPEC_SCHEMA_VERSION = 1


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
    power_loss_filesystem: bool = False
    """Mount every broker's data directory through the lazy filesystem (needed by power-loss)."""
    transport: str = "docker"
    """How the harness reaches the nodes: ``docker`` (exec) or ``ssh`` (the containers' sshd)."""
    bootstrap: str | None = None
    """An external Kafka-compatible cluster (``--bootstrap``); None runs the bundled broker in Docker."""
    inventory: str | None = None
    """With ``bootstrap``: an SSH inventory file, so the nemesis can reach the nodes."""

    __test__ = False  # not a pytest test class, despite the name

    def __post_init__(self) -> None:
        problems = []
        if not self.name.strip():
            problems.append("name must not be empty")
        if self.node_count < 1:
            problems.append("node_count must be >= 1")
        if self.workload.replication_factor > self.node_count and self.bootstrap is None:
            problems.append(
                f"workload.replication_factor {self.workload.replication_factor} > node_count {self.node_count}"
            )
        for field in ("time_limit", "recovery_timeout", "drain_timeout"):
            if getattr(self, field) <= 0:
                problems.append(f"{field} must be > 0")
        if self.transport not in ("docker", "ssh"):
            problems.append(f"transport must be docker or ssh, not {self.transport!r}")
        if "power-loss" in self.nemesis.faults and not self.power_loss_filesystem:
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
            "power_loss_filesystem": self.power_loss_filesystem,
            "transport": self.transport,
            "bootstrap": self.bootstrap,
            "inventory": self.inventory,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestSpec:
        data = dict(data)
        version = data.pop("schema_version", SPEC_SCHEMA_VERSION)
        if version != SPEC_SCHEMA_VERSION:
            raise SpecError(f"schema_version {version!r}: this Tidemark reads version {SPEC_SCHEMA_VERSION}")
        for derived in ("broker_config", "nodes", "versions", "run_id"):  # written by the runner
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

    def broker_config(self) -> dict[str, str]:
        """The settings the checker's expectations read (workload acks included)."""
        return dict(self.settings)
