"""Cycles in a dependency graph of transactions: strongly connected components, then a short cycle.

The graph is given as edge arrays over nodes ``0 .. n-1`` -- ``src``, ``dst``, ``kind`` (small
integer codes, :data:`WW`, :data:`WR`, :data:`PROCESS`, :data:`REALTIME`, :data:`INTERNAL`) -- with no self-edges.
A cycle anomaly is a set of *allowed* edge kinds and a set of *required* ones (G1c: ww and wr
allowed, at least one wr required); :func:`find_cycles` answers each anomaly with one cycle per
strongly connected component of its allowed edges that has one.

How it scales (``bench/txn_cycles.py``, 100 k transactions, 690 k edges: 1.0 s here against 4.2 s
for networkx's components and ``find_cycle``; the whole family 3.2 s):

* One iterative Tarjan pass (:func:`strongly_connected`, no recursion, so no recursion limit) over
  the union of every edge kind asked for.  A cycle of any anomaly lies inside one component of
  the union, so a graph without a component of two or more nodes -- the usual, valid run -- costs
  that one pass and nothing else.
* Each anomaly then runs Tarjan again on its allowed edges, restricted to the nodes of the
  union's components: the small remainder of the graph.
* In each of its components, a cycle through an edge of a required kind is a shortest path back
  from the edge's head to its tail: one breadth-first search over (node, required kinds seen so
  far) states, so that a cycle that must hold a wr *and* a process edge finds both.  The search
  starts from several such edges (all of them in a small component; fewer in a large one, within
  :data:`SEARCH_BUDGET` edge visits) and keeps the shortest cycle found -- the shortest cycle
  through those edges, not always the component's shortest.  The result may pass a node twice
  when two required kinds are far apart (a closed walk); every edge is still a "must precede",
  so the walk is as much a contradiction as a simple cycle.

Deterministic: the same edge arrays give the same components, starts and cycles, whichever
engine built them (both engines' results.json must be identical).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Final

WW: Final = 0
WR: Final = 1
PROCESS: Final = 2
REALTIME: Final = 3
INTERNAL: Final = 4
"""An order inside one transaction (its start before its micro-ops, an append before its commit,
...): the event-level graph's (:mod:`checker.txn.event_graph`) glue, allowed in its cycles and
never required, shown in no example."""
KIND_NAMES: Final[tuple[str, ...]] = ("ww", "wr", "process", "realtime", "internal")

SEARCH_BUDGET: Final = 400_000
"""About how many edge visits the cycle searches of one component may spend in all."""
MAX_STARTS: Final = 64
"""At most this many required edges are tried as the start of a component's cycle."""


@dataclasses.dataclass(frozen=True, slots=True)
class CycleSpec:
    """An anomaly's cycle: only ``allowed`` edge kinds, at least one edge of each ``required`` kind."""

    name: str
    allowed: frozenset[int]
    required: frozenset[int]


@dataclasses.dataclass(frozen=True, slots=True)
class Cycle:
    """One anomaly's cycle in one component: ``edges`` (positions in the edge arrays), in order,
    the head of each the tail of the next, the last one's head the first one's tail."""

    name: str
    edges: tuple[int, ...]


def _adjacency(n: int, src: Sequence[int], dst: Sequence[int], edges: Sequence[int]) -> list[list[int]]:
    """Per node, the positions of its outgoing ``edges`` (in the order given)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for e in edges:
        out[src[e]].append(e)
    return out


def strongly_connected(n: int, out: list[list[int]], dst: Sequence[int] | Mapping[int, int]) -> list[int]:
    """Tarjan's algorithm without recursion: per node, its component's number (-1: a node alone,
    not on any cycle).  ``out[v]`` lists the edge positions leaving v, ``dst[e]`` an edge's head."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    component = [-1] * n
    stack: list[int] = []
    counter = 0
    components = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, position = work[-1]
            edges = out[v]
            if position < len(edges):
                work[-1] = (v, position + 1)
                w = dst[edges[position]]
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work and low[v] < low[work[-1][0]]:
                low[work[-1][0]] = low[v]
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    members.append(w)
                    if w == v:
                        break
                if len(members) > 1:
                    for w in members:
                        component[w] = components
                    components += 1
    return component


def _walk_back(
    start: int, goal_state: int, parent: dict[int, tuple[int, int]], first_edge: int
) -> tuple[int, ...]:
    """The edges from the start edge to ``goal_state``, read back through ``parent``."""
    path = []
    state = goal_state
    while state != start:
        state, edge = parent[state]
        path.append(edge)
    return (first_edge, *reversed(path))


