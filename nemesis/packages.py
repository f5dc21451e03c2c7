"""Fault packages: seeded random choreographies of several faults, each a pure plan.

The random nemesis flips one fault on and off at a time, and many replication bugs need a
*sequence*: KIP-101's loss needs a follower restart followed, inside its re-fetch window, by a
leader crash; Jepsen's 2013 loss needs the leader cut off from its followers and then lost. A
package is such a choreography with its timing and targets drawn from a ``random.Random``, so a
run's packages follow from its seed like the rest of its schedule.

A package plans **scenario steps** -- the vocabulary of :mod:`nemesis.scenario` (``bind`` nodes by
role, ``fault``, ``wait`` on a condition, ``sleep`` with a ``why``, and ``produce`` a marker where
the workload sends them) -- so that what the nemesis did is one format whether it was scripted or
drawn: the mechanism runs the steps with the scenario runner, every fault lands in the history as
an op, and a failing run's packages can be written back as a scenario file. Roles
(``leader-of:P``, ``follower-of:P#N``) are resolved when the step runs, from the freshest
metadata; names are bound per package, so two packages never share a binding.

Contract, tested for every package over many seeds: the steps parse as a scenario, and every fault
a package injects is healed by its own later steps (kill and power loss by ``start``, pause by
``resume``, partition by ``heal``, metadata-delay by ``metadata-heal``; elect-preferred needs
none). If a step fails at run time (a wait times out), the mechanism heals what is still in
effect.

Packages (:data:`nemesis.spec.PACKAGE_KINDS`):

* ``follower-restart-leader-crash`` -- KIP-101: restart a follower, then crash the leader within 0-2 s; half
  the draws hold the window open by cutting the two apart while the follower restarts;
* ``leader-crash-storm`` -- 2-4 leaders killed in quick succession, each as soon as a successor leads, then
  all restarted; or (half the draws) the leadership sent back and forth 2-4 times between two replicas that
  each return alone while the other is down (fast failover, KIP-279);
* ``isolate-followers-lose-leader`` -- Jepsen 2013: the leader loses its followers (not the controller) long
  enough for the ISR to shrink, then it is killed; where the ISR lag is known and there is a controller node,
  half the draws cut it off from the controller too, past the lag, so the shrink it proposes is never answered
  while its clients still reach it (KIP-497's in-flight ISR);
* ``power-loss-follower-leader-crash`` -- a follower loses power, restarts, the leader crashes (needs power loss);
* ``metadata-delay-leader-moves`` -- a follower stops hearing the controller (a zombie) while the leader is
  killed and restarted; then it hears again (needs a controller node);
* ``rolling-restart`` -- every broker killed (or shut down cleanly) and restarted in turn, each time waiting
  until the partition is fully replicated again, then (with a controller to ask) every leadership handed back
  to its preferred replica under load (``elect-preferred``);
* ``overlapping-faults`` -- two different faults on different brokers whose windows overlap;
* ``stale-leader-lagging-joiner`` -- KAFKA-7128: a follower stops and falls far behind; the other follower
  restarts cut off from the leader (its HW stale; crashed, or stopped cleanly where a crash would take it out
  of the ISR) and leads when the old one bounces; the far-behind follower returns and catches up with it, then
  both others die (whether it leads then is the rule under test);
* ``last-replica-standing`` -- KIP-966: the leader is cut off from its followers one at a time until the ISR
  is the leader alone, then it loses power and restarts (needs the lazy filesystem);
* ``zombie-fetch-across-epochs`` -- KIP-320: a follower stops hearing the controller and keeps fetching while
  the leadership moves away and back over two epochs (needs a controller node);
* ``disk-failure-leader-moves`` -- the leader's disk fails its fsyncs; it halts (Kafka's rule for a failed log
  directory), the leadership moves, and the disk is replaced and the broker restarted from what the failed
  disk kept (needs the lazy filesystem);
* ``one-way-leader-crash`` -- a one-way cut past the ISR lag, then the leader is killed: in half the draws the
  leader stops hearing its followers (their Fetches are lost; hearing the controller, it stays leader and
  shrinks the ISR to itself), else the followers stop hearing it (they ask and never advance);
* ``retried-produce-leader-crash`` -- the client path of a partition's replicas turns slow (evenly, or
  unevenly so that requests overtake one another) and duplicates every Produce and EndTxn, the leader resets
  the next one of each after acting on it (the client retries not knowing), then the leader is killed while
  copies keep coming: the new leader must answer them as duplicates, not append (needs request proxies);
* ``whole-cluster-crash`` -- every broker at once: killed (a quarter of the draws; the page caches survive)
  or powered off (their unsynced writes gone) -- up to three times in a row, or once after their disks
  failed their fsyncs for a while -- then all restarted: a durability bug needs every replica of a
  record to lose it; in half the draws the controller's process dies with them
  (:mod:`nemesis.whole_cluster_plan`; power-off draws need the lazy filesystem);
* ``lagging-follower-leader-shutdown`` -- a follower cut off from the leader past the ISR lag (both ways or
  one way), then the leader stopped cleanly: a controlled shutdown must hand the partition to a replica in
  the ISR (:mod:`nemesis.bug_packages`; needs three replicas);
* ``client-crash-leader-crash`` -- a producer process killed mid-call, then the leader; and
  ``consumer-crash-coordinator-crash`` -- a group member's process killed mid-poll, then its group coordinator
  (:mod:`nemesis.client_crash_plan`; they need the workload's clients, its group members, in processes);
* ``decommission-leader-crash`` -- a leader's replicas reassigned away under load, the new leader killed in
  half the draws, the broker moved back (:mod:`nemesis.membership_plan`; needs a controller node);
* ``lagging-preferred-election`` -- a preferred-leader election asked for while the preferred replica is
  alive but cut off from the leader, out of the ISR (:mod:`nemesis.membership_plan`; a controller node);
* ``recommission-late-metadata`` -- a decommissioned leader comes back while the controller's links to every
  other replica are slow: the deposed newcomer learns late that it follows (:mod:`nemesis.membership_plan`;
  a controller node and a broker outside the replica set);
* ``lagging-follower-outlives-the-isr`` -- a follower cut off past the ISR lag, then the other follower and
  the leader crash: the live replica is out of sync and must not be elected (:mod:`nemesis.bug_packages`);
* ``clock-drift-leader-crash`` -- the leader's clock fast, a follower's behind, the leader killed
  (:mod:`nemesis.clock_plan`; needs brokers under libfaketime);
* ``quiet`` -- nothing for a while: recovery is tested too.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from nemesis.bug_packages import (
    lagging_follower_leader_shutdown,
    lagging_follower_outlives_the_isr,
    last_replica_standing,
    stale_leader_lagging_joiner,
    zombie_fetch_across_epochs,
)
from nemesis.client_crash_plan import CLIENT_CRASH_PACKAGES
from nemesis.clock_plan import clock_drift_leader_crash
from nemesis.fault_kinds import HEALS, KILL, METADATA_DELAY, PAUSE
from nemesis.membership_plan import (
    decommission_leader_crash,
    lagging_preferred_election,
    recommission_late_metadata,
)
from nemesis.package_context import PackageContext as PackageContext
from nemesis.package_context import PackageError as PackageError
from nemesis.package_context import Step as Step
from nemesis.package_context import partition_of, sleep_step, slow_path_step
from nemesis.spec import (
    CLOCK_DRIFT_LEADER_CRASH,
    DECOMMISSION_LEADER_CRASH,
    DISK_FAILURE_LEADER_MOVES,
    FOLLOWER_RESTART_LEADER_CRASH,
    ISOLATE_FOLLOWERS_LOSE_LEADER,
    LAGGING_FOLLOWER_LEADER_SHUTDOWN,
    LAGGING_FOLLOWER_OUTLIVES_THE_ISR,
    LAGGING_PREFERRED_ELECTION,
    LAST_REPLICA_STANDING,
    LEADER_CRASH_STORM,
    METADATA_DELAY_LEADER_MOVES,
    ONE_WAY_LEADER_CRASH,
    OVERLAPPING_FAULTS,
    POWER_LOSS_FOLLOWER_LEADER_CRASH,
    QUIET,
    RECOMMISSION_LATE_METADATA,
    RETRIED_PRODUCE_LEADER_CRASH,
    ROLLING_RESTART,
    STALE_LEADER_LAGGING_JOINER,
    WHOLE_CLUSTER_CRASH,
    ZOMBIE_FETCH_ACROSS_EPOCHS,
)
from nemesis.steps import PARTITION_WAITS as PARTITION_WAITS
from nemesis.whole_cluster_plan import whole_cluster_crash


def follower_restart_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    p = partition_of(rng, context)
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
        sleep_step(rng, 0.0, 2.0, "the leader crashes inside the restarted follower's re-fetch window"),
        {"fault": "kill", "node": "A"},
        sleep_step(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
    ]
    if hold_window:
        steps.append({"fault": "heal"})
    steps.append({"fault": "start", "node": "A"})
    return steps


def leader_crash_storm(rng: random.Random, context: PackageContext) -> list[Step]:
    """Leaders killed in quick succession.  Half the draws keep every crashed leader down (a storm:
    each failover lands on a replica that saw the last one); the other half restart the previous
    leader as the next one falls, the leadership going back and forth between two replicas that each
    come back alone -- KIP-279's fast failover, each election unclean: planned only where they may be."""
    p = partition_of(rng, context)
    # A full ISR first: after an earlier fault the leader may be the ISR's only member, whose crash
    # moves nothing (nightly profile: 5 of 27 draws ended at the first leader-is-not, 2026-11-30).
    opening: list[Step] = [{"wait": "caught-up", "partition": p, "timeout": 40}]
    if rng.random() < 0.5 and context.rules.unclean_election is not False:  # its elections are all unclean
        return opening + _ping_pong(rng, context, p)
    crashes = rng.randint(2, min(4, max(2, context.replication_factor)))
    steps: list[Step] = opening
    names = []
    for number in range(1, crashes + 1):
        name = f"K{number}"
        names.append(name)
        steps += [
            {"bind": {name: f"leader-of:{p}"}},
            {"fault": "kill", "node": name},
            sleep_step(rng, 0.0, 1.0, "the next crash follows the failover closely"),
        ]
        if number < crashes:
            steps.append({"wait": "leader-is-not", "node": name, "timeout": 20})
    steps.append({"fault": "start", "nodes": names})
    return steps


