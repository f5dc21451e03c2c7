"""G0 and G1c (and their ``-process`` and ``-realtime`` variants): the dependency graph of one run's
committed transactions and its cycles (definitions: :mod:`checker.definitions`).

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

The edges are built with pandas/numpy (no Python loop per edge) and deduplicated, first kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np
import pandas as pd

from checker.definitions import G0, G0_PROCESS, G0_REALTIME, G1C, G1C_PROCESS, G1C_REALTIME, TYPE_OK
from checker.txn.checks import Finding, writer_frame
from checker.txn.examples import Position, Views, edge, known
from checker.txn.graph import KIND_NAMES, PROCESS, REALTIME, WR, WW, CycleSpec, find_cycles
from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL

SPECS: Final[tuple[CycleSpec, ...]] = (
    CycleSpec(G0, frozenset({WW}), frozenset({WW})),
    CycleSpec(G1C, frozenset({WR}), frozenset({WR})),
    CycleSpec(G0_PROCESS, frozenset({WW, PROCESS}), frozenset({PROCESS})),
    CycleSpec(G1C_PROCESS, frozenset({WR, PROCESS}), frozenset({WR, PROCESS})),
    CycleSpec(G0_REALTIME, frozenset({WW, REALTIME}), frozenset({REALTIME})),
    CycleSpec(G1C_REALTIME, frozenset({WR, REALTIME}), frozenset({WR, REALTIME})),
)
"""Each anomaly's allowed and required edge kinds (Elle's cycle specs: a ``-process`` cycle holds a
process edge, else it is the plain one).

**The G1c family takes no ww edge.**  Kafka appends the sends of concurrent transactions to a
partition in whatever order they arrive and promises atomic visibility (read_committed), not an
order of transactions: open transactions interleave in the log as a matter of course, and a send
is appended any time between its call and the commit.  A ww edge orders two *appends*, not two
transactions, so a cycle through one can be satisfiable: T2 appends, T1 appends and commits, T2
reads T1's write (wr T1->T2, ww T2->T1) -- seen in healthy two-producer runs (2026-11-29), also
with a realtime edge in the cycle (a long transaction that appended before it read).  Jepsen's
Kafka checker infers no ww edges by default (``:ww-deps``) for the same reason.  Without them
every cycle is a contradiction: a wr edge puts the writer's commit before a read inside the
reader, a process or realtime edge a completion before an invocation, so around the cycle each
transaction's commit precedes itself.  The G0 family (log order alone, and with process or
realtime order) stays as warnings.  What is lost: a cycle that needs ww *and* a real-time edge
to be a contradiction (an append below a write committed before the appender began); the
event-level graph that would decide those exactly (appends, reads, commit, start and end of
each transaction as nodes) is the note of issue 33's next step."""
WHY_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    WW: ("partition", "offset", "value", "next_offset", "next_value"),
    WR: ("partition", "offset", "value"),
    PROCESS: ("process",),
    REALTIME: (),
}
"""What each edge kind's evidence (``why``) holds, in order."""
MAX_STEPS_SHOWN: Final = 32
"""The steps a cycle's example shows at most (a cycle through a large component may be long)."""

_Edges = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[tuple[int, ...]]]


class DependencyGraph:
    """Edge arrays over node numbers -- ``txns[n]`` is node n's transaction; the nodes after them
    are the time points (``points[k]`` the completion index of node ``len(txns) + k``) -- each edge
    with its evidence (``why``, :data:`WHY_FIELDS`), no duplicate (source, target, kind)."""

    def __init__(self, txns: list[int], points: list[int], parts: dict[int, _Edges]) -> None:
        self.txns = txns
        self.points = points
        columns: list[list[np.ndarray[Any, Any]]] = [[], [], []]
        why: list[tuple[int, ...]] = []
        for kind, (src, dst, evidence) in parts.items():
            columns[0].append(src)
            columns[1].append(dst)
            columns[2].append(np.full(len(src), kind, dtype=np.int64))
            why += evidence
        stacked = [np.concatenate([*c, np.zeros(0, np.int64)]).astype(np.int64) for c in columns]
        _, first = np.unique(np.stack(stacked, axis=1), axis=0, return_index=True)
        keep = np.sort(first)
        self.src: list[int] = stacked[0][keep].tolist()
        self.dst: list[int] = stacked[1][keep].tolist()
        self.kind: list[int] = stacked[2][keep].tolist()
        self.why: list[tuple[int, ...]] = [why[e] for e in keep.tolist()]

    @property
    def size(self) -> int:
        return len(self.txns) + len(self.points)


def _positions(tables: RunTables, committed: np.ndarray[Any, Any]) -> pd.DataFrame:
    """The known positions (``partition, offset, value``) of the log, one value per offset, one offset per value."""
    sends = tables.sends[np.isin(tables.sends["txn"].to_numpy(), committed) & (tables.sends["offset"] >= 0)]
    reads = tables.reads[tables.reads["offset"] >= 0]
    columns = ["partition", "offset", "value"]
    seen = pd.concat([sends[columns], reads[columns]], ignore_index=True).drop_duplicates()
    single = seen.groupby(["partition", "offset"])["value"].transform("size") == 1
    seen = seen[single].sort_values(columns, kind="stable")
    return seen.drop_duplicates(["partition", "value"]).reset_index(drop=True)


