"""The controller's crash as fault kinds, kept apart so that :mod:`nemesis.fault_kinds` ends its
tuple of kinds with them rather than growing past its size.

``controller-kill`` SIGKILLs the cluster's controller process; ``controller-start`` starts it
again, and it loads its metadata from its disk (the bundled controller fsyncs every change
before it publishes it).  Meanwhile no leader can be elected and no ISR change committed: the
brokers keep serving with the metadata they last learnt, and must neither lose what they
acknowledged nor trust a stale leadership once the controller is back.  Kafka's own system tests
bounce the controller under load -- so does ``--nemesis controller-kill``, drawn like any single
fault (the schedule names the controller node; :func:`nemesis.plan.check_plan` refuses it on a
cluster without one, :func:`harness.targets.registry.check_spec` on a target whose controller is
no process the harness controls); the nightly hunt's ``whole-cluster-crash`` kills it *with*
every broker (:mod:`nemesis.whole_cluster_plan`), the datacenter-wide outage of issue 35.

``controller-power-loss`` is the controller node's power loss: the controller SIGKILLed, then every
write to its metadata directory (on the lazy filesystem when the run mounts it, as it does for any
power loss) that it had not fsynced dropped; ``controller-start`` heals it too.  A controller that
publishes a version before it is durable -- a missing fsync of the file or of the directory it was
renamed in -- comes back with an older one (``metadata-rollback``, the controller log's check), which
a plain kill cannot show: the page cache survives a kill.  ``whole-cluster-crash`` powers the
controller off with the brokers in its power-off draws that take the controller along.

All three take no node in a scenario: they act on the one controller node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from nemesis.fault_declaration import (
    CONTROLLER_PROCESS,
    IS_A_HEAL,
    NODE_CONTROL,
    NODES_VALUE,
    OTHER_COLOUR,
    POWER_LOSS_ABILITY,
    FaultKind,
)

CONTROLLER_KILL: Final = "controller-kill"
CONTROLLER_POWER_LOSS: Final = "controller-power-loss"
CONTROLLER_START: Final = "controller-start"
CONTROLLER_NEEDS: Final = frozenset({NODE_CONTROL, CONTROLLER_PROCESS})

CONTROLLER_KINDS: Final[tuple[FaultKind, ...]] = (
    FaultKind(
        CONTROLLER_KILL,
        "SIGKILL the controller process on the controller node; ok once it is dead (no node: the"
        " controller is one): no election or ISR change until its start, the brokers serve on",
        heal=CONTROLLER_START,
        drawn_as="controller",
        nodes="none",
        op_value=NODES_VALUE,
        colour="#9d0208",
        needs=CONTROLLER_NEEDS,
    ),
    FaultKind(
        CONTROLLER_POWER_LOSS,
        "SIGKILL the controller process, then drop every write to its metadata directory it had not"
        " fsynced (the lazy filesystem); ok once both are done: it comes back with what its disk holds",
        heal=CONTROLLER_START,
        drawn_as="controller",
        nodes="none",
        op_value=NODES_VALUE,
        colour="#6a040f",
        needs=CONTROLLER_NEEDS | {POWER_LOSS_ABILITY},
    ),
    FaultKind(
        CONTROLLER_START,
        "start the controller process where it is not running; it reads its metadata back from its"
        " disk (heal of controller-kill and controller-power-loss)",
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="none",
        op_value=NODES_VALUE,
        colour=OTHER_COLOUR,
        needs=CONTROLLER_NEEDS,
    ),
)
"""The controller's kinds, the faults followed by their heal."""
CONTROLLER_KIND_NAMES: Final[frozenset[str]] = frozenset(kind.name for kind in CONTROLLER_KINDS)
"""The kinds that act on the controller node, not on brokers."""


def acted_on(
    kind: FaultKind, nodes: Sequence[str], brokers: Sequence[str], controller: str | None
) -> list[str]:
    """The nodes a node-shaped op of ``kind`` acts on, in the cluster's order: ``nodes``, each of
    them a broker -- or, for the controller's kinds, the controller node; for a kind that may act
    on the controller too (``on_controller``), either.  ValueError naming any other node (a step's
    own check said so first; this guards the mechanism's callers)."""
    if not nodes:
        raise ValueError("a node fault needs at least one node")
    if kind.name in CONTROLLER_KIND_NAMES:
        known, what = ([controller] if controller is not None else []), "the controller node"
    elif kind.on_controller and controller is not None:
        known, what = [*brokers, controller], "brokers or the controller node"
    else:
        known, what = list(brokers), "brokers"
    unknown = [node for node in nodes if node not in known]
    if unknown:
        raise ValueError(f"not {what} of this cluster: {', '.join(unknown)}")
    return [node for node in known if node in nodes]