def _ping_pong(rng: random.Random, context: PackageContext, p: int) -> list[Step]:
    """The leadership back and forth between A and B, each returning alone (the other replicas down
    meanwhile), each new epoch given a marker where the workload sends them -- after a failover the
    workload's producers may still be backing off, and an epoch without a record has nothing to diverge."""
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
        sleep_step(rng, 0.5, 2.0, "the leader takes writes alone in its epoch"),
    ]
    falls, rises = "A", "B"
    for _ in range(rng.randint(2, 4)):
        steps += [
            {"fault": "kill", "node": falls},
            {"fault": "start", "node": rises},
            {"wait": "leader-is", "node": rises, "timeout": 20},
            *marker,
            sleep_step(rng, 0.5, 2.0, "the returned replica takes writes alone in a new epoch"),
        ]
        falls, rises = rises, falls
    steps.append({"fault": "start", "node": rises})
    if others:
        steps.append({"fault": "start", "nodes": others})
    return steps


def isolate_followers_lose_leader(rng: random.Random, context: PackageContext) -> list[Step]:
    p = partition_of(rng, context)
    followers = [f"F{n}" for n in range(1, context.replication_factor)]
    if not followers:
        raise PackageError("isolate-followers-lose-leader needs a replication factor of at least 2")
    binding = {"L": f"leader-of:{p}", **{name: f"follower-of:{p}#{n}" for n, name in enumerate(followers, 1)}}
    grudge: dict[str, list[str]] = {"L": followers, **{name: ["L"] for name in followers}}
    lag = context.rules.isr_lag_seconds
    if lag is not None and context.metadata_delay and rng.random() < 0.5:
        # The leader loses the controller too, for longer than the ISR lag: the shrink it then
        # proposes is never answered (KIP-497's in-flight window stays open), the controller
        # fences it and elects a follower, and its clients still reach it -- Jepsen's isolated
        # leader.  A leader that counted the proposed ISR as committed acknowledges alone here.
        grudge = {**grudge, "L": [*followers, "controller"], "controller": ["L"]}
        return [
            {"bind": binding},
            {"fault": "partition", "grudge": grudge, "kind": "isolate-leader"},
            sleep_step(rng, lag + 1.0, lag + 4.0, "past the ISR lag: a shrink proposal nobody answers"),
            *_lose_leader(rng),
        ]
    return [
        {"bind": binding},
        {"fault": "partition", "grudge": grudge, "kind": "isolate-leader-from-followers"},
        sleep_step(rng, 2.0, 8.0, "the leader shrinks the ISR and acknowledges alone if min ISR allows"),
        *_lose_leader(rng),
    ]