def _ww(tables: RunTables, writers: pd.DataFrame, node: pd.Series) -> _Edges:
    positions = _positions(tables, node.index.to_numpy())
    placed = positions.merge(writers, on=["partition", "value"], how="inner", sort=False)
    placed = placed[placed["txn"].isin(node.index)].sort_values(["partition", "offset"], kind="stable")
    p, o, v = (placed[c].to_numpy() for c in ("partition", "offset", "value"))
    w = node.loc[placed["txn"]].to_numpy()
    step = np.flatnonzero((p[1:] == p[:-1]) & (w[1:] != w[:-1]))
    why: list[tuple[int, ...]] = list(
        zip(
            p[step + 1].tolist(),
            o[step].tolist(),
            v[step].tolist(),
            o[step + 1].tolist(),
            v[step + 1].tolist(),
            strict=True,
        )
    )
    return w[step], w[step + 1], why


def _wr(tables: RunTables, writers: pd.DataFrame, node: pd.Series) -> _Edges:
    reads = tables.reads[(tables.reads["f"] == F_TXN_POLL) & tables.reads["index"].isin(node.index)]
    read = reads.merge(writers, on=["partition", "value"], how="inner", sort=False)
    read = read[read["txn"].isin(node.index) & (read["txn"] != read["index"])]
    why: list[tuple[int, ...]] = list(
        zip(read["partition"].tolist(), read["offset"].tolist(), read["value"].tolist(), strict=True)
    )
    return node.loc[read["txn"]].to_numpy(), node.loc[read["index"]].to_numpy(), why


def _process(txns: pd.DataFrame) -> _Edges:
    ordered = txns.sort_values(["process", "txn"], kind="stable")
    process, number = ordered["process"].to_numpy(), ordered["node"].to_numpy()
    step = np.flatnonzero(process[1:] == process[:-1])
    return number[step], number[step + 1], [(p,) for p in process[step].tolist()]


def _realtime(txns: pd.DataFrame, first_point: int) -> tuple[list[int], _Edges]:
    """The time points (completion indexes) and the realtime edges through them (module docstring)."""
    done = txns[txns["type"] == TYPE_OK].sort_values("txn", kind="stable")
    points = done["txn"].to_numpy()
    point_nodes = first_point + np.arange(len(points))
    before = np.searchsorted(points, txns["invoke_index"].to_numpy(), side="left") - 1
    follows = before >= 0
    src = np.concatenate([done["node"].to_numpy(), point_nodes[:-1], point_nodes[before[follows]]])
    dst = np.concatenate([point_nodes, point_nodes[1:], txns["node"].to_numpy()[follows]])
    return points.tolist(), (src, dst, [()] * len(src))


def dependency_graph(tables: RunTables, realtime: bool) -> DependencyGraph:
    """The committed transactions and their ww, wr, process and (when asked) realtime edges."""
    txns = tables.txns[tables.txns["must_commit"]].reset_index(drop=True)
    txns = txns.assign(node=np.arange(len(txns)))
    node = pd.Series(txns["node"].to_numpy(), index=txns["txn"].to_numpy())
    writers = writer_frame(tables)
    parts = {WW: _ww(tables, writers, node), WR: _wr(tables, writers, node), PROCESS: _process(txns)}
    points: list[int] = []
    if realtime:
        points, parts[REALTIME] = _realtime(txns, len(txns))
    return DependencyGraph(txns["txn"].tolist(), points, parts)


def _steps(graph: DependencyGraph, edges: Sequence[int], invoked: dict[int, int]) -> list[dict[str, Any]]:
    """The cycle's edges between transactions, a passage through time points as one realtime edge."""
    n = len(graph.txns)
    start = next(i for i, e in enumerate(edges) if graph.src[e] < n)
    rotated = [*edges[start:], *edges[:start]]
    steps: list[dict[str, Any]] = []
    for e in rotated:
        source, target = graph.src[e], graph.dst[e]
        if source >= n:
            if target < n:  # the passage through points ends here
                steps[-1]["to"] = graph.txns[target]
                steps[-1]["invoked"] = invoked[graph.txns[target]]
            continue
        kind = graph.kind[e]
        why: dict[str, Any] = dict(zip(WHY_FIELDS[kind], graph.why[e], strict=True))
        if kind == REALTIME:
            why = {"completed": graph.txns[source], "invoked": None}
        elif kind in (WW, WR):
            why["offset"] = known(why["offset"])
        steps.append(
            edge(KIND_NAMES[kind], graph.txns[source], graph.txns[target] if target < n else -1, **why)
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


def cycle_findings(tables: RunTables, views: Views, checks: Iterable[str]) -> list[Finding]:
    """One finding per cycle that :func:`checker.txn.graph.find_cycles` finds for the asked anomalies."""
    specs = [spec for spec in SPECS if spec.name in set(checks)]
    if not specs:
        return []
    graph = dependency_graph(tables, realtime=any(REALTIME in spec.allowed for spec in specs))
    invoked = dict(zip(tables.txns["txn"].tolist(), tables.txns["invoke_index"].tolist(), strict=True))
    findings = []
    for cycle in find_cycles(graph.size, graph.src, graph.dst, graph.kind, specs):
        lowest = min(graph.txns[graph.src[e]] for e in cycle.edges if graph.src[e] < len(graph.txns))

        def build(edges: tuple[int, ...] = cycle.edges) -> dict[str, Any]:
            return _example(graph, edges, views, invoked)

        findings.append(Finding(cycle.name, lowest, MISSING, build))
    return findings
