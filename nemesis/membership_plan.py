"""The membership fault packages: ``decommission-leader-crash`` and ``lagging-preferred-election``.

``decommission-leader-crash``: a partition's leader decommissioned under load (its replicas
reassigned away), the new leader crashed in half the draws, the broker recommissioned.

The choreography aims at the reassignment's two switches.  Going away, the leader is replaced by
a broker outside the replica set where there is one (a newcomer that must catch up from nothing
and join the ISR before the old leader leaves; with as many brokers as replicas the set shrinks
instead), so the scenario waits until another broker leads -- the move completed.  In half the
draws the new leader is then killed and restarted: the ISR it led must hold everything
acknowledged, newcomer or not.  Coming back, the recommissioned broker's replica was deleted, so
it is the newcomer now, and the heal's preferred-leader election hands it the leadership only once
it is in sync.  A controller that removes the old replicas before the new ones caught up
(``bench/mutants/14-*``) elects an empty replica at one of the two switches.

``lagging-preferred-election``: a preferred-leader election asked for while the preferred replica
is alive -- it still heartbeats the controller -- but cut off from the leader and out of the ISR,
the leader and the rest of the ISR acknowledging what it never fetched.  Kafka's controller
elects a preferred replica only from the ISR (PREFERRED_LEADER_NOT_AVAILABLE otherwise), so nothing
moves; one that looks only at liveness (``bench/mutants/18-*``) hands the leadership to a log
short of acknowledged writes, which the old leader then truncates to.  The preferred replica is
first made a follower (killed, restarted, caught up): leading, it would need no election.

``recommission-late-metadata``: the race of a broker's return, widened.  A leader L is
decommissioned and a newcomer elected in its place (the reassignment's preferred replica); then L
comes back while the controller's links to every broker but L are slow (``slow-link`` on the
controller node towards them, :data:`METADATA_LINK_KBIT`).  Recommissioning makes L the first
replica again: when the newcomer's expansion adds L to the ISR, the controller completes the
reassignment, removes the newcomer and elects L -- and L hears it at once, the deposed newcomer
and the followers hundreds of milliseconds to seconds later.  In that gap the deposed leader must
keep its proposal's larger ISR (KIP-497's maximal ISR): one that drops it
(``bench/mutants/19-*``) acknowledges writes on its old ISR that L never had, and truncates them when
it learns it follows.  Without the slow link the gap is the few milliseconds between two metadata
sends (measured: 76 such depositions, 4-40 ms, in 8 minutes of plain decommission cycles, and the
mutant was not found); with it, 0.3-2.9 s, and the mutant was found in 1.2 minutes.  Two or three
returns a draw; needs a controller node, and is meant for a broker outside the replica set (the
newcomer): without one, L's departure shrinks the set and no newcomer is deposed.

Planned like the other packages (:mod:`nemesis.packages`, which registers it); needs a controller
node, which reassignments go through.
"""

from __future__ import annotations

import random

from nemesis.package_context import (
    PackageContext,
    PackageError,
    Step,
    leaves_isr_timeout,
    partition_of,
    sleep_step,
)
from nemesis.spec import DECOMMISSION_LEADER_CRASH, LAGGING_PREFERRED_ELECTION, RECOMMISSION_LATE_METADATA
from nemesis.steps import CONTROLLER

METADATA_LINK_KBIT = 32
"""The controller's rate towards the brokers that must learn late (``recommission-late-metadata``):
at 4 KB/s a metadata update of a few kilobytes takes about a second, and a heartbeat's answer
still fits, so no broker is fenced for it."""


