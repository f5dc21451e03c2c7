"""The graph layer of the transactional checks: Tarjan's components against reachability, and
every cycle found is a closed walk of allowed edges holding each required kind -- on random
graphs, and on one long ring (no recursion limit, a search within its budget)."""

from __future__ import annotations

import random

import pytest

from checker.txn.graph import PROCESS, WR, WW, CycleSpec, find_cycles, strongly_connected


def _reach(n: int, edges: list[tuple[int, int]]) -> list[set[int]]:
    """Each node's reachable set (itself included), by a plain search from each node."""
    out: dict[int, list[int]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
    reach = []
    for start in range(n):
        seen, stack = {start}, [start]
        while stack:
            for b in out.get(stack.pop(), []):
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        reach.append(seen)
    return reach


@pytest.mark.parametrize("seed", range(40))
def test_components_are_the_mutually_reachable_nodes(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 2 * n))]
    edges = [(a, b) for a, b in edges if a != b]
    out: list[list[int]] = [[] for _ in range(n)]
    for number, (a, _) in enumerate(edges):
        out[a].append(number)
    component = strongly_connected(n, out, [b for _, b in edges])
    reach = _reach(n, edges)
    for a in range(n):
        on_cycle = any(a in reach[b] for b in reach[a] if b != a)
        assert (component[a] != -1) == on_cycle, (a, edges)
        for b in range(n):
            if a != b:
                together = b in reach[a] and a in reach[b]
                assert together == (component[a] != -1 and component[a] == component[b]), (a, b, edges)


SPECS = (
    CycleSpec("ww", frozenset({WW}), frozenset({WW})),
    CycleSpec("wr", frozenset({WW, WR}), frozenset({WR})),
    CycleSpec("wr+process", frozenset({WW, WR, PROCESS}), frozenset({WR, PROCESS})),
)


@pytest.mark.parametrize("seed", range(60))
def test_every_cycle_found_is_closed_allowed_and_holds_its_required_kinds(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    src, dst, kind = [], [], []
    for _ in range(rng.randint(1, 3 * n)):
        a, b = rng.randrange(n), rng.randrange(n)
        if a != b:
            src.append(a)
            dst.append(b)
            kind.append(rng.choice([WW, WW, WR, PROCESS]))
    found = find_cycles(n, src, dst, kind, SPECS)
    for cycle in found:
        spec = next(s for s in SPECS if s.name == cycle.name)
        edges = cycle.edges
        assert all(kind[e] in spec.allowed for e in edges)
        assert spec.required <= {kind[e] for e in edges}
        for e, following in zip(edges, [*edges[1:], edges[0]], strict=True):
            assert dst[e] == src[following]
    # A ww-only cycle exists exactly when the ww edges have a component: then one per component.
    ww = [(a, b) for a, b, k in zip(src, dst, kind, strict=True) if k == WW]
    reach = _reach(n, ww)
    cyclic = {
        frozenset(b for b in reach[a] if a in reach[b])
        for a in range(n)
        if any(a in reach[b] for b in reach[a] if b != a)
    }
    assert sum(1 for c in found if c.name == "ww") == len(cyclic)


def test_a_ring_of_a_hundred_thousand_nodes_is_one_cycle() -> None:
    n = 100_000
    src = list(range(n))
    dst = [(v + 1) % n for v in range(n)]
    (cycle,) = find_cycles(n, src, dst, [WW] * n, SPECS[:1])
    assert len(cycle.edges) == n
