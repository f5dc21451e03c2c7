"""The ``decommission-leader-crash`` fault package: a partition's leader decommissioned under load
(its replicas reassigned away), the new leader crashed in half the draws, the broker recommissioned.

The choreography aims at the reassignment's two switches.  Going away, the leader is replaced by
a broker outside the replica set where there is one (a newcomer that must catch up from nothing
and join the ISR before the old leader leaves; with as many brokers as replicas the set shrinks
instead), so the scenario waits until another broker leads -- the move completed.  In half the
draws the new leader is then killed and restarted: the ISR it led must hold everything
acknowledged, newcomer or not.  Coming back, the recommissioned broker's replica was deleted, so
it is the newcomer now, and the heal's preferred-leader election hands it the leadership only once
it is in sync.  A controller that removes the old replicas before the new ones caught up
(``bench/mutants/14-*``) elects an empty replica at one of the two switches.

Planned like the other packages (:mod:`nemesis.packages`, which registers it); needs a controller
node, which reassignments go through.
"""

from __future__ import annotations

import random

from nemesis.package_context import PackageContext, PackageError, Step, partition_of, sleep_step
from nemesis.spec import DECOMMISSION_LEADER_CRASH


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
