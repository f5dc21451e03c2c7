"""G0 and G1c (and their ``-process`` and ``-realtime`` variants): the dependency graphs of one run's
committed transactions and their cycles (definitions: :mod:`checker.definitions`).

Nodes: the transactions that must have committed (``must_commit``, :func:`checker.txn.tables.build`:
``ok``, or ``info`` with a value someone read; ``fail`` ones did not happen, and an ``info`` one
nobody saw may not have).  Edges, each with the evidence its example shows:

* **ww** -- per partition, the *known positions* of the log: every (offset, value) a committed
  transaction's send was acknowledged with or a read (txn poll, plain poll, drain) returned; an
  offset seen with two values is inconsistent-offsets' business and left out, a value seen at two
  offsets counts at its lowest (duplicate's business).  Consecutive known positions written by two
  different transactions give an edge from the earlier writer to the later (Jepsen's version
  order: the log's order, skipping the positions nobody learned and those of no transaction).
* **wr** -- a transaction read a value another one sent.
* **process** -- a process's successive transactions.
* **realtime** -- T1 completed before T2 was invoked.  Every such pair would be n^2 edges; Elle
  keeps a transitive reduction (``elle.core/realtime-graph``: each invoke linked from a frontier
  of completed transactions), still about (concurrency) edges per transaction.  Here the order
  goes through *time points* instead, extra nodes that no anomaly counts: each ``ok`` completion
  is a point, the points form a chain in history order, a transaction points to its completion's
  point and the last point before its invoke points to it -- so T1 reaches T2 through points
  exactly when T1 completed before T2 was invoked, with three edges per transaction.  An example
  shows each such passage as one realtime edge.  An ``info`` transaction never completes, so
  nothing follows it.

Two graphs carry these edges.  The G0 family is Elle's, on the *transaction graph* (a node per
transaction).  The G1c family is on the *event graph* (:mod:`checker.txn.event_graph`: a node per
start, micro-op, append, commit and completion), where a ww edge orders two appends and not two
whole transactions -- see :data:`EVENT_SPECS` for why.  The edges are built with pandas/numpy (no
Python loop per edge) and deduplicated, first kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from checker.definitions import G0, G0_PROCESS, G0_REALTIME, G1C, G1C_PROCESS, G1C_REALTIME
from checker.txn.checks import Finding
from checker.txn.event_graph import event_graph
from checker.txn.examples import Position, Views, edge, known
from checker.txn.graph import INTERNAL, KIND_NAMES, PROCESS, REALTIME, WR, WW, CycleSpec, find_cycles
from checker.txn.tables import MISSING, RunTables
from checker.txn.txn_graph import DependencyGraph, dependency_graph

TXN_SPECS: Final[tuple[CycleSpec, ...]] = (
    CycleSpec(G0, frozenset({WW}), frozenset({WW})),
    CycleSpec(G0_PROCESS, frozenset({WW, PROCESS}), frozenset({PROCESS})),
    CycleSpec(G0_REALTIME, frozenset({WW, REALTIME}), frozenset({REALTIME})),
)
"""The G0 family, on the transaction graph (Elle's cycle specs: a ``-process`` cycle holds a
process edge, else it is the plain one).  Warnings: Kafka isolates no transaction's writes, so two
transactions may write x and y in opposite orders (:mod:`checker.txn.registry`)."""
EVENT_SPECS: Final[tuple[CycleSpec, ...]] = (
    CycleSpec(G1C, frozenset({WR, WW, INTERNAL}), frozenset({WR})),
    CycleSpec(G1C_PROCESS, frozenset({WR, WW, INTERNAL, PROCESS}), frozenset({WR, PROCESS})),
    CycleSpec(G1C_REALTIME, frozenset({WR, WW, INTERNAL, REALTIME}), frozenset({WR, REALTIME})),
)
"""The G1c family, on the event graph (:func:`checker.txn.event_graph.event_graph`).

