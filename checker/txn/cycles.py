"""G0 and G1c (and their ``-process`` and ``-realtime`` variants): the dependency graph of one run's
committed transactions and its cycles (definitions: :mod:`checker.definitions`).

Nodes: the transactions that must have committed (``must_commit``, :func:`checker.txn.tables.build`:
``ok``, or ``info`` with a value someone read; ``fail`` ones did not happen, and an ``info`` one
nobody saw may not have).  Edges, each with the evidence its example shows:

* **ww** -- per partition, the *known positions* of the log: every (offset, value) an ``ok`` txn
  send was acknowledged with or a read (txn poll, plain poll, drain) returned; an offset seen
  with two values is inconsistent-offsets' business and left out, a value seen at two offsets
  counts at its lowest (duplicate's business).  Consecutive known positions written by two
  different transactions give an edge from the earlier writer to the later (Jepsen's version
  order: the log's order, skipping the positions nobody learned and those of no transaction).
* **wr** -- a transaction read a value another one sent.
* **process** -- a process's successive transactions.
* **realtime** -- T1 completed before T2 was invoked.  Not every such pair (n^2): Elle's
  transitive reduction (``elle.core/realtime-graph``), a *frontier* of completed transactions --
  each invoke gets an edge from every member of the frontier, and an ``ok`` completion leaves the
  frontier holding itself instead of the members that precede it (its own predecessors).
  About (concurrency) edges per transaction; an ``info`` one never completes, so nothing follows it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Final

import pandas as pd

from checker.definitions import G0, G0_PROCESS, G0_REALTIME, G1C, G1C_PROCESS, G1C_REALTIME, TYPE_OK
from checker.txn.checks import Finding, writers
from checker.txn.examples import Position, Views, edge, known
from checker.txn.graph import KIND_NAMES, PROCESS, REALTIME, WR, WW, CycleSpec, find_cycles
from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL

SPECS: Final[tuple[CycleSpec, ...]] = (
    CycleSpec(G0, frozenset({WW}), frozenset({WW})),
    CycleSpec(G1C, frozenset({WW, WR}), frozenset({WR})),
    CycleSpec(G0_PROCESS, frozenset({WW, PROCESS}), frozenset({PROCESS})),
    CycleSpec(G1C_PROCESS, frozenset({WW, WR, PROCESS}), frozenset({WR, PROCESS})),
    CycleSpec(G0_REALTIME, frozenset({WW, REALTIME}), frozenset({REALTIME})),
    CycleSpec(G1C_REALTIME, frozenset({WW, WR, REALTIME}), frozenset({WR, REALTIME})),
)
"""Each anomaly's allowed and required edge kinds (Elle's cycle specs: a ``-process`` cycle holds a
process edge, else it is the plain one; G1c holds a wr edge, else it is a G0)."""


class _Graph:
    """Edge arrays over node numbers, each edge with its evidence (``why``), no duplicates."""

    def __init__(self, txns: list[int]) -> None:
        self.txns = txns
        self.node = {txn: number for number, txn in enumerate(txns)}
        self.src: list[int] = []
        self.dst: list[int] = []
        self.kind: list[int] = []
        self.why: list[dict[str, Any]] = []
        self._seen: set[tuple[int, int, int]] = set()

    def add(self, kind: int, source: int, target: int, **why: Any) -> None:
        a, b = self.node[source], self.node[target]
        if a == b or (a, b, kind) in self._seen:
            return
        self._seen.add((a, b, kind))
        self.src.append(a)
        self.dst.append(b)
        self.kind.append(kind)
        self.why.append(why)


def _positions(tables: RunTables, committed: set[int]) -> pd.DataFrame:
    """The known positions (``partition, offset, value``) of the log, one value per offset, one offset per value."""
    sends = tables.sends[tables.sends["txn"].isin(committed) & (tables.sends["offset"] >= 0)]
    reads = tables.reads[tables.reads["offset"] >= 0]
    columns = ["partition", "offset", "value"]
    seen = pd.concat([sends[columns], reads[columns]], ignore_index=True).drop_duplicates()
    single = seen.groupby(["partition", "offset"])["value"].transform("size") == 1
    seen = seen[single].sort_values(columns, kind="stable")
    return seen.drop_duplicates(["partition", "value"]).reset_index(drop=True)


def _ww_edges(graph: _Graph, tables: RunTables, writer_of: dict[tuple[int, int], int]) -> None:
    committed = set(graph.txns)
    positions = _positions(tables, committed)
    previous: tuple[int, int, int, int] | None = None  # partition, offset, value, writer
    for p, o, v in zip(*(positions[c].tolist() for c in ("partition", "offset", "value")), strict=True):
        writer = writer_of.get((p, v))
        if writer is None or writer not in committed:
            continue
        if previous is not None and previous[0] == p and previous[3] != writer:
            why = {
                "partition": p,
                "value": previous[2],
                "offset": previous[1],
                "next_value": v,
                "next_offset": o,
            }
            graph.add(WW, previous[3], writer, **why)
        previous = (p, o, v, writer)


def _wr_edges(graph: _Graph, tables: RunTables, writer_of: dict[tuple[int, int], int]) -> None:
    reads = tables.reads[(tables.reads["f"] == F_TXN_POLL) & tables.reads["index"].isin(graph.node)]
    columns = (reads[c].tolist() for c in ("index", "partition", "offset", "value"))
    for reader, p, o, v in zip(*columns, strict=True):
        writer = writer_of.get((p, v))
        if writer is not None and writer in graph.node:
            graph.add(WR, writer, reader, partition=p, value=v, offset=known(o))


def _order_edges(graph: _Graph, txns: pd.DataFrame, realtime: bool) -> None:
    """Process edges and, when asked, the realtime frontier's (see the module docstring)."""
    for process, rows in txns.groupby("process", sort=True):
        ordered = rows["txn"].tolist()
        for a, b in itertools.pairwise(ordered):
            graph.add(PROCESS, a, b, process=int(process))
    if not realtime:
        return
    events = [(i, 0, t) for i, t in zip(txns["invoke_index"].tolist(), txns["txn"].tolist(), strict=True)]
    events += [
        (t, 1, t) for t, k in zip(txns["txn"].tolist(), txns["type"].tolist(), strict=True) if k == TYPE_OK
    ]
    frontier: dict[int, None] = {}
    before: dict[int, list[int]] = {}
    for _, completes, txn in sorted(events):
        if completes:
            for earlier in before.get(txn, ()):
                frontier.pop(earlier, None)
            frontier[txn] = None
        else:
            before[txn] = list(frontier)
            for earlier in before[txn]:
                graph.add(
                    REALTIME, earlier, txn, completed=earlier, invoked=int(txns.loc[txn, "invoke_index"])
                )