def _lose_leader(rng: random.Random) -> list[Step]:
    """Kill the isolated leader ``L``, let the controller elect, heal, and bring ``L`` back."""
    return [
        {"fault": "kill", "node": "L"},
        sleep_step(rng, 3.0, 6.0, "the controller fences the dead leader and elects, if anyone is eligible"),
        {"fault": "heal"},
        {"fault": "start", "node": "L"},
    ]


def power_loss_follower_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.power_loss:
        raise PackageError("power-loss-follower-leader-crash needs the lazy filesystem (power loss)")
    p = partition_of(rng, context)
    return [
        {"bind": {"A": f"leader-of:{p}", "B": f"follower-of:{p}"}},
        {"fault": "power-loss", "node": "B"},
        {"fault": "start", "node": "B"},
        {"wait": "answers", "node": "B", "timeout": 20},
        sleep_step(rng, 0.0, 2.0, "the leader crashes while the follower recovers"),
        {"fault": "kill", "node": "A"},
        sleep_step(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
        {"fault": "start", "node": "A"},
    ]


def metadata_delay_leader_moves(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.metadata_delay:
        raise PackageError("metadata-delay-leader-moves needs a controller node")
    p = partition_of(rng, context)
    follower = rng.randint(1, max(1, context.replication_factor - 1))
    return [
        {"bind": {"L": f"leader-of:{p}", "G": f"follower-of:{p}#{follower}"}},
        {"fault": "metadata-delay", "node": "G"},
        sleep_step(rng, 1.0, 5.0, "the zombie may be fenced before the leadership moves, or not"),
        {"fault": "kill", "node": "L"},
        sleep_step(rng, 3.0, 6.0, "the controller fences the dead leader and elects"),
        {"fault": "start", "node": "L"},
        sleep_step(rng, 0.0, 4.0, "the zombie keeps acting on its old metadata"),
        {"fault": "metadata-heal", "node": "G"},
    ]


def rolling_restart(rng: random.Random, context: PackageContext) -> list[Step]:
    """Half the draws crash each broker (kill), the other half shut each down cleanly, as an
    operator's rolling restart does (``shutdown``: the leaderships move before the broker goes);
    then, as the operator (or ``auto.leader.rebalance.enable``) does, the preferred leaders elected."""
    p, order, stop = partition_of(rng, context), list(context.brokers), rng.choice(("kill", "shutdown"))
    rng.shuffle(order)
    steps: list[Step] = []
    for node in order:
        steps += [
            {"fault": stop, "node": node},
            {"fault": "start", "node": node},
            {"wait": "answers", "node": node, "timeout": 20},
            {"wait": "caught-up", "partition": p, "timeout": 60},
        ]
    if context.metadata_delay:  # the same fact: a controller node of its own, to ask for elections
        steps.append({"fault": "elect-preferred", "nodes": list(context.brokers)})
    return steps


def overlapping_faults(rng: random.Random, context: PackageContext) -> list[Step]:
    if len(context.brokers) < 2:
        raise PackageError("overlapping-faults needs two brokers")
    kinds = ["pause", "kill", "isolate"] + (["metadata-delay"] if context.metadata_delay else [])
    first, second = rng.sample(kinds, 2)
    nodes = rng.sample(list(context.brokers), 2)
    injections = {kind: ({"fault": kind}, {"fault": HEALS[kind]}) for kind in (PAUSE, KILL, METADATA_DELAY)}

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
        sleep_step(rng, 0.5, 3.0, "the first fault settles before the second starts"),
        second_on,
        sleep_step(rng, 1.0, 5.0, "both faults in effect"),
        first_off,
        sleep_step(rng, 0.0, 3.0, "the second fault outlasts the first"),
        second_off,
    ]


def disk_failure_leader_moves(rng: random.Random, context: PackageContext) -> list[Step]:
    if not context.power_loss:
        raise PackageError("disk-failure-leader-moves needs the lazy filesystem (disk faults)")
    p = partition_of(rng, context)
    return [
        {"bind": {"L": f"leader-of:{p}"}},
        {"fault": "disk-error", "node": "L"},  # every fsync: the HW checkpoint's within 5 s at the latest
        {"wait": "leader-is-not", "node": "L", "partition": p, "timeout": 30},
        sleep_step(rng, 0.0, 3.0, "the new leader serves while the failed broker is down"),
        {"fault": "disk-heal", "node": "L"},
        {"wait": "answers", "node": "L", "timeout": 20},
    ]


def one_way_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    p = partition_of(rng, context)
    followers = [f"F{n}" for n in range(1, context.replication_factor)]
    if not followers:
        raise PackageError("one-way-leader-crash needs a replication factor of at least 2")
    binding = {"L": f"leader-of:{p}", **{name: f"follower-of:{p}#{n}" for n, name in enumerate(followers, 1)}}
    if rng.random() < 0.5:
        deaf, why = ["L"], "the leader hears no Fetch (the controller it still hears): the ISR shrinks to it"
    else:
        deaf, why = followers, "the followers' Fetches arrive, the answers do not: they ask and never advance"
    lag = context.rules.isr_lag_seconds
    low, high = (lag + 1.0, lag + 4.0) if lag is not None else (2.0, 8.0)
    return [
        {"bind": binding},
        {"fault": "one-way", "nodes": deaf},
        sleep_step(rng, low, high, why),
        {"fault": "kill", "node": "L"},
        sleep_step(rng, 3.0, 6.0, "the controller fences the dead leader and elects, if anyone is eligible"),
        {"fault": "one-way-heal", "nodes": deaf},
        {"fault": "start", "node": "L"},
    ]


def retried_produce_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    p = partition_of(rng, context)
    followers = [f"F{n}" for n in range(1, context.replication_factor)]
    if not followers:
        raise PackageError("retried-produce-leader-crash needs a replication factor of at least 2")
    replicas = ["L", *followers]
    return [
        {
            "bind": {
                "L": f"leader-of:{p}",
                **{name: f"follower-of:{p}#{n}" for n, name in enumerate(followers, 1)},
            }
        },
        slow_path_step(rng, replicas),
        {"fault": "request-duplicate", "nodes": replicas},
        {"fault": "request-reset", "node": "L"},
        sleep_step(
            rng, 1.0, 4.0, "copies of every produce, and the retry of the one reset, reach the leader"
        ),
        {"fault": "kill", "node": "L"},
        sleep_step(rng, 3.0, 6.0, "the new leader gets the copies: it must know the producers' sequences"),
        {"fault": "request-release", "nodes": replicas},
        {"fault": "start", "node": "L"},
    ]


def quiet(rng: random.Random, context: PackageContext) -> list[Step]:
    mean = context.quiet_seconds
    return [sleep_step(rng, 0.5 * mean, 1.5 * mean, "a quiet period: recovery is tested too")]


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
    DISK_FAILURE_LEADER_MOVES: disk_failure_leader_moves,
    ONE_WAY_LEADER_CRASH: one_way_leader_crash,
    RETRIED_PRODUCE_LEADER_CRASH: retried_produce_leader_crash,
    WHOLE_CLUSTER_CRASH: whole_cluster_crash,
    LAGGING_FOLLOWER_LEADER_SHUTDOWN: lagging_follower_leader_shutdown,
    **CLIENT_CRASH_PACKAGES,
    DECOMMISSION_LEADER_CRASH: decommission_leader_crash,
    CLOCK_DRIFT_LEADER_CRASH: clock_drift_leader_crash,
    LAGGING_PREFERRED_ELECTION: lagging_preferred_election,
    RECOMMISSION_LATE_METADATA: recommission_late_metadata,
    LAGGING_FOLLOWER_OUTLIVES_THE_ISR: lagging_follower_outlives_the_isr,
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
    bound: list[int | str] = [  # a number, or an internal topic's partition by name (offsets)
        int(p) if p.isdigit() else p
        for step in steps
        for role in step.get("bind", {}).values()
        if role.split(":")[0] in ("leader-of", "follower-of")
        for p in [role.split(":")[1].split("#")[0]]
    ]
    if not bound:
        return steps
    if len(set(bound)) > 1:
        raise AssertionError(f"a package binds roles on one partition, not {sorted(map(str, set(bound)))}")
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
