"""Fault packages: seeded random choreographies of several faults, each a pure plan.

The random nemesis flips one fault on and off at a time, and many replication bugs need a
*sequence*: KIP-101's loss needs a follower restart followed, inside its re-fetch window, by a
leader crash; Jepsen's 2013 loss needs the leader cut off from its followers and then lost. A
package is such a choreography with its timing and targets drawn from a ``random.Random``, so a
run's packages follow from its seed like the rest of its schedule.

A package plans **scenario steps** -- the vocabulary of :mod:`nemesis.scenario` (``bind`` nodes
by role, ``fault``, ``wait`` on a condition, ``sleep`` with a ``why``, and ``produce`` a marker
where the workload sends them) -- so that what the
nemesis did is one format whether it was scripted or drawn: the mechanism runs the steps with
the scenario runner, every fault lands in the history as an op, and a failing run's packages can
be written back as a scenario file. Roles (``leader-of:P``, ``follower-of:P#N``) are resolved
when the step runs, from the freshest metadata; names are bound per package, so two packages
never share a binding.

Contract, tested for every package over many seeds: the steps parse as a scenario, and every
fault a package injects is healed by its own later steps (kill and power loss by ``start``,
pause by ``resume``, partition by ``heal``, metadata-delay by ``metadata-heal``). If a step
fails at run time (a wait times out), the mechanism heals what is still in effect.

Packages (:data:`nemesis.spec.PACKAGE_KINDS`):

* ``follower-restart-leader-crash`` -- KIP-101: restart a follower, then crash the leader within
  0-2 s; half the draws hold the window open by cutting the two apart while the follower restarts;
* ``leader-crash-storm`` -- 2-4 leaders killed in quick succession, each as soon as a successor
  leads, then all restarted; or (half the draws) the leadership sent back and forth 2-4 times
  between two replicas that each return alone while the other is down (fast failover, KIP-279);
* ``isolate-followers-lose-leader`` -- Jepsen 2013: the leader loses its followers (not the
  controller) long enough for the ISR to shrink, then it is killed; where the ISR lag is known
  and there is a controller node, half the draws cut it off from the controller too, past the
  lag, so the shrink it proposes is never answered while its clients still reach it (KIP-497's
  in-flight ISR);
* ``power-loss-follower-leader-crash`` -- a follower loses power (unsynced writes gone) and
  restarts, then the leader crashes (needs the lazy filesystem);
* ``metadata-delay-leader-moves`` -- a follower stops hearing the controller (a zombie) while the
  leader is killed and restarted; then it hears again (needs a controller node);
* ``rolling-restart`` -- every broker killed and restarted in turn, each time waiting until the
  partition is fully replicated again;
* ``overlapping-faults`` -- two different faults on different brokers whose windows overlap;
* ``stale-leader-lagging-joiner`` -- KAFKA-7128: a follower stops and falls far behind; the other
  follower restarts cut off from the leader (so its HW is stale) and becomes leader when the old
  one bounces; the far-behind follower returns and catches up with it, and then both others die;
* ``last-replica-standing`` -- KIP-966: the leader is cut off from its followers one at a time
  until the ISR is the leader alone, then it loses power and restarts (needs the lazy
  filesystem);
* ``zombie-fetch-across-epochs`` -- KIP-320: a follower stops hearing the controller and keeps
  fetching while the leadership moves away and back over two epochs (needs a controller node);
* ``quiet`` -- nothing for a while: recovery is tested too.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

from nemesis.spec import (
    FOLLOWER_RESTART_LEADER_CRASH,
    ISOLATE_FOLLOWERS_LOSE_LEADER,
    LAST_REPLICA_STANDING,
    LEADER_CRASH_STORM,
    METADATA_DELAY_LEADER_MOVES,
    OVERLAPPING_FAULTS,
    POWER_LOSS_FOLLOWER_LEADER_CRASH,
    QUIET,
    ROLLING_RESTART,
    STALE_LEADER_LAGGING_JOINER,
    ZOMBIE_FETCH_ACROSS_EPOCHS,
)
from nemesis.steps import PARTITION_WAITS

Step = dict[str, Any]


class PackageError(ValueError):
    """A package that cannot be planned for this cluster; the message says why."""


@dataclasses.dataclass(frozen=True)
class PackageContext:
    """What a package may use: the brokers, the workload's partitions and replication factor,
    and whether power loss (the lazy filesystem) and metadata delay (a controller node) exist."""

    brokers: tuple[str, ...]
    partitions: int
    replication_factor: int
    power_loss: bool = False
    metadata_delay: bool = False
    quiet_seconds: float = 10.0
    markers: bool = False
    """The workload sends markers (``produce`` steps): packages that need writes to reach a new
    leader at once plan them only then."""
    isr_lag_seconds: float | None = None
    """How long a follower may lag before its leader drops it from the ISR
    (``replica.lag.time.max.ms``), where known: a package that needs the ISR to shrink outlasts it."""


def _sleep(rng: random.Random, low: float, high: float, why: str) -> Step:
    return {"sleep": round(rng.uniform(low, high), 2), "why": why}


def _partition_of(rng: random.Random, context: PackageContext) -> int:
    return rng.randrange(context.partitions)


def follower_restart_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    p = _partition_of(rng, context)
    hold_window = rng.random() < 0.5
    steps: list[Step] = [
        {"bind": {"A": f"leader-of:{p}", "B": f"follower-of:{p}"}},
        {"fault": "kill", "node": "B"},
    ]
    if hold_window:
        steps.append({"fault": "partition", "grudge": {"A": ["B"], "B": ["A"]}, "kind": "leader-follower"})
    steps += [
        {"fault": "start", "node": "B"},
        {"wait": "answers", "node": "B", "timeout": 20},
        _sleep(rng, 0.0, 2.0, "the leader crashes inside the restarted follower's re-fetch window"),
        {"fault": "kill", "node": "A"},
        _sleep(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
    ]
    if hold_window:
        steps.append({"fault": "heal"})
    steps.append({"fault": "start", "node": "A"})
    return steps


def leader_crash_storm(rng: random.Random, context: PackageContext) -> list[Step]:
    """Leaders killed in quick succession.  Half the draws keep every crashed leader down (a
    storm: each failover lands on a replica that saw the last one); the other half restart the
    previous leader as the next one falls, so the leadership goes back and forth between two
    replicas that each come back alone while the other is down -- KIP-279's fast failover, where
    each election is unclean if the settings allow it (else the wait for it times out and the
    package heals)."""
    p = _partition_of(rng, context)
    if rng.random() < 0.5:
        return _ping_pong(rng, context, p)
    crashes = rng.randint(2, min(4, max(2, context.replication_factor)))
    steps: list[Step] = []
    names = []
    for number in range(1, crashes + 1):
        name = f"K{number}"
        names.append(name)
        steps += [
            {"bind": {name: f"leader-of:{p}"}},
            {"fault": "kill", "node": name},
            _sleep(rng, 0.0, 1.0, "the next crash follows the failover closely"),
        ]
        if number < crashes:
            steps.append({"wait": "leader-is-not", "node": name, "timeout": 20})
    steps.append({"fault": "start", "nodes": names})
    return steps


def _ping_pong(rng: random.Random, context: PackageContext, p: int) -> list[Step]:
    """The leadership back and forth between A and B, each returning alone (the other replicas
    down meanwhile), each new epoch given a marker where the workload sends them -- after a
    failover the workload's producers may still be backing off, and an epoch without a record
    leaves nothing to diverge."""
    others = [f"O{n}" for n in range(2, context.replication_factor)]
    binding = {
        "A": f"leader-of:{p}",
        "B": f"follower-of:{p}#1",
        **{o: f"follower-of:{p}#{o[1:]}" for o in others},
    }
    marker: list[Step] = [{"produce": "marker", "partition": p}] if context.markers else []
    steps: list[Step] = [{"bind": binding}]
    if others:
        steps.append({"fault": "kill", "nodes": others})
    steps += [
        {"fault": "kill", "node": "B"},
        {"wait": "not-in-isr", "node": "B", "timeout": 40},
        *marker,
        _sleep(rng, 0.5, 2.0, "the leader takes writes alone in its epoch"),
    ]
    falls, rises = "A", "B"
    for _ in range(rng.randint(2, 4)):
        steps += [
            {"fault": "kill", "node": falls},
            {"fault": "start", "node": rises},
            {"wait": "leader-is", "node": rises, "timeout": 20},
            *marker,
            _sleep(rng, 0.5, 2.0, "the returned replica takes writes alone in a new epoch"),
        ]
        falls, rises = rises, falls
    steps.append({"fault": "start", "node": rises})
    if others:
        steps.append({"fault": "start", "nodes": others})
    return steps


def isolate_followers_lose_leader(rng: random.Random, context: PackageContext) -> list[Step]:
    p = _partition_of(rng, context)
    followers = [f"F{n}" for n in range(1, context.replication_factor)]
    if not followers:
        raise PackageError("isolate-followers-lose-leader needs a replication factor of at least 2")
    binding = {"L": f"leader-of:{p}", **{name: f"follower-of:{p}#{n}" for n, name in enumerate(followers, 1)}}
    grudge: dict[str, list[str]] = {"L": followers, **{name: ["L"] for name in followers}}
    lag = context.isr_lag_seconds
    if lag is not None and context.metadata_delay and rng.random() < 0.5:
        # The leader loses the controller too, for longer than the ISR lag: the shrink it then
        # proposes is never answered (KIP-497's in-flight window stays open), the controller
        # fences it and elects a follower, and its clients still reach it -- Jepsen's isolated
        # leader.  A leader that counted the proposed ISR as committed acknowledges alone here.
        grudge = {**grudge, "L": [*followers, "controller"], "controller": ["L"]}
        return [
            {"bind": binding},
            {"fault": "partition", "grudge": grudge, "kind": "isolate-leader"},
            _sleep(rng, lag + 1.0, lag + 4.0, "past the ISR lag: a shrink proposal nobody answers"),
            *_lose_leader(rng),
        ]
    return [
        {"bind": binding},
        {"fault": "partition", "grudge": grudge, "kind": "isolate-leader-from-followers"},
        _sleep(rng, 2.0, 8.0, "the leader shrinks the ISR and acknowledges alone if min ISR allows"),
        *_lose_leader(rng),
    ]


def _lose_leader(rng: random.Random) -> list[Step]:
    """Kill the isolated leader ``L``, let the controller elect, heal, and bring ``L`` back."""
    return [
        {"fault": "kill", "node": "L"},
        _sleep(rng, 3.0, 6.0, "the controller fences the dead leader and elects, if anyone is eligible"),
        {"fault": "heal"},
        {"fault": "start", "node": "L"},
    ]


def power_loss_follower_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.power_loss:
        raise PackageError("power-loss-follower-leader-crash needs the lazy filesystem (power loss)")
    p = _partition_of(rng, context)
    return [
        {"bind": {"A": f"leader-of:{p}", "B": f"follower-of:{p}"}},
        {"fault": "power-loss", "node": "B"},
        {"fault": "start", "node": "B"},
        {"wait": "answers", "node": "B", "timeout": 20},
        _sleep(rng, 0.0, 2.0, "the leader crashes while the follower recovers"),
        {"fault": "kill", "node": "A"},
        _sleep(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
        {"fault": "start", "node": "A"},
    ]


def metadata_delay_leader_moves(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.metadata_delay:
        raise PackageError("metadata-delay-leader-moves needs a controller node")
    p = _partition_of(rng, context)
    follower = rng.randint(1, max(1, context.replication_factor - 1))
    return [
        {"bind": {"L": f"leader-of:{p}", "G": f"follower-of:{p}#{follower}"}},
        {"fault": "metadata-delay", "node": "G"},
        _sleep(rng, 1.0, 5.0, "the zombie may be fenced before the leadership moves, or not"),
        {"fault": "kill", "node": "L"},
        _sleep(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
        {"fault": "start", "node": "L"},
        _sleep(rng, 0.0, 4.0, "the zombie keeps acting on its old metadata"),
        {"fault": "metadata-heal", "node": "G"},
    ]


def rolling_restart(rng: random.Random, context: PackageContext) -> list[Step]:
    p = _partition_of(rng, context)
    order = list(context.brokers)
    rng.shuffle(order)
    steps: list[Step] = []
    for node in order:
        steps += [
            {"fault": "kill", "node": node},
            {"fault": "start", "node": node},
            {"wait": "answers", "node": node, "timeout": 20},
            {"wait": "caught-up", "partition": p, "timeout": 60},
        ]
    return steps


def overlapping_faults(rng: random.Random, context: PackageContext) -> list[Step]:
    if len(context.brokers) < 2:
        raise PackageError("overlapping-faults needs two brokers")
    kinds = ["pause", "kill", "isolate"] + (["metadata-delay"] if context.metadata_delay else [])
    first, second = rng.sample(kinds, 2)
    nodes = rng.sample(list(context.brokers), 2)
    injections = {
        "pause": ({"fault": "pause"}, {"fault": "resume"}),
        "kill": ({"fault": "kill"}, {"fault": "start"}),
        "metadata-delay": ({"fault": "metadata-delay"}, {"fault": "metadata-heal"}),
    }

    def inject(kind: str, node: str) -> tuple[Step, Step]:
        if kind == "isolate":
            others = [other for other in context.brokers if other != node]
            grudge = {node: others, **{other: [node] for other in others}}
            return {"fault": "partition", "grudge": grudge, "kind": "isolate-one"}, {"fault": "heal"}
        start, stop = injections[kind]
        return {**start, "node": node}, {**stop, "node": node}

    first_on, first_off = inject(first, nodes[0])
    second_on, second_off = inject(second, nodes[1])
    return [
        first_on,
        _sleep(rng, 0.5, 3.0, "the first fault settles before the second starts"),
        second_on,
        _sleep(rng, 1.0, 5.0, "both faults in effect"),
        first_off,
        _sleep(rng, 0.0, 3.0, "the second fault outlasts the first"),
        second_off,
    ]


def _three_replicas(name: str, context: PackageContext) -> None:
    if context.replication_factor < 3:
        raise PackageError(f"{name} needs a replication factor of at least 3")


def stale_leader_lagging_joiner(rng: random.Random, context: PackageContext) -> list[Step]:
    """KAFKA-7128's choreography; which of its waits hold depends on the broker, so the catch-up
    before the double failure is sometimes awaited (the joiner is in the ISR) and sometimes only
    given time (the failure lands mid catch-up)."""
    _three_replicas(STALE_LEADER_LAGGING_JOINER, context)
    p = _partition_of(rng, context)
    steps: list[Step] = [
        # The choreography needs B in the ISR when A dies (it must be elected); after an earlier
        # fault of a random run a replica may still be catching up, as the scripted scenario's
        # opening wait rules out.
        {"wait": "caught-up", "partition": p, "timeout": 40},
        {"bind": {"A": f"leader-of:{p}", "B": f"follower-of:{p}#1", "C": f"follower-of:{p}#2"}},
        {"fault": "kill", "node": "C"},
        {"wait": "not-in-isr", "node": "C", "timeout": 40},
        _sleep(rng, 2.0, 10.0, "acknowledged writes pile up beyond the stopped follower's log end"),
        {"fault": "partition", "grudge": {"A": ["B"], "B": ["A"]}, "kind": "leader-follower"},
        {"fault": "kill", "node": "B"},
        {"fault": "start", "node": "B"},
        {"wait": "answers", "node": "B", "timeout": 20},
        {"fault": "kill", "node": "A"},
        {"fault": "start", "node": "A"},
        {"wait": "leader-is", "node": "B", "timeout": 20},
        {"fault": "start", "node": "C"},
    ]
    # The double failure must land while C is still behind: measured in the hunt's event logs, a
    # C given 0.5-2 s after its start had caught up completely (its LEO the old leader's) when it
    # was elected, so nothing was lost, while the scripted scenario's C, killed at once after
    # joining, led with 273 of 923 records.
    if rng.random() < 0.5:
        steps.append({"wait": "in-isr", "node": "C", "timeout": 40})
    else:
        steps.append(_sleep(rng, 0.0, 0.3, "the double failure lands while the joiner catches up"))
    steps += [
        {"fault": "kill", "nodes": ["A", "B"]},
        # Awaited, not slept: the controller elects C only once it has seen A and B go (their
        # sessions time out), which took longer than a fixed 3-6 s -- A and B came back first,
        # were elected again with their whole logs, and the hunt never saw the loss the
        # scripted scenario (which waits here) shows every time.  When C is not eligible (the
        # bug is off, or it had not joined the ISR), the wait times out and the package's heal
        # restarts A and B.
        {"wait": "leader-is", "node": "C", "timeout": 20},
        _sleep(rng, 1.0, 4.0, "acknowledged writes land on the joiner as leader"),
        {"fault": "heal"},
        {"fault": "start", "nodes": ["A", "B"]},
    ]
    return steps


def last_replica_standing(rng: random.Random, context: PackageContext) -> list[Step]:
    """KIP-966: the ISR shrinks to the leader one follower at a time, then the leader loses its
    unsynced writes; whether it may lead again is the election rule under test."""
    if not context.power_loss:
        raise PackageError(f"{LAST_REPLICA_STANDING} needs the lazy filesystem (power loss)")
    if context.replication_factor < 2:
        raise PackageError(f"{LAST_REPLICA_STANDING} needs a replication factor of at least 2")
    p = _partition_of(rng, context)
    followers = [f"F{n}" for n in range(1, context.replication_factor)]
    rng.shuffle(followers)
    binding = {"L": f"leader-of:{p}", **{name: f"follower-of:{p}#{name[1:]}" for name in followers}}
    # As the scripted scenario opens: every follower in the ISR, so that each cut below is what
    # shrinks it (after an earlier fault of a random run one may still be catching up, and the
    # writes "acknowledged by the ISR that is left" would then be acknowledged by the leader alone).
    steps: list[Step] = [{"wait": "caught-up", "partition": p, "timeout": 40}, {"bind": binding}]
    cut: list[str] = []
    for name in followers:
        cut.append(name)
        steps += [
            {
                "fault": "partition",
                "grudge": {"L": list(cut), **{other: ["L"] for other in cut}},
                "kind": "isolate-leader-from-followers" if len(cut) == len(followers) else "leader-follower",
            },
            {"wait": "not-in-isr", "node": name, "timeout": 40},
        ]
        if len(cut) < len(followers):
            steps.append(_sleep(rng, 0.5, 3.0, "writes are acknowledged by the ISR that is left"))
    steps += [
        {"fault": "power-loss", "node": "L"},
        {"fault": "start", "node": "L"},
        {"wait": "answers", "node": "L", "timeout": 20},
        _sleep(rng, 0.0, 3.0, "the leader recovers alone before its followers hear it again"),
        {"fault": "heal"},
    ]
    return steps


def zombie_fetch_across_epochs(rng: random.Random, context: PackageContext) -> list[Step]:
    """KIP-320: the zombie follower G holds records of epoch e that the next leader never got,
    and keeps fetching from the old leader after it leads again in a later epoch.

    Its waits are the scripted scenario's conditions (``kip320-zombie-follower``), its sleeps
    drawn: G out of the ISR before the leader is cut off (else G, not F, may be elected), G's
    log past F's before the leader dies (else there is no stale suffix to diverge), and -- where
    the workload sends markers -- a marker in each new epoch (two in the last), since the
    workload's producers mostly cannot find the new leader while the zombie answers Metadata
    with the old one.
    """
    if not context.metadata_delay:
        raise PackageError(f"{ZOMBIE_FETCH_ACROSS_EPOCHS} needs a controller node")
    _three_replicas(ZOMBIE_FETCH_ACROSS_EPOCHS, context)
    p = _partition_of(rng, context)
    zombie = rng.randint(1, 2)
    marker: list[Step] = [{"produce": "marker", "partition": p}] if context.markers else []
    return [
        {"wait": "caught-up", "partition": p, "timeout": 40},
        {
            "bind": {
                "L": f"leader-of:{p}",
                "F": f"follower-of:{p}#{3 - zombie}",
                "G": f"follower-of:{p}#{zombie}",
            }
        },
        {"fault": "metadata-delay", "node": "G"},
        {"wait": "not-in-isr", "node": "G", "timeout": 40},
        {"fault": "partition", "grudge": {"L": ["F"], "F": ["L"]}, "kind": "leader-follower"},
        {"wait": "log-end-past", "node": "G", "than": "F", "partition": p, "timeout": 30},
        _sleep(rng, 0.0, 2.0, "the leader appends more that only the zombie replicates"),
        {"fault": "kill", "node": "L"},
        {"wait": "leader-is", "node": "F", "timeout": 20},
        *marker,
        _sleep(rng, 0.5, 2.0, "the next leader takes writes in the next epoch"),
        {"fault": "heal"},
        {"fault": "start", "node": "L"},
        {"wait": "in-isr", "node": "L", "timeout": 40},
        {"fault": "kill", "node": "F"},
        {"wait": "leader-is", "node": "L", "timeout": 20},
        *marker,
        _sleep(rng, 0.5, 2.0, "the zombie fetches from a leader of a newer epoch than it knows"),
        # A second marker: a zombie whose stale suffix is the longer is answered out of range at
        # first and truncates to L's end keeping it; only a record appended after that lands on
        # top (kip320-zombie-follower, where the producers may still be timing out on dead F).
        *marker,
        _sleep(rng, 0.5, 2.0, "the zombie fetches the newer epoch's record onto its stale suffix"),
        {"fault": "metadata-heal", "node": "G"},
        {"fault": "start", "node": "F"},
    ]


def quiet(rng: random.Random, context: PackageContext) -> list[Step]:
    mean = context.quiet_seconds
    return [_sleep(rng, 0.5 * mean, 1.5 * mean, "a quiet period: recovery is tested too")]


PLANNERS: dict[str, Callable[[random.Random, PackageContext], list[Step]]] = {
    FOLLOWER_RESTART_LEADER_CRASH: follower_restart_leader_crash,
    LEADER_CRASH_STORM: leader_crash_storm,
    ISOLATE_FOLLOWERS_LOSE_LEADER: isolate_followers_lose_leader,
    POWER_LOSS_FOLLOWER_LEADER_CRASH: power_loss_follower_leader_crash,
    METADATA_DELAY_LEADER_MOVES: metadata_delay_leader_moves,
    ROLLING_RESTART: rolling_restart,
    OVERLAPPING_FAULTS: overlapping_faults,
    STALE_LEADER_LAGGING_JOINER: stale_leader_lagging_joiner,
    LAST_REPLICA_STANDING: last_replica_standing,
    ZOMBIE_FETCH_ACROSS_EPOCHS: zombie_fetch_across_epochs,
    QUIET: quiet,
}


def plan_package(name: str, rng: random.Random, context: PackageContext) -> tuple[Step, ...]:
    """One seeded draw of package ``name``: its scenario steps (see the module docstring).

    Raises :class:`PackageError` when the package cannot apply to ``context`` (no controller
    node for a metadata delay, no lazy filesystem for power loss, replication factor 1).
    """
    if name not in PLANNERS:
        raise PackageError(f"no fault package {name!r}; known: {', '.join(PLANNERS)}")
    if context.partitions < 1:
        raise PackageError(f"{name} needs a topic partition to follow")
    return tuple(_on_the_package_partition(PLANNERS[name](rng, context)))


def _on_the_package_partition(steps: list[Step]) -> list[Step]:
    """Every partition wait of a package on the partition its roles are bound on.

    A wait without ``partition`` is about partition 0 in the scenario vocabulary; a package
    binds its roles on a drawn partition ``p``, so ``leader-is C`` must ask about ``p`` too (it
    asked about 0 before, and with two partitions half the draws awaited the wrong one).
    """
    bound = [
        int(role.split(":")[1].split("#")[0])
        for step in steps
        for role in step.get("bind", {}).values()
        if role.split(":")[0] in ("leader-of", "follower-of")
    ]
    if not bound:
        return steps
    if len(set(bound)) > 1:
        raise AssertionError(f"a package binds roles on one partition, not {sorted(set(bound))}")
    return [
        {**step, "partition": bound[0]}
        if step.get("wait") in PARTITION_WAITS and "partition" not in step
        else step
        for step in steps
    ]


def applicable_packages(names: tuple[str, ...], context: PackageContext) -> tuple[str, ...]:
    """``names`` without the packages that cannot apply to ``context`` (single faults kept).

    For a *default* mix, which must fit any cluster it is given: a hunt of a two-replica
    topic with every package of :data:`nemesis.spec.HUNT_MIX` named had each run refused
    (``stale-leader-lagging-joiner needs a replication factor of at least 3``).  Packages a
    user named are checked with :func:`check_packages` instead, which refuses with the reason.
    """
    kept = []
    for name in names:
        if name in PLANNERS:
            try:
                plan_package(name, random.Random(0), context)
            except PackageError:
                continue
        kept.append(name)
    return tuple(kept)


def check_packages(names: tuple[str, ...], context: PackageContext) -> None:
    """Raise :class:`PackageError` now if any of ``names`` cannot apply to ``context``."""
    for name in names:
        plan_package(name, random.Random(0), context)
