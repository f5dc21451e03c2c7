"""Pure planning for the nemesis: which nodes a fault hits, who drops whose traffic, and when.

Nothing here touches a node, a clock or global randomness: every function takes the node names
(and a ``random.Random`` where it chooses), so the whole plan of a run follows from its seed and
is unit-tested without containers. :mod:`nemesis.mechanism` carries the plan out.

**Node targets** (``kill``/``pause``/``power-loss``/``metadata-delay``): ``one`` random broker;
``minority`` -- the largest random set whose loss still leaves a majority (``(n - 1) // 2`` nodes:
1 of 3, 1 of 4, 2 of 5); ``majority`` (``n // 2 + 1``); ``all``; ``leader``; ``followers`` (every
broker but the leader). A target that would select nobody for the cluster size (a minority of 2)
is not applicable.

**Grudges.** A grudge maps each node to the set of nodes it drops traffic *from* (Jepsen's
term); :mod:`nemesis.iptables` turns it into ``DROP`` rules on the INPUT side of each node. One
dropped direction is enough to cut TCP both ways (the handshake's answer never arrives), but the
shapes below are symmetric anyway, so "a sees b" and "b sees a" always agree:

* ``isolate-one`` / ``isolate-leader`` -- one node against all others;
* ``halves`` -- a random split into two sides (the smaller first); each side drops the other;
* ``bridge`` -- halves, except one node of the larger side keeps talking to both sides
  (the classic split brain with a go-between; needs 3 nodes);
* ``majorities-ring`` -- the nodes in a random ring, each sees the nearest ``k`` on both sides
  with ``k`` the smallest giving it a majority; every node sees a majority, no two see the same
  one (needs 4 nodes: with 3, a symmetric view of exactly 2 nodes cannot differ per node).

The partition universe is the brokers, plus the controller when the scope is ``all``.

**Metadata delay.** ``metadata-delay`` is a node fault: the brokers its target selects drop every
packet from :func:`metadata_source` -- the controller node -- in a chain of their own (see
:mod:`nemesis.iptables`), so partitions and their heals neither undo it nor are undone by it, and
broker<->broker replication goes on. A cluster without a controller node (an external one whose
metadata lives elsewhere) cannot have it: :func:`check_plan` refuses the spec.  Nor can such a
cluster have ``controller-kill``, the one fault drawn without a target: it hits the controller node.

**Schedule.** :func:`schedule` yields :class:`PlannedStep` s forever: quiet for about
``interval_seconds``, one fault for about ``fault_seconds``, its heal, quiet again... One fault at
a time, so every heal undoes exactly one fault and the history's fault windows never overlap.
Targets that depend on the leader are chosen at plan time but resolved when the fault starts
(:func:`resolve_leader_step`), because only then is the leader known. A step's heal is the op
:attr:`PlannedStep.heal_f` (``nemesis.spec.HEALS``: ``kill`` -> ``start``, ``metadata-delay`` ->
``metadata-heal``, ...).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from nemesis.churn_plan import ChurnPlan, plan_churn
from nemesis.client_crash_plan import CRASH_ROLES
from nemesis.fault_kinds import REGISTRY
from nemesis.packages import PackageContext, PackageError, check_packages, plan_package
from nemesis.spec import (
    CONSUMER_CHURN,
    CONTROLLER_FAULT_KINDS,
    HEALS,
    LEADER_DEPENDENT,
    METADATA_DELAY,
    NODE_FAULT_KINDS,
    NODE_TARGETS,
    PACKAGE_KINDS,
    PARTITION,
    PARTITION_KINDS,
    NemesisSpec,
)

Grudge = Mapping[str, frozenset[str]]
"""node -> the nodes it drops traffic from."""

TopicPartition = tuple[str, int]

MIN_NODES_FOR_PARTITION: Mapping[str, int] = {
    "isolate-one": 2,
    "isolate-leader": 2,
    "halves": 2,
    "bridge": 3,
    "majorities-ring": 4,
}


class PlanError(ValueError):
    """The spec asks for something this cluster cannot have (e.g. a bridge between 2 nodes)."""


def majority(count: int) -> int:
    """The smallest number of nodes that is more than half of ``count``."""
    return count // 2 + 1


def minority_size(count: int) -> int:
    """The largest number of nodes whose loss leaves a majority of ``count``."""
    return (count - 1) // 2


@dataclasses.dataclass(frozen=True)
class Layout:
    """The nodes a nemesis acts on: brokers, the controller if there is one, and the partition scope."""

    brokers: tuple[str, ...]
    controller: str | None = None
    partition_scope: str = "brokers"

    def __post_init__(self) -> None:
        if not self.brokers:
            raise PlanError("the cluster has no brokers")
        names = [*self.brokers, *([self.controller] if self.controller is not None else [])]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise PlanError(f"node names must be unique, repeated: {', '.join(duplicates)}")
        if self.partition_scope == "all" and self.controller is None:
            raise PlanError("partition scope 'all' needs a controller node, and this cluster has none")

    @property
    def partition_nodes(self) -> tuple[str, ...]:
        """The universe partitions split: brokers, plus the controller when the scope is ``all``."""
        if self.partition_scope == "all" and self.controller is not None:
            return (*self.brokers, self.controller)
        return self.brokers

    @property
    def all_nodes(self) -> tuple[str, ...]:
        """Every node that may carry firewall rules (heal-all flushes them all, whatever the scope)."""
        return (*self.brokers, *([self.controller] if self.controller is not None else []))


def metadata_source(layout: Layout) -> str:
    """The node whose packets a ``metadata-delay`` drops on the chosen brokers: the controller.

    The bundled brokers learn leadership and ISR changes only from the controller, so cutting
    that one source (and nothing else) makes a broker act on stale metadata. PlanError, saying
    why, when the cluster has no controller node.
    """
    if layout.controller is None:
        raise PlanError(
            f"{METADATA_DELAY} drops the controller's packets on the chosen brokers, and this cluster "
            "has no controller node (its metadata lives elsewhere)"
        )
    return layout.controller


# --------------------------------------------------------------------------- node targets


def target_applicable(target: str, broker_count: int) -> bool:
    """Whether ``target`` selects at least one broker out of ``broker_count``."""
    if target == "minority":
        return minority_size(broker_count) > 0
    if target == "followers":
        return broker_count > 1
    return target in NODE_TARGETS


def select_nodes(
    target: str, brokers: Sequence[str], rng: random.Random | None = None, leader: str | None = None
) -> tuple[str, ...]:
    """The brokers ``target`` hits, in the order of ``brokers``.

    Random targets need ``rng``; ``leader``/``followers`` need ``leader`` (one of ``brokers``).
    """
    count = len(brokers)
    if target not in NODE_TARGETS:
        raise PlanError(f"unknown node target {target!r} (known: {', '.join(NODE_TARGETS)})")
    if not target_applicable(target, count):
        raise PlanError(f"target {target!r} selects no broker out of {count}")
    if target in ("leader", "followers"):
        if leader not in brokers:
            raise PlanError(
                f"target {target!r} needs the leader, one of {', '.join(brokers)}; got {leader!r}"
            )
        chosen = {leader} if target == "leader" else set(brokers) - {leader}
    elif target == "all":
        chosen = set(brokers)
    else:
        if rng is None:
            raise PlanError(f"target {target!r} is random and needs a random generator")
        size = {"one": 1, "minority": minority_size(count), "majority": majority(count)}[target]
        chosen = set(rng.sample(list(brokers), size))
    return tuple(node for node in brokers if node in chosen)


# --------------------------------------------------------------------------- grudges


def complete_grudge(components: Iterable[Collection[str]]) -> dict[str, frozenset[str]]:
    """Each node drops traffic from every node outside its own component (components must be disjoint)."""
    parts = [frozenset(component) for component in components]
    everyone: set[str] = set()
    for part in parts:
        if everyone & part:
            raise PlanError(f"components overlap on {', '.join(sorted(everyone & part))}")
        everyone |= part
    return {node: frozenset(everyone - part) for part in parts for node in part}


def union_grudges(*grudges: Grudge) -> dict[str, frozenset[str]]:
    """The grudge that drops everything any of ``grudges`` drops."""
    merged: dict[str, frozenset[str]] = {}
    for grudge in grudges:
        for node, dropped in grudge.items():
            merged[node] = merged.get(node, frozenset()) | dropped
    return merged


def isolate(nodes: Sequence[str], isolated: str) -> dict[str, frozenset[str]]:
    """``isolated`` and the other ``nodes`` drop each other's traffic."""
    if isolated not in nodes:
        raise PlanError(f"cannot isolate {isolated!r}: not one of {', '.join(nodes)}")
    _need(len(nodes), 2, "isolate")
    return complete_grudge([[isolated], [node for node in nodes if node != isolated]])