def _example(graph: _Graph, edges: Iterable[int], views: Views) -> dict[str, Any]:
    steps = []
    shown: dict[int, list[Position]] = {}
    for e in edges:
        source, target = graph.txns[graph.src[e]], graph.txns[graph.dst[e]]
        why = graph.why[e]
        steps.append(edge(KIND_NAMES[graph.kind[e]], source, target, **why))
        if graph.kind[e] == WR:
            offset = MISSING if why["offset"] is None else why["offset"]
            shown.setdefault(target, []).append((why["partition"], offset, why["value"]))
    order = [step["from"] for step in steps]
    return {"cycle": order, "steps": steps, "txns": [views.txn(t, shown.get(t, ())) for t in order]}


def cycle_findings(tables: RunTables, views: Views, checks: frozenset[str]) -> list[Finding]:
    """One finding per cycle that :func:`checker.txn.graph.find_cycles` finds for the asked anomalies."""
    specs = [spec for spec in SPECS if spec.name in checks]
    if not specs:
        return []
    txns = tables.txns[tables.txns["must_commit"]].set_index("txn", drop=False)
    graph = _Graph(txns["txn"].tolist())
    writer_of = writers(tables)
    _ww_edges(graph, tables, writer_of)
    _wr_edges(graph, tables, writer_of)
    _order_edges(graph, txns, realtime=any(REALTIME in spec.allowed for spec in specs))
    found = find_cycles(len(graph.txns), graph.src, graph.dst, graph.kind, specs)
    findings = []
    for cycle in found:
        example = _example(graph, cycle.edges, views)
        findings.append(Finding(cycle.name, min(example["cycle"]), MISSING, example))
    return findings
