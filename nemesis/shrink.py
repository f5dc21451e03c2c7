"""Shrinking a failing run: its fault timeline as scenario steps, then the fewest that still fail.

Two pure halves; the replays that judge a candidate are the caller's (``harness.run.shrink_run``):

1. :func:`timeline_steps` turns the nemesis ops of a run's history into scenario steps -- the
   vocabulary of :mod:`nemesis.scenario`.  A fault whose target followed a partition's leader
   (``leader_of`` recorded) becomes ``bind = {U3 = "leader-of:P"}`` and a fault on ``U3``, so
   the replay hits whoever leads then, as the original did; other faults name the nodes
   recorded.  A fault package contributes the steps it planned (recorded in its ``package``
   op), its aliases renamed apart; the ops inside it are not repeated.  The gaps between faults
   become ``sleep`` steps of the recorded length, a restart is followed by a wait until the
   broker answers, and faults that certainly did nothing (``fail``) are left out.
2. :func:`shrink` removes whole *units* -- a fault with its heal and the waits on its nodes --
   while an oracle says the anomaly still reproduces; then it halves sleeps, longest first,
   while it still does.  Binds and the rest are kept; a unit's removal merges the sleeps
   around it, so the surviving faults keep their spacing.

Why the unit moves are ordered as they are: every oracle call is a batch of real runs (minutes),
and a random run's anomaly is usually caused by a few neighbouring units -- one fault package --
in a timeline that went on injecting faults after it.  So :func:`shrink` first looks for the
shortest *prefix* of units that still reproduces and then for the shortest *suffix* of that
(two binary searches: about ``2 log2(n)`` candidates for ``n`` units), which isolates the window
of the cause; only then does it try the units inside that window one at a time, last first.
A unit whose removal was seen to lose the anomaly at a window's edge is not tried again.  The
oracle is noisy, so a search is a heuristic, not a proof: what is written is re-measured.

:func:`units_of` is the grouping: a fault opens a unit on its nodes (a fault of the workload's
clients, ``consumer-churn`` or ``client-crash``, is a unit of its own, nodeless, healed by
none); the heal that names one of them
(``start`` after ``kill`` or ``power-loss``, ``resume`` after ``pause``, ``heal`` after
``partition``, ``metadata-heal`` after ``metadata-delay``) joins that unit; a heal of several
open units merges them (one step cannot be split).  A wait on a node joins that node's latest
unit, except a wait for an election's outcome (``leader-is``, ``leader-is-not``), which joins the
latest fault of any node -- the one that forced the election; a wait on a node with no fault of
its own yet (a partition's victim) joins the latest fault too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nemesis.controller_kinds import CONTROLLER_KIND_NAMES
from nemesis.fault_kinds import HEALS, PARTITION, REGISTRY, names_drawn_as
from nemesis.package_run import PACKAGE_OP
from nemesis.steps import CONTROLLER, NODE_KEYS
from testbed.record.ops import NEMESIS_PROCESS, Op

Step = dict[str, Any]

OPENERS = {fault: heal for fault, heal in HEALS.items() if fault != PARTITION}
"""Node faults and the heal op that ends each (the fault registry, :mod:`nemesis.fault_kinds`, owns the pairs)."""
PARTITION_HEAL = HEALS[PARTITION]
PACKAGE = PACKAGE_OP
HEAL_STEPS = {*OPENERS.values(), PARTITION_HEAL}
WORKLOAD_FAULTS = frozenset(names_drawn_as("workload"))
SELF_HEALING = WORKLOAD_FAULTS | {name for name in names_drawn_as("node-target") if name not in HEALS}
"""Faults of the workload's clients (``consumer-churn``, ``client-crash``) and node faults without a
heal (``elect-preferred``): one step each, a unit of its own with no heal (the op did the whole change)."""
MIN_SLEEP_SECONDS = 0.25
RENAMED_KEYS = (*NODE_KEYS, "nodes", "peers")
"""The step keys whose values name nodes (besides ``bind`` and ``grudge``): a package's aliases in
them are renamed apart."""
ELECTION_WAITS = ("leader-is", "leader-is-not")
"""Waits for an election's outcome: they belong to the fault that forced the election."""


