"""The transaction graph of one run: its nodes and ww, wr, process and realtime edges as arrays.

What each edge kind means and why the realtime order goes through time points: :mod:`checker.txn.cycles`.
The builders here are shared with the event graph (:mod:`checker.txn.event_graph`), which numbers
its nodes differently: each takes the node columns it links.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from checker.definitions import TYPE_OK
from checker.txn.checks import writer_frame
from checker.txn.graph import PROCESS, REALTIME, WR, WW
from checker.txn.tables import RunTables
from testbed.record.history import F_TXN_POLL

Edges = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[tuple[int, ...]]]


class DependencyGraph:
    """Edge arrays over node numbers, each edge with its evidence (``why``, :data:`WHY_FIELDS`), no
    duplicate (source, target, kind).  ``owner[v]`` is the position in ``txns`` of the transaction
    node v belongs to (the transaction graph: v itself; the event graph: the transaction of the
    event) or -1 for a time point; ``points[k]`` is the completion index of the k-th time point."""

    def __init__(
        self, txns: list[int], owner: np.ndarray[Any, Any], points: list[int], parts: list[tuple[int, Edges]]
    ) -> None:
        self.txns = txns
        self.owner: list[int] = owner.tolist()
        self.points = points
        columns: list[list[np.ndarray[Any, Any]]] = [[], [], []]
        why: list[tuple[int, ...]] = []
        for kind, (src, dst, evidence) in parts:
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
        return len(self.owner)


def known_positions(tables: RunTables, committed: np.ndarray[Any, Any]) -> pd.DataFrame:
    """The known positions (``partition, offset, value``) of the log, one value per offset, one offset per value."""
    sends = tables.sends[np.isin(tables.sends["txn"].to_numpy(), committed) & (tables.sends["offset"] >= 0)]
    reads = tables.reads[tables.reads["offset"] >= 0]
    columns = ["partition", "offset", "value"]
    seen = pd.concat([sends[columns], reads[columns]], ignore_index=True).drop_duplicates()
    single = seen.groupby(["partition", "offset"])["value"].transform("size") == 1
    seen = seen[single].sort_values(columns, kind="stable")
    return seen.drop_duplicates(["partition", "value"]).reset_index(drop=True)


def log_steps(
    placed: pd.DataFrame, writer: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[tuple[int, ...]]]:
    """Over known positions sorted by (partition, offset) and their ``writer`` (any numbering):
    the consecutive pairs (i, i + 1) of one partition written by two writers -- with each pair's
    ww evidence (:data:`checker.txn.cycles.WHY_FIELDS`) -- and those written by one writer."""
    p, o, v = (placed[c].to_numpy() for c in ("partition", "offset", "value"))
    same = p[1:] == p[:-1]
    other = np.flatnonzero(same & (writer[1:] != writer[:-1]))
    own = np.flatnonzero(same & (writer[1:] == writer[:-1]))
    why: list[tuple[int, ...]] = list(
        zip(
            p[other + 1].tolist(),
            o[other].tolist(),
            v[other].tolist(),
            o[other + 1].tolist(),
            v[other + 1].tolist(),
            strict=True,
        )
    )
    return other, own, why


def _ww(tables: RunTables, writers: pd.DataFrame, node: pd.Series) -> Edges:
    positions = known_positions(tables, node.index.to_numpy())
    placed = positions.merge(writers, on=["partition", "value"], how="inner", sort=False)
    placed = placed[placed["txn"].isin(node.index)].sort_values(["partition", "offset"], kind="stable")
    w = node.loc[placed["txn"]].to_numpy()
    step, _, why = log_steps(placed, w)
    return w[step], w[step + 1], why


def _wr(tables: RunTables, writers: pd.DataFrame, node: pd.Series) -> Edges:
    reads = tables.reads[(tables.reads["f"] == F_TXN_POLL) & tables.reads["index"].isin(node.index)]
    read = reads.merge(writers, on=["partition", "value"], how="inner", sort=False)
    read = read[read["txn"].isin(node.index) & (read["txn"] != read["index"])]
    why: list[tuple[int, ...]] = list(
        zip(read["partition"].tolist(), read["offset"].tolist(), read["value"].tolist(), strict=True)
    )
    return node.loc[read["txn"]].to_numpy(), node.loc[read["index"]].to_numpy(), why


def process_edges(txns: pd.DataFrame, source: str = "node", target: str = "node") -> Edges:
    """A process's successive transactions: from the earlier's ``source`` column's node to the
    later's ``target`` one (the event graph: its completion to its start)."""
    ordered = txns.sort_values(["process", "txn"], kind="stable")
    process = ordered["process"].to_numpy()
    step = np.flatnonzero(process[1:] == process[:-1])
    src, dst = ordered[source].to_numpy(), ordered[target].to_numpy()
    return src[step], dst[step + 1], [(p,) for p in process[step].tolist()]


def realtime_edges(
    txns: pd.DataFrame, first_point: int, source: str = "node", target: str = "node"
) -> tuple[list[int], Edges]:
    """The time points (completion indexes) and the realtime edges through them (module docstring):
    from an ``ok`` transaction's ``source`` node to its point, and from the last point before an
    invoke to the transaction's ``target`` node; the points are nodes ``first_point ..``."""
    done = txns[txns["type"] == TYPE_OK].sort_values("txn", kind="stable")
    points = done["txn"].to_numpy()
    point_nodes = first_point + np.arange(len(points))
    before = np.searchsorted(points, txns["invoke_index"].to_numpy(), side="left") - 1
    follows = before >= 0
    src = np.concatenate([done[source].to_numpy(), point_nodes[:-1], point_nodes[before[follows]]])
    dst = np.concatenate([point_nodes, point_nodes[1:], txns[target].to_numpy()[follows]])
    return points.tolist(), (src, dst, [()] * len(src))


def committed_txns(tables: RunTables) -> tuple[pd.DataFrame, pd.Series]:
    """The transactions that must have committed, numbered 0.. (``node``), and that number by ``txn``."""
    txns = tables.txns[tables.txns["must_commit"]].reset_index(drop=True)
    txns = txns.assign(node=np.arange(len(txns)))
    return txns, pd.Series(txns["node"].to_numpy(), index=txns["txn"].to_numpy())


def dependency_graph(tables: RunTables, realtime: bool) -> DependencyGraph:
    """The transaction graph: the committed transactions and their ww, wr, process and (when
    asked) realtime edges."""
    txns, node = committed_txns(tables)
    writers = writer_frame(tables)
    parts = [
        (WW, _ww(tables, writers, node)),
        (WR, _wr(tables, writers, node)),
        (PROCESS, process_edges(txns)),
    ]
    points: list[int] = []
    if realtime:
        points, edges = realtime_edges(txns, len(txns))
        parts.append((REALTIME, edges))
    owner = np.concatenate([np.arange(len(txns)), np.full(len(points), -1)])
    return DependencyGraph(txns["txn"].tolist(), owner, points, parts)
