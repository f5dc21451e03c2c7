"""What a fault kind declares, and the abilities it may need: the shape of :mod:`nemesis.fault_kinds`.

:mod:`nemesis.fault_kinds` says what each field means and holds every kind; this module holds only
the types and the names of the abilities, so the registry of kinds and the modules that check a
target's abilities share one spelling without importing the whole registry.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

OTHER_COLOUR: Final = "#6e7781"
"""The report's colour for kinds without one of their own (heals, metadata delay, churn)."""

NODE_CONTROL: Final = "node-control"
"""The target's nodes can be signalled, started and firewalled (:class:`testbed.cluster.protocol.NodeControl`)."""
POWER_LOSS_ABILITY: Final = "power-loss"
"""The brokers' data directories are on the lazy filesystem -- with a controller process, its metadata
directory too (:class:`testbed.cluster.protocol.PowerLoss`)."""
DISK_FAULTS_ABILITY: Final = "disk-faults"
"""The lazy filesystem under the data directories takes disk-fault rules (:class:`testbed.cluster.protocol.DiskFaults`)."""
CONTROLLER_NODE: Final = "controller-node"
"""The cluster's metadata comes from a controller node of its own (the bundled broker's)."""
CONTROLLER_PROCESS: Final = "controller-process"
"""The controller node runs a controller process the nemesis may kill and start again
(:class:`testbed.cluster.protocol.ControllerProcess`: the bundled broker's, not tansu's PostgreSQL)."""
CONSUMER_GROUP: Final = "consumer-group"
"""The workload runs group consumers the nemesis may replace (:class:`nemesis.consumer_churn.ConsumerChurn`)."""
REQUEST_PROXY: Final = "request-proxy"
"""Each broker's clients reach it through a request proxy (:class:`nemesis.request_faults.RequestProxies`)."""
FAKE_CLOCK: Final = "fake-clock"
"""The brokers run under libfaketime, their wall clocks movable (:class:`testbed.cluster.protocol.ClockControl`)."""
ABILITIES: Final[frozenset[str]] = frozenset(
    {
        NODE_CONTROL,
        POWER_LOSS_ABILITY,
        DISK_FAULTS_ABILITY,
        CONTROLLER_NODE,
        CONTROLLER_PROCESS,
        CONSUMER_GROUP,
        REQUEST_PROXY,
        FAKE_CLOCK,
    }
)
"""Every ability a fault kind may need, by the name a target (or workload) answers to."""

DrawnAs = Literal["node-target", "partition-shape", "controller", "workload", "never"]
NodeUse = Literal["required", "optional", "none"]
"""A scenario step's ``node``/``nodes``: must be given, may be omitted (every broker / none), or not taken."""


@dataclasses.dataclass(frozen=True)
class NoHeal:
    """An explicit "nothing heals this", with the reason (a kind must say one or the other)."""

    why: str


@dataclasses.dataclass(frozen=True)
class Param:
    """A scenario step key a fault kind takes besides ``fault``, ``node`` and ``nodes``."""

    name: str
    required: bool
    doc: str


@dataclasses.dataclass(frozen=True)
class FaultKind:
    """One fault or heal kind (see the module docstring for each field)."""

    name: str
    doc: str
    heal: str | NoHeal
    drawn_as: DrawnAs
    nodes: NodeUse
    op_value: str
    colour: str
    params: tuple[Param, ...] = ()
    needs: frozenset[str] = frozenset()
    drawn: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Per drawn parameter (one of ``params``), its choices."""
    on_controller: bool = False
    """A scenario step may name the controller node as well as brokers (a slow link of the
    controller's own egress: the metadata it sends arrives late); drawn, the kind stays on brokers."""

    @property
    def heal_name(self) -> str | None:
        """The ``f`` of the op that heals this kind, or None (:class:`NoHeal`)."""
        return None if isinstance(self.heal, NoHeal) else self.heal

    def takes(self, param: str) -> bool:
        return any(declared.name == param for declared in self.params)


IS_A_HEAL = NoHeal("it is a heal")


ANNOUNCE = Param("announce", False, "false: recorded as unannounced, no fault window for the liveness checks")
NODES_VALUE = '{"nodes": [...]}'
NODE_FAULT_VALUE = '{"nodes": [...], "target": "minority"} (+ "leader_of" when it followed a leader)'


def every_broker_heal(name: str, doc: str, needs: frozenset[str] = frozenset({NODE_CONTROL})) -> FaultKind:
    """A heal of a node fault that, named without nodes, heals every broker (the usual heal's shape)."""
    return FaultKind(
        name,
        doc,
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="optional",
        op_value=NODES_VALUE,
        colour=OTHER_COLOUR,
        needs=needs,
    )