def _cycle_through(
    first: int,
    src: Sequence[int],
    dst: Sequence[int],
    kind: Sequence[int],
    out: Mapping[int, list[int]],
    bits: dict[int, int],
    full: int,
) -> tuple[int, ...] | None:
    """The shortest closed walk that starts with edge ``first`` and holds every required kind
    (``bits``: kind -> its bit, ``full`` all bits), over the edges ``out`` lists; None if none."""
    width = full + 1
    start = dst[first] * width + bits.get(kind[first], 0)
    goal = src[first] * width + full
    if start == goal:
        return (first,)
    parent: dict[int, tuple[int, int]] = {}
    seen = {start}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        v, mask = divmod(state, width)
        for e in out.get(v, ()):
            following = dst[e] * width + (mask | bits.get(kind[e], 0))
            if following in seen:
                continue
            seen.add(following)
            parent[following] = (state, e)
            if following == goal:
                return _walk_back(start, goal, parent, first)
            queue.append(following)
    return None


def _component_cycle(
    spec: CycleSpec,
    members: list[int],
    edges: list[int],
    arrays: tuple[Sequence[int], Sequence[int], Sequence[int]],
    out: Mapping[int, list[int]],
) -> tuple[int, ...] | None:
    """The shortest cycle of ``spec`` found from the component's required edges (see the module docstring)."""
    src, dst, kind = arrays
    counts = {k: sum(1 for e in edges if kind[e] == k) for k in spec.required}
    if any(count == 0 for count in counts.values()):
        return None
    rarest = min(sorted(spec.required), key=lambda k: counts[k])
    starts = sorted((e for e in edges if kind[e] == rarest), key=lambda e: (src[e], dst[e], e))
    bits = {k: 1 << number for number, k in enumerate(sorted(spec.required))}
    full = (1 << len(bits)) - 1
    tries = max(1, min(MAX_STARTS, SEARCH_BUDGET // max(1, (full + 1) * (len(edges) + len(members)))))
    best: tuple[int, ...] | None = None
    for first in starts[:tries]:
        found = _cycle_through(first, src, dst, kind, out, bits, full)
        if found is not None and (best is None or len(found) < len(best)):
            best = found
    return best


def _spec_cycles(
    spec: CycleSpec,
    candidates: list[int],
    arrays: tuple[Sequence[int], Sequence[int], Sequence[int]],
) -> list[Cycle]:
    """One cycle of ``spec`` per component of its allowed edges among ``candidates`` that has one.

    Tarjan runs over the candidates' endpoints only, numbered afresh: they are the few nodes of
    the union's components, not the run's every transaction."""
    src, dst, kind = arrays
    edges = [e for e in candidates if kind[e] in spec.allowed]
    nodes = sorted({src[e] for e in edges} | {dst[e] for e in edges})
    local = {v: number for number, v in enumerate(nodes)}
    out: list[list[int]] = [[] for _ in nodes]
    for e in edges:
        out[local[src[e]]].append(e)
    component = strongly_connected(len(nodes), out, {e: local[dst[e]] for e in edges})
    inside: dict[int, list[int]] = {}
    members: dict[int, list[int]] = {}
    for e in edges:
        c = component[local[src[e]]]
        if c != -1 and c == component[local[dst[e]]]:
            inside.setdefault(c, []).append(e)
    for v in nodes:
        if component[local[v]] != -1:
            members.setdefault(component[local[v]], []).append(v)
    found = []
    for c in sorted(inside, key=lambda c: min(members[c])):
        adjacency: dict[int, list[int]] = {}
        for e in inside[c]:
            adjacency.setdefault(src[e], []).append(e)
        cycle = _component_cycle(spec, members[c], inside[c], arrays, adjacency)
        if cycle is not None:
            found.append(Cycle(spec.name, cycle))
    return found


def find_cycles(
    n: int, src: Sequence[int], dst: Sequence[int], kind: Sequence[int], specs: Sequence[CycleSpec]
) -> list[Cycle]:
    """Every spec's cycles (one per component of its allowed edges that holds one), specs in order,
    each spec's components by their lowest node."""
    arrays = (src, dst, kind)
    wanted = frozenset().union(*(spec.allowed for spec in specs)) if specs else frozenset()
    every = [e for e in range(len(src)) if kind[e] in wanted]
    union = strongly_connected(n, _adjacency(n, src, dst, every), dst)
    candidates = [e for e in every if union[src[e]] != -1 and union[src[e]] == union[dst[e]]]
    if not candidates:
        return []
    return [cycle for spec in specs for cycle in _spec_cycles(spec, candidates, arrays)]
