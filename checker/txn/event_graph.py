"""The event graph of one run: a node per event of each committed transaction, an edge per
"happened before" the history proves -- the graph the G1c family's cycles are searched in.

Why events and not transactions (:data:`checker.txn.cycles.EVENT_SPECS`): Kafka orders *appends*
in a partition's log, not transactions, so a ww edge says only that one append came before
another.  Per committed transaction T (numbered p, ``N`` of them) the nodes are

* ``S`` -- T's invoke (node p), ``C`` -- its commit, the moment its writes became visible
  (N + p), ``E`` -- its completion (2N + p);
* ``M`` -- each micro-op that sent or read something, in call order (``item``): the client
  calls them one after another, so ``S -> M1 -> M2 -> ... -> C -> E`` (internal edges);
* ``A`` -- each send's append to its partition's log, some time after its call and before the
  commit: ``M(send) -> A -> C`` (internal).  Two sends of T are not ordered with each other: a
  producer pipelines them.

and the edges between transactions:

* **ww** -- consecutive known positions of a partition (:func:`checker.txn.txn_graph.known_positions`)
  join the two appends (``A -> A``); positions of one writer are joined too, as internal edges;
* **wr** -- under ``read_committed`` a read returned a record after its writer committed:
  ``C(writer) -> M(read)``; under ``read_uncommitted`` only after its append: ``A -> M(read)``;
* **process** -- ``E(T1) -> S(T2)`` for a process's successive transactions;
* **realtime** -- ``E(T1) -> point -> ... -> point -> S(T2)`` through the time points (as in
  the transaction graph: :mod:`checker.txn.cycles`).

Every edge is a "happened before", so a cycle is a history that contradicts itself, and the
healthy interleaving of open transactions (T2 appends, T1 appends and commits, T2 reads T1) closes
none: T2's append reaches T2's read only if T2 called that send after the read.  Size: about seven
nodes and a dozen edges per transaction, twice the transaction graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from checker.txn.checks import writer_frame
from checker.txn.graph import INTERNAL, PROCESS, REALTIME, WR, WW
from checker.txn.tables import RunTables
from checker.txn.txn_graph import (
    DependencyGraph,
    Edges,
    committed_txns,
    known_positions,
    log_steps,
    process_edges,
    realtime_edges,
)
from testbed.record.history import F_TXN_POLL


def _internal(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any]) -> tuple[int, Edges]:
    return INTERNAL, (src, dst, [()] * len(src))


def _micro_ops(tables: RunTables, node: pd.Series, first: int) -> pd.DataFrame:
    """``txn, item, p, m``: each committed transaction's micro-ops that sent or read, node ``m``."""
    sends = tables.sends[["txn", "item"]]
    reads = tables.reads[tables.reads["f"] == F_TXN_POLL][["index", "item"]].rename(columns={"index": "txn"})
    micro = pd.concat([sends, reads], ignore_index=True).drop_duplicates()
    micro = micro[micro["txn"].isin(node.index)].sort_values(
        ["txn", "item"], kind="stable", ignore_index=True
    )
    return micro.assign(p=node.loc[micro["txn"]].to_numpy(), m=first + np.arange(len(micro)))


def _chains(n: int, micro: pd.DataFrame) -> list[tuple[int, Edges]]:
    """``S -> M1 -> ... -> C`` per transaction (``S -> C`` without micro-ops), and ``C -> E``."""
    p, m = micro["p"].to_numpy(), micro["m"].to_numpy()
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]]) if len(p) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:] - 1, len(p) - 1] if len(p) else np.zeros(0, np.int64)
    inner = np.flatnonzero(p[1:] == p[:-1])
    bare = np.setdiff1d(np.arange(n), p)
    every = np.arange(n)
    return [
        _internal(p[starts], m[starts]),  # S -> first micro-op
        _internal(m[inner], m[inner + 1]),  # call order
        _internal(m[ends], n + p[ends]),  # last micro-op -> C
        _internal(bare, n + bare),  # no micro-op: S -> C
        _internal(n + every, 2 * n + every),  # C -> E
    ]