def timeline_steps(ops: Iterable[Op]) -> list[Step]:
    """The nemesis part of a history as scenario steps (see the module docstring)."""
    nemesis_ops = [op for op in ops if op.process == NEMESIS_PROCESS]
    completions: dict[int, Op] = {}
    open_invokes: list[Op] = []
    for op in nemesis_ops:  # pair invokes with completions (a package nests around its faults)
        if op.type == "invoke":
            open_invokes.append(op)
        elif open_invokes:
            completions[id(_pop_matching(open_invokes, op.f))] = op
    steps: list[Step] = []
    last_time: int | None = 0  # the run's start: the first gap is the workload's warm-up
    aliases = 0
    alias_of_node: dict[str, str] = {}  # a leader-targeted fault's node -> its alias, until healed
    package_depth = 0
    for op in nemesis_ops:
        if op.type != "invoke":
            package_depth -= op.f == PACKAGE
            continue
        completion = completions.get(id(op))
        if op.f == PACKAGE:
            if package_depth == 0:
                steps += _gap(op.time - last_time) if last_time is not None else []
                aliases += 1
                steps += _renamed(list(op.value.get("steps", [])), f"P{aliases}")
                last_time = completion.time if completion is not None else op.time
            package_depth += 1
            continue
        if package_depth or completion is None or completion.type == "fail":
            continue
        steps += _gap(op.time - last_time) if last_time is not None else []
        last_time = completion.time
        value = op.value if isinstance(op.value, dict) else {}
        nodes = [str(node) for node in value.get("nodes", [])]
        if op.f == PARTITION:
            grudge = {str(k): [str(v) for v in vs] for k, vs in value.get("grudge", {}).items() if vs}
            steps.append({"fault": PARTITION, "grudge": grudge, "kind": str(value.get("kind", "recorded"))})
        elif op.f == PARTITION_HEAL:
            steps.append({"fault": PARTITION_HEAL})
        elif op.f in WORKLOAD_FAULTS:  # no node: the workload's victim is in its params
            steps.append({"fault": op.f, **_recorded_params(op.f, value)})
        elif op.f in OPENERS and value.get("target") == "leader" and "leader_of" in value and len(nodes) == 1:
            aliases += 1
            alias = alias_of_node[nodes[0]] = f"U{aliases}"
            steps.append({"bind": {alias: f"leader-of:{value['leader_of']['partition']}"}})
            steps.append({"fault": op.f, "node": alias, **_recorded_params(op.f, value)})
        elif op.f in CONTROLLER_KIND_NAMES:  # the one controller node, which its steps do not name
            steps.append({"fault": op.f})
        elif nodes:
            names = [alias_of_node.pop(node, node) if op.f in HEAL_STEPS else node for node in nodes]
            named: Step = {"node": names[0]} if len(names) == 1 else {"nodes": names}
            steps.append({"fault": op.f, **named, **_recorded_params(op.f, value)})
            if op.f == "start":
                steps += [{"wait": "answers", "node": name, "timeout": 30} for name in names]
    return steps


RECORDED_PARAMS = (
    "rate_kbit",
    "peers",
    "requests",
    "offset_s",
    "rate_pct",
    "op",
    "errno",
    "files",
    "delay_ms",
    "stop",
    "pick",
    "controlled",
)
"""Step parameters a fault's op records in its value, kept in its step so a replay injects the
same fault (a slow link's rate, the requests a hold held, a clock's offset, a disk fault's rule,
a churn's or a client crash's victim, whether a shutdown was controlled)."""


def _recorded_params(f: str, value: dict[str, Any]) -> Step:
    kind = REGISTRY.get(f)
    return {p: value[p] for p in RECORDED_PARAMS if kind is not None and kind.takes(p) and p in value}


def _pop_matching(stack: list[Op], f: str) -> Op:
    for position in range(len(stack) - 1, -1, -1):
        if stack[position].f == f:
            return stack.pop(position)
    return stack.pop()


def _gap(nanoseconds: int) -> list[Step]:
    seconds = round(nanoseconds / 1e9, 2)
    return [{"sleep": seconds, "why": "the gap the failing run had"}] if seconds >= MIN_SLEEP_SECONDS else []


def _renamed(steps: list[Step], prefix: str) -> list[Step]:
    """A package's steps with its bound aliases made unique (``A`` -> ``P2A``)."""
    aliases = {alias for step in steps if "bind" in step for alias in step["bind"]}

    def name(value: Any) -> Any:
        if isinstance(value, str) and value in aliases:
            return prefix + value
        if isinstance(value, list):
            return [name(item) for item in value]
        return value

    renamed = []
    for step in steps:
        copy: Step = {}
        for key, value in step.items():
            if key == "bind":
                copy[key] = {prefix + alias: role for alias, role in value.items()}
            elif key == "grudge":
                copy[key] = {name(node): name(list(others)) for node, others in value.items()}
            elif key in RENAMED_KEYS:
                copy[key] = name(value)
            else:
                copy[key] = value
        renamed.append(copy)
    return renamed


# ---- units --------------------------------------------------------------------------------------


