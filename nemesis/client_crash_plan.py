"""What the nemesis plans of client crashes, all pure: the ``client-crash`` kind's declaration and
the ``client-crash-leader-crash`` package.

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

CLIENT_CRASH_KIND: Final = FaultKind(
    CLIENT_CRASH,
    "SIGKILL one of the workload's client processes (--client-processes) mid-call: its op ends"
    " info (a transaction whose commit was never asked for: fail), its thread goes on as a fresh"
    " process with a new client (nemesis.client_crash)",
    heal=NoHeal("the workload's thread starts the dead client's successor itself at its next op"),
    drawn_as="workload",
    nodes="none",
    op_value='{"pick": 12} (+ "killed": {"process", "pid", "client", "in_flight", "interrupted"} on completion)',
    colour="#9d0208",
    params=(Param("pick", False, "which running client process, modulo their count (default 0)"),),
    drawn=(("pick", CRASH_PICKS),),
)

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