def _appends(tables: RunTables, node: pd.Series, micro: pd.DataFrame, first: int) -> pd.DataFrame:
    """``partition, value, txn, p, m, a``: each committed send and its append's node ``a``."""
    sends = tables.sends[tables.sends["txn"].isin(node.index)][["txn", "item", "partition", "value"]]
    placed = sends.merge(micro, on=["txn", "item"], how="inner", sort=False)
    return placed.reset_index(drop=True).assign(a=first + np.arange(len(placed)))


def _log_order(tables: RunTables, node: pd.Series, appends: pd.DataFrame) -> list[tuple[int, Edges]]:
    """ww between consecutive known positions of two writers' appends; internal for one writer's."""
    writers = writer_frame(tables).merge(
        appends[["txn", "partition", "value", "a"]], on=["txn", "partition", "value"]
    )
    placed = known_positions(tables, node.index.to_numpy()).merge(
        writers, on=["partition", "value"], how="inner"
    )
    placed = placed.sort_values(["partition", "offset"], kind="stable")
    a = placed["a"].to_numpy()
    other, own, why = log_steps(placed, placed["txn"].to_numpy())
    return [(WW, (a[other], a[other + 1], why)), _internal(a[own], a[own + 1])]


def _reads_from(
    tables: RunTables, node: pd.Series, micro: pd.DataFrame, appends: pd.DataFrame, read_committed: bool
) -> Edges:
    """wr: from the writer's commit (read_committed) or append to the reading micro-op."""
    reads = tables.reads[(tables.reads["f"] == F_TXN_POLL) & tables.reads["index"].isin(node.index)]
    reads = reads.rename(columns={"index": "reader"})[["reader", "item", "partition", "offset", "value"]]
    writers = writer_frame(tables).merge(
        appends[["txn", "partition", "value", "a", "p"]], on=["txn", "partition", "value"]
    )
    read = reads.merge(writers, on=["partition", "value"], how="inner", sort=False)
    read = read[read["txn"] != read["reader"]]
    read = read.merge(micro[["txn", "item", "m"]].rename(columns={"txn": "reader"}), on=["reader", "item"])
    source = len(node) + read["p"].to_numpy() if read_committed else read["a"].to_numpy()
    why: list[tuple[int, ...]] = list(
        zip(read["partition"].tolist(), read["offset"].tolist(), read["value"].tolist(), strict=True)
    )
    return source, read["m"].to_numpy(), why


def event_graph(tables: RunTables, realtime: bool, read_committed: bool) -> DependencyGraph:
    """The event graph (module docstring) of the run's committed transactions."""
    txns, node = committed_txns(tables)
    n = len(txns)
    micro = _micro_ops(tables, node, 3 * n)
    appends = _appends(tables, node, micro, 3 * n + len(micro))
    parts = _chains(n, micro)
    parts.append(_internal(appends["m"].to_numpy(), appends["a"].to_numpy()))  # call -> append
    parts.append(_internal(appends["a"].to_numpy(), n + appends["p"].to_numpy()))  # append -> commit
    parts += _log_order(tables, node, appends)
    parts.append((WR, _reads_from(tables, node, micro, appends, read_committed)))
    events = txns.assign(start=txns["node"], end=2 * n + txns["node"])
    parts.append((PROCESS, process_edges(events, source="end", target="start")))
    points: list[int] = []
    size = 3 * n + len(micro) + len(appends)
    if realtime:
        points, edges = realtime_edges(events, size, source="end", target="start")
        parts.append((REALTIME, edges))
    owner = np.concatenate(
        [
            np.tile(np.arange(n), 3),
            micro["p"].to_numpy(),
            appends["p"].to_numpy(),
            np.full(len(points), -1),
        ]
    ).astype(np.int64)
    return DependencyGraph(txns["txn"].tolist(), owner, points, parts)