def _nodes_of(step: Step) -> list[str]:
    if "grudge" in step:
        return [PARTITION]
    if step.get("fault") == PARTITION_HEAL:
        return [PARTITION]
    if step.get("fault") in CONTROLLER_KIND_NAMES:
        return [CONTROLLER]  # the one controller node: its kill and its start are one unit
    return [str(n) for n in step.get("nodes") or ([step["node"]] if "node" in step else [])]


def units_of(steps: Sequence[Step]) -> list[int | None]:
    """For each step, the unit it belongs to (None: kept whatever is removed)."""
    parent: dict[int, int] = {}

    def find(unit: int) -> int:
        while parent.get(unit, unit) != unit:
            unit = parent[unit]
        return unit

    labels: list[int | None] = []
    open_units: dict[tuple[str, str], int] = {}  # (heal step kind, node) -> unit
    last_unit_of_node: dict[str, int] = {}
    next_unit = 0
    for step in steps:
        fault = step.get("fault")
        nodes = _nodes_of(step)
        if fault in OPENERS or fault == PARTITION:
            unit = next_unit
            next_unit += 1
            heal = OPENERS.get(str(fault), PARTITION_HEAL)
            for node in nodes:
                open_units[(heal, node)] = unit
                last_unit_of_node[node] = unit
            labels.append(unit)
        elif fault in SELF_HEALING:
            labels.append(next_unit)
            next_unit += 1
        elif fault in HEAL_STEPS:
            closed = [
                open_units.pop((str(fault), node)) for node in nodes if (str(fault), node) in open_units
            ]
            if not closed:
                labels.append(None)
                continue
            root = find(closed[0])
            for other in closed[1:]:
                parent[find(other)] = root
            labels.append(root)
        elif step.get("wait") == "request-held":
            # It awaits what the latest fault (its ``request-hold``) caught: without that fault it
            # would time out, so it goes with it, node or none.
            labels.append(next_unit - 1 if next_unit else None)
        elif "wait" in step and "node" in step:
            # A wait goes with its node's own latest fault -- except when it awaits another
            # fault's consequence: ``leader-is B`` after ``kill A`` (whatever B's own faults), or
            # ``not-in-isr F`` after a partition that cut F off (F has no fault of its own).
            # Left behind without that fault, it would time out and end the replay's steps there.
            own = None if step["wait"] in ELECTION_WAITS else last_unit_of_node.get(str(step["node"]))
            labels.append(own if own is not None else next_unit - 1 if next_unit else None)
        else:
            labels.append(None)
    return [None if label is None else find(label) for label in labels]


def fault_count(steps: Sequence[Step]) -> int:
    """How many steps inject a fault (heals not counted)."""
    return sum(1 for step in steps if step.get("fault") in {*OPENERS, PARTITION, *SELF_HEALING})


def without_units(steps: Sequence[Step], units: set[int]) -> list[Step]:
    """``steps`` without the steps of ``units``; sleeps left adjacent are merged into one."""
    labels = units_of(steps)
    merged: list[Step] = []
    for step, label in zip(steps, labels, strict=True):
        if label in units:
            continue
        if "sleep" in step and merged and "sleep" in merged[-1]:
            merged[-1] = {**merged[-1], "sleep": round(float(merged[-1]["sleep"]) + float(step["sleep"]), 2)}
        else:
            merged.append(dict(step))
    return merged


@dataclasses.dataclass
class ShrinkResult:
    steps: list[Step]
    tried: int
    """Candidates judged by the oracle."""
    complete: bool = True
    """False when the caller's time ran out before every move was tried."""
    trail: list[list[Step]] = dataclasses.field(default_factory=list)
    """Every candidate the oracle accepted, oldest first, after the starting steps (the first
    entry; the last is :attr:`steps`): where a caller that re-measures :attr:`steps` and finds
    it short of its threshold steps back to (the oracle is noisy; a quick one more so)."""


Oracle = Callable[[list[Step]], bool]


