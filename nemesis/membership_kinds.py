"""The membership faults' declarations (:mod:`nemesis.membership`), kept apart so that
:mod:`nemesis.fault_kinds` ends its tuple of kinds with them rather than growing past its size.

``decommission`` takes one or more brokers' replicas away by partition reassignment (KIP-455)
under load; ``recommission`` moves them back, waits for the moves, and elects the preferred
leaders.  ``elect-preferred`` is that election alone: the leaderships whose preferred replica is
the broker move back to it while their current leaders are alive and serving (what Kafka's
``auto.leader.rebalance.enable`` does every few minutes, and operators after a rolling restart);
it leaves nothing to heal.  All three go through a real admin client to the cluster's controller,
so they need a cluster with a controller of its own that implements reassignment and elections
(the bundled broker's; Kafka's too).
"""

from __future__ import annotations

from typing import Final

from nemesis.fault_declaration import (
    CONTROLLER_NODE,
    NODE_FAULT_VALUE,
    FaultKind,
    NoHeal,
    every_broker_heal,
)

DECOMMISSION: Final = "decommission"
RECOMMISSION: Final = "recommission"
ELECT_PREFERRED: Final = "elect-preferred"
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
    FaultKind(
        ELECT_PREFERRED,
        "a preferred-leader election (ElectLeaders, PREFERRED) of every partition whose first replica"
        " is the broker, through the controller: its leaderships move back to it from the live leaders"
        " that hold them, under load -- Kafka's auto leader rebalance (nemesis.membership); a replica"
        " not in the ISR, or already leading, is left as it is",
        heal=NoHeal("a leadership moved to its preferred replica is where the cluster means it to be"),
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#2a9d8f",
        needs=MEMBERSHIP_NEEDS,
    ),
)
"""The membership kinds, each fault followed by its heal (``elect-preferred`` has none)."""
