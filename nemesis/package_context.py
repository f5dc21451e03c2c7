"""What a fault package is planned from, and the small pieces every planner shares.

A package (:mod:`nemesis.packages`) is planned as scenario step tables from a
``random.Random`` and a :class:`PackageContext`; :class:`PackageError` says why a package
cannot apply to a cluster.  Here so that the planners of :mod:`nemesis.packages` and
:mod:`nemesis.bug_packages` share them without importing each other.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from nemesis.request_kinds import (
    REQUEST_DELAY,
    REQUEST_DELAY_MS_DRAWN,
    REQUEST_REORDER,
    REQUEST_REORDER_MS_DRAWN,
)

Step = dict[str, Any]


class PackageError(ValueError):
    """A package that cannot be planned for this cluster; the message says why."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplicationRules:
    """The broker settings in force that decide what a package's cuts and crashes do to an ISR,
    each where known (None: another system, or an external cluster the run did not ``--set`` it
    for).  One value from the test spec (:meth:`harness.run.spec.TestSpec.replication_rules`)
    through the nemesis's config to every package's context: a new rule is added here alone.
    Keyword-only: five optional fields of three types read wrongly by position."""

    isr_lag_seconds: float | None = None
    """How long a follower may lag before its leader drops it from the ISR
    (``replica.lag.time.max.ms``), where known: a package that needs the ISR to shrink outlasts it."""
    unclean_restart_keeps_isr: bool | None = None
    """Whether a broker back from a crash keeps its ISR memberships, where known: true for the
    bundled broker with ``eligible.leader.replicas.enable=false`` (Kafka before KIP-966), false
    with it on (a crashed broker may have lost what it acknowledged, so it leaves every ISR).  A
    package that needs a bounced replica to stay in the ISR stops it cleanly where a crash would
    take it out."""
    unclean_election: bool | None = None
    """Whether an out-of-ISR replica may be elected (``unclean.leader.election.enable``), where
    known: a package whose elections are all unclean plans them only where they may happen."""
    eligible_leader_replicas: bool | None = None
    """Whether Eligible Leader Replicas (KIP-966) are on, where known: a replica that leaves an ISR
    already at ``min.insync.replicas`` stays electable (:meth:`cut_follower_electable`).  Its own
    fact, though the bundled broker's one switch also decides :attr:`unclean_restart_keeps_isr`:
    another system may take a crashed broker out of every ISR without an ELR."""
    min_insync_replicas: int | None = None
    """``min.insync.replicas`` in force, where known."""

    def cut_follower_electable(self) -> bool | None:
        """Whether a follower cut off from its leader until it left the ISR (``{L, F}`` shrunk to
        ``{L}``) may still be elected once the leader dies; None where the settings are not known.

        Yes with unclean elections, and with Eligible Leader Replicas where ``min.insync.replicas``
        is at least 2: the shrink takes the ISR below it, so F joins the ELR.  (The zombie
        package's third replica, out of the ISR too, is fenced the whole time, and a controller
        elects no fenced replica: F is the one elected.)  Otherwise a correct controller elects
        nobody: a package that awaits F as leader after such a cut stalls at that wait (every
        ``zombie-fetch-across-epochs`` draw did, 2026-12-04: 7 of 7 in KIP-966's hunt mode, ELR
        off and a 3-second lag; 3 of 3 with the bundled broker's defaults, ELR on, min ISR 1 and a
        5-second lag).
        """
        if self.unclean_election:
            return True
        elr, min_isr = self.eligible_leader_replicas, self.min_insync_replicas
        if elr and min_isr is not None and min_isr >= 2:
            return True
        if self.unclean_election is False and (elr is False or (min_isr is not None and min_isr < 2)):
            return False
        return None


@dataclasses.dataclass(frozen=True)
class PackageContext:
    """What a package may use: the brokers, the workload's partitions and replication factor,
    and whether power loss (the lazy filesystem) and metadata delay (a controller node) exist."""

    brokers: tuple[str, ...]
    partitions: int
    replication_factor: int
    power_loss: bool = False
    metadata_delay: bool = False
    controller_crash: bool = False
    """The controller node runs a controller process the nemesis may kill (``controller-kill``)."""
    quiet_seconds: float = 10.0
    markers: bool = False
    """The workload sends markers (``produce`` steps): packages that need writes to reach a new
    leader at once plan them only then."""
    rules: ReplicationRules = dataclasses.field(default_factory=ReplicationRules)
    """The broker settings that decide what the package's cuts and crashes do to an ISR."""
    client_crash: bool = False
    """The workload's producers run in processes the nemesis may kill (``client-crash`` steps,
    :mod:`nemesis.client_crash`)."""
    consumer_crash: bool = False
    """The workload's consumer group has members in processes the nemesis may kill
    (``consumer-crash`` steps whose victim was a member of the group, ``leader-of:offsets``)."""
    send_rate: float | None = None
    """Records per second the workload's producers send, where the spec fixes it; None where it
    does not (as fast as acknowledgements allow, or transactions of a drawn number of sends).  A
    package that slows a link sizes it from this: a fixed rate is a trickle beside one workload's
    replication stream and a flood beside another's."""


def sleep_step(rng: random.Random, low: float, high: float, why: str) -> Step:
    return {"sleep": round(rng.uniform(low, high), 2), "why": why}


def slow_path_step(rng: random.Random, nodes: list[str]) -> Step:
    """A slow client path on ``nodes``, as often one as the other: ``request-delay`` (every request
    waits the same) or ``request-reorder`` (each its own wait, so requests on different connections
    overtake one another), with a delay its schedule draws."""
    kind, drawn = rng.choice(
        ((REQUEST_DELAY, REQUEST_DELAY_MS_DRAWN), (REQUEST_REORDER, REQUEST_REORDER_MS_DRAWN))
    )
    return {"fault": kind, "nodes": nodes, "delay_ms": rng.choice(drawn)}


def leaves_isr_timeout(context: PackageContext) -> int:
    """Seconds a ``not-in-isr`` wait gives a cut-off follower to leave the ISR: the lag window where
    known, plus 30 s for the leader's check and the controller's commit; at least 40."""
    return max(40, round(context.rules.isr_lag_seconds or 0) + 30)


def partition_of(rng: random.Random, context: PackageContext) -> int:
    return rng.randrange(context.partitions)


def need_three_replicas(name: str, context: PackageContext) -> None:
    if context.replication_factor < 3:
        raise PackageError(f"{name} needs a replication factor of at least 3")
