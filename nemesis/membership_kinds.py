"""The membership faults' declarations (:mod:`nemesis.membership`), kept apart so that
:mod:`nemesis.fault_kinds` ends its tuple of kinds with them rather than growing past its size.

``decommission`` takes one or more brokers' replicas away by partition reassignment (KIP-455)
under load; ``recommission`` moves them back, waits for the moves, and elects the preferred
leaders.  Both go through a real admin client to the cluster's controller, so they need a cluster
with a controller of its own that implements reassignment (the bundled broker's; Kafka's too).
"""

from __future__ import annotations

from typing import Final

from nemesis.fault_declaration import (
    CONTROLLER_NODE,
    NODE_FAULT_VALUE,
    FaultKind,
    every_broker_heal,
)

DECOMMISSION: Final = "decommission"
RECOMMISSION: Final = "recommission"
MEMBERSHIP_NEEDS: Final = frozenset({CONTROLLER_NODE})

MEMBERSHIP_KINDS: Final[tuple[FaultKind, ...]] = (
    FaultKind(
        DECOMMISSION,
        "every replica the brokers hold (non-internal topics) is reassigned away with"
        " AlterPartitionReassignments -- to a broker outside the replica set in its place, else"
        " dropped -- while the workload runs; the brokers stay up (nemesis.membership)",
        heal=RECOMMISSION,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#f4a261",
        needs=MEMBERSHIP_NEEDS,
    ),
    every_broker_heal(
        RECOMMISSION,
        "the partitions moved off the brokers get their original replicas back, the heal waits for"
        " the moves to complete (bounded), then elects their preferred leaders (ElectLeaders)"
        " (heal of decommission; no node: every broker)",
        MEMBERSHIP_NEEDS,
    ),
)
"""The membership kinds, each fault followed by its heal."""
