"""What the nemesis plans of client crashes, all pure: the ``client-crash`` (producers) and
``consumer-crash`` (consumers) kinds' declarations and the ``client-crash-leader-crash`` and
``consumer-crash-coordinator-crash`` packages.

Apart from the mechanism (:mod:`nemesis.client_crash`, which says what the kind does and why)
because the registry (:mod:`nemesis.fault_kinds`) lists the kind and the packages
(:mod:`nemesis.packages`) list the package, and both are imported by the plan the mechanism
imports.

``client-crash-leader-crash``: a producer process is killed mid-call, and within 0-2 s the leader
of a partition is killed too, so the dead producer's last batches -- on the leader only, perhaps,
and part of a transaction nobody will end -- meet an election: the new leader must know the dead
producer's state from the log (its sequences, its open transaction), the coordinator must abort
the transaction through whichever leader holds the partition by then, and the successor's
``init_transactions`` must fence the dead one across the move.  In half the draws the successor
is killed as well while the new leader is still fresh.  Needs the workload's client processes
(:attr:`nemesis.package_context.PackageContext.client_crash`) and two replicas.

``consumer-crash-coordinator-crash``: a member of the workload's consumer group is killed
mid-poll -- it never leaves the group, only its session can end it -- and within 0-2 s the
broker leading the group's ``__consumer_offsets`` partition, its group coordinator, is killed
too.  The coordinator that takes over loads the group from that partition: it must still know
the dead member and expire it by a session timer of its own, hand the dead member's partitions to
the living (the rebalance must not wait on the dead for ever), and serve every offset committed
before the move, so that the successors resume where the group committed (a lost commit re-reads,
a commit from the future skips).  Needs group members in processes
(:attr:`nemesis.package_context.PackageContext.consumer_crash`) and two replicas of the offsets
topic.
"""

from __future__ import annotations

import random
from typing import Final

from nemesis.fault_declaration import FaultKind, NoHeal, Param
from nemesis.package_context import PackageContext, PackageError, Step, partition_of, sleep_step

CLIENT_CRASH: Final = "client-crash"
CRASH_PICKS: Final[tuple[int, ...]] = tuple(range(60))
"""The victims a schedule's ``client-crash`` draws from (taken modulo the running client processes,
in start order): 60 divides evenly by every count up to 6, so each of up to six clients is as
likely to die."""


def _crash_kind(name: str, role: str, what: str, colour: str) -> FaultKind:
    """A crash kind of the workload's ``role`` processes: one shape, one op, one drawn ``pick``."""
    return FaultKind(
        name,
        f"SIGKILL one of the workload's {role} processes (--client-processes) mid-call: {what}"
        " (nemesis.client_crash)",
        heal=NoHeal(f"the workload's thread starts the dead {role}'s successor itself at its next op"),
        drawn_as="workload",
        nodes="none",
        op_value='{"pick": 12} (+ "killed": {"process", "pid", "client", "in_flight", "interrupted"} on completion)',
        colour=colour,
        params=(Param("pick", False, f"which running {role} process, modulo their count (default 0)"),),
        drawn=(("pick", CRASH_PICKS),),
    )


CLIENT_CRASH_KIND: Final = _crash_kind(
    CLIENT_CRASH,
    "producer",
    "its op ends info (a transaction whose commit was never asked for: fail), its thread goes on as"
    " a fresh process with a new client",
    "#9d0208",
)
CONSUMER_CRASH: Final = "consumer-crash"
CONSUMER_CRASH_KIND: Final = _crash_kind(
    CONSUMER_CRASH,
    "consumer",
    "a poll ends info; a group member dies without leaving, so its coordinator must expire its"
    " session, and its successor joins as a new member",
    "#e85d04",
)
CRASH_ROLES: Final[dict[str, str]] = {CLIENT_CRASH: "producer", CONSUMER_CRASH: "consumer"}
"""Each client-crash kind and the role of the client processes it kills
(:data:`workloads.client_host.ROLES` names the same two)."""

CLIENT_CRASH_LEADER_CRASH: Final = "client-crash-leader-crash"


def client_crash_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    """The package's steps (module docstring)."""
    if not context.client_crash:
        raise PackageError(
            f"{CLIENT_CRASH_LEADER_CRASH} needs the workload's clients in processes (--client-processes)"
        )
    if context.replication_factor < 2:
        raise PackageError(f"{CLIENT_CRASH_LEADER_CRASH} needs a replication factor of at least 2")
    p = partition_of(rng, context)
    steps: list[Step] = [
        {"bind": {"L": f"leader-of:{p}"}},
        {"fault": CLIENT_CRASH, "pick": rng.choice(CRASH_PICKS)},
        sleep_step(rng, 0.0, 2.0, "the dead producer's last batches and open transaction meet the crash"),
        {"fault": "kill", "node": "L"},
        {"wait": "leader-is-not", "node": "L", "timeout": 30},
    ]
    if rng.random() < 0.5:
        steps.append({"fault": CLIENT_CRASH, "pick": rng.choice(CRASH_PICKS)})
    return [*steps, {"fault": "start", "node": "L"}, {"wait": "answers", "node": "L", "timeout": 30}]


CONSUMER_CRASH_COORDINATOR_CRASH: Final = "consumer-crash-coordinator-crash"


def consumer_crash_coordinator_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    """The package's steps (module docstring)."""
    if not context.consumer_crash:
        raise PackageError(
            f"{CONSUMER_CRASH_COORDINATOR_CRASH} needs the workload's group members in processes"
            " (--client-processes with --consume-via subscribe)"
        )
    if context.replication_factor < 2:
        raise PackageError(f"{CONSUMER_CRASH_COORDINATOR_CRASH} needs a replication factor of at least 2")
    steps: list[Step] = [
        {"bind": {"G": "leader-of:offsets"}},
        {"fault": CONSUMER_CRASH, "pick": rng.choice(CRASH_PICKS)},
        sleep_step(rng, 0.0, 2.0, "the dead member's session is still open when its coordinator dies"),
        {"fault": "kill", "node": "G"},
        {"wait": "leader-is-not", "node": "G", "partition": "offsets", "timeout": 30},
    ]
    if rng.random() < 0.5:
        steps.append({"fault": CONSUMER_CRASH, "pick": rng.choice(CRASH_PICKS)})
    return [*steps, {"fault": "start", "node": "G"}, {"wait": "answers", "node": "G", "timeout": 30}]


CLIENT_CRASH_PACKAGES: Final = {
    CLIENT_CRASH_LEADER_CRASH: client_crash_leader_crash,
    CONSUMER_CRASH_COORDINATOR_CRASH: consumer_crash_coordinator_crash,
}
"""The packages built on client crashes and their planners (:data:`nemesis.packages.PLANNERS` lists them)."""