def decommission_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.metadata_delay:  # the same fact: the cluster has a controller node of its own
        raise PackageError(f"{DECOMMISSION_LEADER_CRASH} needs a controller node")
    if context.replication_factor < 2 and len(context.brokers) < 2:
        raise PackageError(f"{DECOMMISSION_LEADER_CRASH} needs a second broker to move to")
    p = partition_of(rng, context)
    steps: list[Step] = [
        {"wait": "caught-up", "partition": p, "timeout": 40},
        {"bind": {"L": f"leader-of:{p}"}},
        {"fault": "decommission", "node": "L"},
        {"wait": "leader-is-not", "node": "L", "partition": p, "timeout": 60},
        sleep_step(rng, 0.0, 5.0, "the new leader serves the load a while before anything else"),
    ]
    if rng.random() < 0.5:
        steps += [
            {"bind": {"N": f"leader-of:{p}"}},
            {"fault": "kill", "node": "N"},
            sleep_step(rng, 1.0, 4.0, "the controller elects from the new replica set's ISR"),
            {"fault": "start", "node": "N"},
            {"wait": "answers", "node": "N", "timeout": 30},
        ]
    return [
        *steps,
        {"fault": "recommission", "node": "L"},
        {"wait": "in-isr", "node": "L", "partition": p, "timeout": 60},
    ]


def _need_controller_and_replicas(name: str, context: PackageContext) -> None:
    """PackageError unless there is a controller node (elections and reassignments go through it)
    and a second replica to hand a partition to."""
    if not context.metadata_delay:  # the same fact: the cluster has a controller node of its own
        raise PackageError(f"{name} needs a controller node")
    if context.replication_factor < 2:
        raise PackageError(f"{name} needs a replication factor of at least 2")


def lagging_preferred_election(rng: random.Random, context: PackageContext) -> list[Step]:
    _need_controller_and_replicas(LAGGING_PREFERRED_ELECTION, context)
    p = partition_of(rng, context)
    return [
        {"wait": "caught-up", "partition": p, "timeout": 40},
        {"bind": {"P": f"preferred-of:{p}"}},
        {"fault": "kill", "node": "P"},
        {"wait": "leader-is-not", "node": "P", "partition": p, "timeout": 30},
        {"fault": "start", "node": "P"},
        {"wait": "in-isr", "node": "P", "partition": p, "timeout": 60},
        {"bind": {"L": f"leader-of:{p}"}},
        {"fault": "partition", "grudge": {"L": ["P"], "P": ["L"]}, "kind": "leader-follower"},
        {"wait": "not-in-isr", "node": "P", "timeout": leaves_isr_timeout(context)},
        sleep_step(rng, 1.0, 4.0, "the leader and the rest of the ISR acknowledge what P never fetched"),
        {"fault": "elect-preferred", "node": "P"},
        sleep_step(
            rng, 1.0, 3.0, "an election from outside the ISR would have P lead, short of those writes"
        ),
        {"fault": "heal"},
        {"wait": "in-isr", "node": "P", "partition": p, "timeout": 60, "required": False},
    ]


def recommission_late_metadata(rng: random.Random, context: PackageContext) -> list[Step]:
    _need_controller_and_replicas(RECOMMISSION_LATE_METADATA, context)
    p = partition_of(rng, context)
    # L's departure replaces it by a newcomer, or shrinks the set where there is no broker outside it
    replicas = context.replication_factor - (len(context.brokers) <= context.replication_factor)
    followers = [f"F{index}" for index in range(1, replicas)]
    steps: list[Step] = [{"wait": "caught-up", "partition": p, "timeout": 40}]
    for _ in range(rng.randint(2, 3)):
        steps += [
            {"bind": {"L": f"leader-of:{p}"}},
            {"fault": "decommission", "node": "L"},
            {"wait": "leader-is-not", "node": "L", "partition": p, "timeout": 60},
            {"bind": {"X": f"preferred-of:{p}"}},
            {"fault": "elect-preferred", "node": "X"},
            {"wait": "leader-is", "node": "X", "partition": p, "timeout": 30, "required": False},
            sleep_step(rng, 0.5, 3.0, "the newcomer leads under load a while"),
            {
                "bind": {
                    "M": f"leader-of:{p}",
                    **{f: f"follower-of:{p}#{i}" for i, f in enumerate(followers, 1)},
                }
            },
            {
                "fault": "slow-link",
                "node": CONTROLLER,
                "peers": ["M", *followers],
                "rate_kbit": METADATA_LINK_KBIT,
            },
            {"fault": "recommission", "node": "L"},
            {"wait": "in-isr", "node": "L", "partition": p, "timeout": 60, "required": False},
            {"fault": "slow-link-heal", "node": CONTROLLER},
        ]
    return steps