def shrink(
    steps: Sequence[Step],
    reproduces: Oracle,
    *,
    log: Callable[[str], None] = lambda _: None,
    out_of_time: Callable[[], bool] = lambda: False,
) -> ShrinkResult:
    """The smallest steps :func:`shrink`'s moves reach for which ``reproduces`` still holds.

    ``steps`` is assumed to reproduce (the caller checks it first).  Heal steps that close no
    fault are dropped without asking (heal-all's blanket ``resume``).  Units are removed as the
    module docstring says (prefix, suffix, then one at a time), each removal kept if the oracle
    agrees; then every sleep is halved, longest first,
    as long as the oracle agrees and it is above :data:`MIN_SLEEP_SECONDS`; a sleep whose
    halving did not reproduce is not tried again.  Each oracle call is a batch of real runs,
    so ``out_of_time()`` is asked before every candidate: when it says so, the smallest steps
    found so far are the result (``complete`` False).
    """
    labels = units_of(steps)
    # Heals that close nothing (heal-all's blanket resume at the end of a run) go first: no oracle.
    base = [
        dict(step)
        for step, label in zip(steps, labels, strict=True)
        if not (label is None and step.get("fault") in HEAL_STEPS)
    ]
    search = _UnitSearch(base, reproduces, log, out_of_time)
    trail = search.trail
    if not search.run():
        return ShrinkResult(search.current, search.tried, complete=False, trail=trail)
    current, tried = search.current, search.tried
    settled: set[int] = set()  # positions of sleeps whose halving did not reproduce
    changed = True
    while changed:
        changed = False
        order = sorted(
            (
                position
                for position, step in enumerate(current)
                if "sleep" in step and position not in settled
            ),
            key=lambda position: -float(current[position]["sleep"]),
        )
        for position in order:
            seconds = float(current[position]["sleep"])
            if seconds / 2 < MIN_SLEEP_SECONDS:
                continue
            if out_of_time():
                return ShrinkResult(current, tried, complete=False, trail=trail)
            candidate = [dict(step) for step in current]
            candidate[position]["sleep"] = round(seconds / 2, 2)
            tried += 1
            if reproduces(candidate):
                log(f"sleep {seconds:g} s -> {seconds / 2:g} s: still reproduces")
                current, changed = candidate, True
                trail.append(current)
            else:
                log(f"sleep {seconds:g} s -> {seconds / 2:g} s: does not reproduce; kept")
                settled.add(position)
    return ShrinkResult(current, tried, trail=trail)


class _UnitSearch:
    """The unit moves of :func:`shrink` over one timeline (``base``), as removed-unit sets.

    Units are named by their label in ``base`` and ordered by first appearance, so removals
    never renumber them; :attr:`current` is ``base`` without :attr:`removed`, sleeps merged.
    """

    def __init__(
        self,
        base: list[Step],
        reproduces: Oracle,
        log: Callable[[str], None],
        out_of_time: Callable[[], bool],
    ) -> None:
        self.base = base
        self.order = list(dict.fromkeys(label for label in units_of(base) if label is not None))
        self.removed: set[int] = set()
        self.needed: set[int] = set()
        self.trail: list[list[Step]] = [self.current]
        self.tried = 0
        self._reproduces = reproduces
        self._log = log
        self._out_of_time = out_of_time

    @property
    def current(self) -> list[Step]:
        return without_units(self.base, self.removed)

    def _kept(self) -> list[int]:
        return [unit for unit in self.order if unit not in self.removed]

    def _try(self, removal: list[int], what: str) -> bool | None:
        """Judge ``current`` without ``removal``; keep it if it reproduces (None: out of time)."""
        if self._out_of_time():
            return None
        candidate_removed = self.removed | set(removal)
        candidate = without_units(self.base, candidate_removed)
        self.tried += 1
        if self._reproduces(candidate):
            self._log(f"without {what}: still reproduces ({fault_count(candidate)} faults)")
            self.removed = candidate_removed
            self.trail.append(candidate)
            return True
        self._log(f"without {what}: does not reproduce; kept")
        return False

    def run(self) -> bool:
        """Prefix search, suffix search, then single units; False when time ran out."""
        return self._shortest_prefix() and self._shortest_suffix() and self._single_units()

    def _shortest_prefix(self) -> bool:
        kept = self._kept()
        low, high = 1, len(kept)  # keeping all of ``kept`` reproduces
        while low < high:
            middle = (low + high) // 2
            verdict = self._try(kept[middle:high], f"{_span(kept[middle:high])} (the last)")
            if verdict is None:
                return False
            if verdict:
                high = middle
            else:
                low = middle + 1
                if low == high:
                    self.needed.add(kept[high - 1])  # the prefix without it failed
        return True

    def _shortest_suffix(self) -> bool:
        kept = self._kept()
        low, high = 0, len(kept) - 1  # dropping none of ``kept`` reproduces; keep at least one
        while low < high:
            middle = (low + high + 1) // 2
            verdict = self._try(kept[low:middle], f"{_span(kept[low:middle])} (the first)")
            if verdict is None:
                return False
            if verdict:
                low = middle
            else:
                high = middle - 1
                if low == high:
                    self.needed.add(kept[low])  # the suffix without it failed
        return True

    def _single_units(self) -> bool:
        for unit in reversed(self._kept()):
            if unit in self.needed:
                continue
            if self._try([unit], f"unit {unit}") is None:
                return False
        return True


def _span(units: list[int]) -> str:
    return f"unit {units[0]}" if len(units) == 1 else f"units {units[0]}..{units[-1]}"