**Why not on the transaction graph.**  Kafka appends the sends of concurrent transactions to a
partition in whatever order they arrive and promises atomic visibility (read_committed), not an
order of transactions: open transactions interleave in the log as a matter of course, and a send
is appended any time between its call and the commit.  A ww edge orders two *appends*, not two
transactions, so a transaction-level cycle through one can be satisfiable: T2 appends, T1 appends
and commits, T2 reads T1's write (wr T1->T2, ww T2->T1) -- seen in healthy two-producer runs
(2026-11-29).  On the event graph the same ww edge joins the two appends only, and T2's append
reaches T2's read only if T2 called that send *after* the read: the cycle exists exactly when the
history contradicts itself (every edge is a "happened before"), which is what an error must mean.
So ww takes part again: Elle's "G1c via wr then ww" is found when the reader wrote after it read,
and the healthy interleaving is not.  A cycle needs a wr edge to be G1c; one of ww and process or
realtime edges alone is the G0 family's, reported on the transaction graph as warnings."""
SPECS: Final[tuple[CycleSpec, ...]] = TXN_SPECS + EVENT_SPECS
"""Every cycle anomaly's spec, the G0 family's then the G1c family's."""
WHY_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    WW: ("partition", "offset", "value", "next_offset", "next_value"),
    WR: ("partition", "offset", "value"),
    PROCESS: ("process",),
    REALTIME: (),
    INTERNAL: (),
}
"""What each edge kind's evidence (``why``) holds, in order."""
MAX_STEPS_SHOWN: Final = 32
"""The steps a cycle's example shows at most (a cycle through a large component may be long)."""


def _steps(graph: DependencyGraph, edges: Sequence[int], invoked: dict[int, int]) -> list[dict[str, Any]]:
    """The cycle's edges between transactions: a passage through time points as one realtime
    edge, the event graph's internal edges left out (they join events of one transaction)."""
    owner = graph.owner
    start = next(i for i, e in enumerate(edges) if owner[graph.src[e]] >= 0 and graph.kind[e] != INTERNAL)
    rotated = [*edges[start:], *edges[:start]]
    steps: list[dict[str, Any]] = []
    for e in rotated:
        kind, source, target = graph.kind[e], owner[graph.src[e]], owner[graph.dst[e]]
        if kind == INTERNAL:
            continue
        if source < 0:
            if target >= 0:  # the passage through points ends here
                steps[-1]["to"] = graph.txns[target]
                steps[-1]["invoked"] = invoked[graph.txns[target]]
            continue
        why: dict[str, Any] = dict(zip(WHY_FIELDS[kind], graph.why[e], strict=True))
        if kind == REALTIME:
            why = {"completed": graph.txns[source], "invoked": None}
        elif kind in (WW, WR):
            why["offset"] = known(why["offset"])
        steps.append(
            edge(KIND_NAMES[kind], graph.txns[source], graph.txns[target] if target >= 0 else -1, **why)
        )
    return steps


def _example(
    graph: DependencyGraph, edges: Sequence[int], views: Views, invoked: dict[int, int]
) -> dict[str, Any]:
    """The cycle's transactions in order, its steps and ``length`` (steps); a cycle longer than
    :data:`MAX_STEPS_SHOWN` shows its first steps only (``results.json`` stays small)."""
    steps = _steps(graph, edges, invoked)
    length = len(steps)
    steps = steps[:MAX_STEPS_SHOWN]
    shown: dict[int, list[Position]] = {}
    for step in steps:
        if step["kind"] == "wr":
            offset = MISSING if step["offset"] is None else step["offset"]
            shown.setdefault(step["to"], []).append((step["partition"], offset, step["value"]))
    order = [step["from"] for step in steps]
    txns = [views.txn(t, shown.get(t, ())) for t in order]
    return {"cycle": order, "length": length, "steps": steps, "txns": txns}


def cycle_findings(
    tables: RunTables, views: Views, checks: Iterable[str], read_committed: bool = True
) -> list[Finding]:
    """One finding per cycle that :func:`checker.txn.graph.find_cycles` finds for the asked
    anomalies: the G0 family's on the transaction graph, the G1c family's on the event graph
    (whose wr edges leave the writer's commit under ``read_committed``, its append otherwise)."""
    asked = set(checks)
    invoked = dict(zip(tables.txns["txn"].tolist(), tables.txns["invoke_index"].tolist(), strict=True))
    findings = []
    for specs, build_graph in (
        ([spec for spec in TXN_SPECS if spec.name in asked], dependency_graph),
        (
            [spec for spec in EVENT_SPECS if spec.name in asked],
            lambda tables, realtime: event_graph(tables, realtime, read_committed),
        ),
    ):
        if specs:
            graph = build_graph(tables, any(REALTIME in spec.allowed for spec in specs))
            findings += _graph_findings(graph, specs, views, invoked)
    return findings


def _graph_findings(
    graph: DependencyGraph, specs: list[CycleSpec], views: Views, invoked: dict[int, int]
) -> list[Finding]:
    findings = []
    for cycle in find_cycles(graph.size, graph.src, graph.dst, graph.kind, specs):
        lowest = min(
            graph.txns[graph.owner[graph.src[e]]] for e in cycle.edges if graph.owner[graph.src[e]] >= 0
        )

        def build(edges: tuple[int, ...] = cycle.edges) -> dict[str, Any]:
            return _example(graph, edges, views, invoked)

        findings.append(Finding(cycle.name, lowest, MISSING, build))
    return findings