def isolate_one(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Isolate a random node from the rest."""
    _need(len(nodes), 2, "isolate-one")
    return isolate(nodes, rng.choice(list(nodes)))


def bisect(nodes: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split in two, the smaller half first (as given: shuffle first for a random split)."""
    middle = len(nodes) // 2
    return tuple(nodes[:middle]), tuple(nodes[middle:])


def halves(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """A random split into two sides that drop each other's traffic."""
    _need(len(nodes), 2, "halves")
    return complete_grudge(bisect(_shuffled(nodes, rng)))


def bridge(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Random halves, but the first node of the larger half talks to both sides and both sides to it."""
    _need(len(nodes), 3, "bridge")
    smaller, larger = bisect(_shuffled(nodes, rng))
    go_between = larger[0]
    cut = complete_grudge([smaller, larger])
    return {
        node: dropped - {go_between} if node != go_between else frozenset() for node, dropped in cut.items()
    }


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Each node sees its ``k`` nearest ring neighbours each side -- a majority, different for every node."""
    count = len(nodes)
    _need(count, 4, "majorities-ring")
    ring = _shuffled(nodes, rng)
    reach = majority(count) // 2  # 2 * reach + 1 >= majority(count), and < count for count >= 4
    grudge: dict[str, frozenset[str]] = {}
    for position, node in enumerate(ring):
        seen = {ring[(position + step) % count] for step in range(-reach, reach + 1)}
        grudge[node] = frozenset(ring) - seen
    return grudge


def grudge_for(
    kind: str, nodes: Sequence[str], rng: random.Random, leader: str | None = None
) -> dict[str, frozenset[str]]:
    """The grudge of partition ``kind`` over ``nodes``; ``isolate-leader`` needs ``leader``."""
    if kind == "isolate-leader":
        if leader is None:
            raise PlanError("isolate-leader needs the leader")
        return isolate(nodes, leader)
    builders = {
        "isolate-one": isolate_one,
        "halves": halves,
        "bridge": bridge,
        "majorities-ring": majorities_ring,
    }
    if kind not in builders:
        raise PlanError(f"unknown partition kind {kind!r} (known: {', '.join(PARTITION_KINDS)})")
    return builders[kind](nodes, rng)


def sees(grudge: Grudge, node: str, nodes: Iterable[str]) -> frozenset[str]:
    """The nodes (``node`` included) whose traffic ``node`` receives under ``grudge``."""
    return frozenset(nodes) - grudge.get(node, frozenset())


def grudge_to_json(grudge: Grudge) -> dict[str, list[str]]:
    """``{node: sorted dropped sources}`` in node order: the ``grudge`` of a partition op's value."""
    return {node: sorted(grudge[node]) for node in sorted(grudge)}


def describe_grudge(grudge: Grudge) -> str:
    """A short text for progress lines: the components when the cut is complete, else who drops whom."""
    nodes = sorted(grudge)
    components: list[frozenset[str]] = []
    for node in nodes:
        view = sees(grudge, node, nodes)
        if view not in components:
            components.append(view)
    if all(a == b or not a & b for a in components for b in components):
        return " | ".join(",".join(sorted(component)) for component in components)
    return " ".join(f"{node}-x{','.join(sorted(grudge[node]))}" for node in nodes if grudge[node])


def _need(count: int, minimum: int, what: str) -> None:
    if count < minimum:
        raise PlanError(f"{what} needs at least {minimum} nodes, the cluster has {count}")


def _shuffled(nodes: Sequence[str], rng: random.Random) -> list[str]:
    order = list(nodes)
    rng.shuffle(order)
    return order


# --------------------------------------------------------------------------- schedule


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """One fault and when it is healed.

    ``target`` is the node target (node faults) or the partition kind. ``nodes``/``grudge`` are
    concrete unless the step depends on the leader (``leader_of`` set): then they are empty until
    :func:`resolve_leader_step` fills them in from the leader seen when the fault starts.
    """

    at_seconds: float
    heal_at_seconds: float
    fault: str
    target: str
    nodes: tuple[str, ...] = ()
    grudge: Grudge | None = None
    leader_of: TopicPartition | None = None
    steps: tuple[dict[str, Any], ...] = ()
    """A fault package's scenario steps (``fault`` is then the package's name); it heals itself."""
    churn: ChurnPlan | None = None
    """A ``consumer-churn`` step's plan (:mod:`nemesis.consumer_churn`); nothing to heal after it."""
    params: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """The parameters drawn for the fault (its kind's ``drawn``: a ``clock-skew``'s ``offset_s``)."""

    @property
    def is_package(self) -> bool:
        return self.fault in PACKAGE_KINDS

    @property
    def needs_leader(self) -> bool:
        return self.leader_of is not None and not self.nodes and self.grudge is None

    @property
    def heal_f(self) -> str:
        """The ``f`` of the nemesis op that heals this step's fault (``start``, ``metadata-heal``, ...).

        A package has none of its own: its steps heal what they inject; nor has a workload fault."""
        if self.is_package or self.fault not in HEALS:
            raise ValueError(f"{self.fault} heals itself; it has no heal op")
        return HEALS[self.fault]


def applicable_targets(spec: NemesisSpec, layout: Layout) -> tuple[str, ...]:
    """The node targets the schedule draws from; explicit ones that cannot apply raise PlanError."""
    count = len(layout.brokers)
    if spec.targets is None:
        return tuple(target for target in NODE_TARGETS if target_applicable(target, count))
    for target in spec.targets:
        if not target_applicable(target, count):
            raise PlanError(f"nemesis target {target!r} selects no broker in a cluster of {count}")
    return spec.targets


def applicable_partitions(spec: NemesisSpec, layout: Layout) -> tuple[str, ...]:
    """The partition kinds the schedule draws from; explicit ones that cannot apply raise PlanError."""
    count = len(layout.partition_nodes)
    if spec.partitions is None:
        return tuple(kind for kind in PARTITION_KINDS if count >= MIN_NODES_FOR_PARTITION[kind])
    for kind in spec.partitions:
        if count < MIN_NODES_FOR_PARTITION[kind]:
            raise PlanError(
                f"nemesis partition {kind!r} needs at least {MIN_NODES_FOR_PARTITION[kind]} nodes, "
                f"the partition scope {layout.partition_scope!r} has {count}"
            )
    return spec.partitions


def check_plan(
    spec: NemesisSpec,
    layout: Layout,
    leader_partitions: Sequence[TopicPartition],
    packages: PackageContext | None = None,
) -> None:
    """Raise PlanError now if the schedule could ever ask for something this cluster cannot give."""
    named_packages = tuple(name for name in spec.faults if name in PACKAGE_KINDS)
    if named_packages:
        if packages is None:
            raise PlanError(
                f"fault packages ({', '.join(named_packages)}) need a cluster that answers Kafka metadata"
            )
        try:
            check_packages(named_packages, packages)
        except PackageError as error:
            raise PlanError(str(error)) from None
    targets = applicable_targets(spec, layout) if any(f in NODE_FAULT_KINDS for f in spec.faults) else ()
    kinds = applicable_partitions(spec, layout) if PARTITION in spec.faults else ()
    if PARTITION in spec.faults and not kinds:
        raise PlanError(f"no partition shape fits {len(layout.partition_nodes)} node(s)")
    if not leader_partitions and LEADER_DEPENDENT & {*targets, *kinds}:
        raise PlanError("targets that follow the leader need a topic partition to ask for its leader")
    if METADATA_DELAY in spec.faults:
        metadata_source(layout)
    controller_faults = [fault for fault in spec.faults if fault in CONTROLLER_FAULT_KINDS]
    if controller_faults and layout.controller is None:
        raise PlanError(f"{controller_faults[0]} needs a controller node, and this cluster has none")


def schedule(
    spec: NemesisSpec,
    layout: Layout,
    leader_partitions: Sequence[TopicPartition] = (),
    packages: PackageContext | None = None,
) -> Iterator[PlannedStep]:
    """The run's faults in time order, forever (stop consuming when the run ends).

    Each step: wait ``interval_seconds`` (jittered), draw a fault from the mix (by its ``weights``), its target or
    shape, and, for leader-dependent ones, which of ``leader_partitions`` to follow; the heal
    comes ``fault_seconds`` (jittered) later and the next quiet period starts after it.  A drawn
    fault package is planned whole (:func:`nemesis.packages.plan_package`, from this schedule's
    random stream) and carries its own heals: its step has ``heal_at_seconds == at_seconds``,
    and the next quiet period starts once it has run; so has a ``consumer-churn`` step
    (:func:`nemesis.churn_plan.plan_churn`: how the victim stops, and which) and a
    ``client-crash`` or ``consumer-crash`` step (its drawn ``pick``: :mod:`nemesis.client_crash`).
    """
    check_plan(spec, layout, leader_partitions, packages)
    if not spec.faults:
        return
    rng = random.Random(spec.seed)
    targets = applicable_targets(spec, layout) if any(f in NODE_FAULT_KINDS for f in spec.faults) else ()
    kinds = applicable_partitions(spec, layout) if PARTITION in spec.faults else ()
    weights = spec.fault_weights()
    now = 0.0
    while True:
        now += _jittered(spec.interval_seconds, spec.jitter, rng)
        fault = rng.choice(spec.faults) if weights is None else rng.choices(spec.faults, weights)[0]
        if fault in PACKAGE_KINDS:
            assert packages is not None  # check_plan refused the spec otherwise
            yield PlannedStep(now, now, fault, "package", steps=plan_package(fault, rng, packages))
            continue
        if fault == CONSUMER_CHURN:
            churn = plan_churn(rng)
            yield PlannedStep(now, now, fault, churn.stop, churn=churn)
            continue
        if fault in CRASH_ROLES:  # its victim drawn; the workload starts the successor itself
            yield PlannedStep(now, now, fault, "client", params=_drawn_params(fault, rng))
            continue
        # A kind without a heal (elect-preferred) does its whole change in its op: no duration drawn.
        duration = _jittered(spec.mean_fault_seconds, spec.jitter, rng) if fault in HEALS else 0.0
        if fault in CONTROLLER_FAULT_KINDS:  # no target: the one controller node (check_plan: there is one)
            yield PlannedStep(now, now + duration, fault, "controller", nodes=(str(layout.controller),))
            now += duration
            continue
        target = rng.choice(kinds if fault == PARTITION else targets)
        step = PlannedStep(now, now + duration, fault, target, params=_drawn_params(fault, rng))
        if target in LEADER_DEPENDENT:
            step = dataclasses.replace(step, leader_of=rng.choice(list(leader_partitions)))
        elif fault == PARTITION:
            step = dataclasses.replace(step, grudge=grudge_for(target, layout.partition_nodes, rng))
        else:
            step = dataclasses.replace(step, nodes=select_nodes(target, layout.brokers, rng))
        yield step
        now += duration


def resolve_leader_step(step: PlannedStep, layout: Layout, leader: str) -> PlannedStep:
    """``step`` with its nodes or grudge chosen from ``leader`` (a broker); other steps unchanged."""
    if not step.needs_leader:
        return step
    if leader not in layout.brokers:
        raise PlanError(f"the leader {leader!r} is not one of the brokers {', '.join(layout.brokers)}")
    if step.fault == PARTITION:  # isolate-leader is the one leader-dependent partition kind
        return dataclasses.replace(step, grudge=isolate(layout.partition_nodes, leader))
    return dataclasses.replace(step, nodes=select_nodes(step.target, layout.brokers, leader=leader))


def _drawn_params(fault: str, rng: random.Random) -> dict[str, int]:
    """The kind's drawn parameters (none for most kinds: their schedules draw nothing more, so a
    seed's schedule without such a kind is what it always was)."""
    return {name: rng.choice(choices) for name, choices in REGISTRY[fault].drawn}


def _jittered(mean: float, jitter: float, rng: random.Random) -> float:
    return mean * rng.uniform(1 - jitter, 1 + jitter)
