"""How long the transactional checks take at 10 k and 100 k transactions per run, beside networkx.

Usage: ``.venv/bin/python -m bench.txn_cycles [--sizes 10000 100000] [--planted 5]``

A synthetic run: ``--processes`` processes run rounds of concurrent transactions (every process
invokes, then every process completes), each sending two values to random partitions and reading
one value an earlier round wrote; offsets follow commit order, so the log holds no cycle but the
``--planted`` G0 pairs (two concurrent transactions whose sends to two partitions land in opposite
orders).  For each size it prints:

* ``pipeline`` -- :func:`checker.txn.run.run_anomalies` on the run's rows, every check (tables,
  graph, realtime frontier, Tarjan, cycle search, examples);
* ``graph`` -- building the transaction graph, then :func:`checker.txn.graph.find_cycles` alone
  (the G0 family); ``event_graph`` -- the same for the event graph and the G1c family;
* ``networkx`` -- the reference on the same edges: ``strongly_connected_components`` of the
  union and, per component of the ww edges, ``find_cycle`` (a cycle, not a shortest one: less
  than ours does);

and checks that both find the planted components.  networkx is a dev dependency of this script
only (the checker does not import it).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import networkx as nx  # type: ignore[import-untyped]  # a dev dependency of this script alone
import pandas as pd

from checker.definitions import TXN_CHECKS
from checker.txn.cycles import EVENT_SPECS, TXN_SPECS
from checker.txn.event_graph import event_graph
from checker.txn.graph import WW, find_cycles
from checker.txn.run import RunSettings, run_anomalies
from checker.txn.tables import INPUT_COLUMNS, build, normalized
from checker.txn.txn_graph import dependency_graph
from testbed.record.history import F_TXN, F_TXN_END, F_TXN_POLL, F_TXN_SEND

PARTITIONS = 8


def _txn_rows(
    index: int, time_ns: int, process: int, micro: list[tuple[int, int, int, int]]
) -> list[list[int]]:
    """The completion's rows: (f, item, partition, offset, value) per micro-op, then its end."""
    rows = [[1, index, time_ns, process, 1, F_TXN, -1, -1, -1, -1, 0]]
    for f, item, partition, offset, value in ((m[0], n, m[1], m[2], m[3]) for n, m in enumerate(micro)):
        rows.append([1, index, time_ns, process, 1, f, item, partition, offset, value, 0])
    rows.append([1, index, time_ns, process, 1, F_TXN_END, len(micro), -1, -1, time_ns - 1, 1])
    return rows


def synthetic_rows(txns: int, processes: int, planted: int, seed: int = 1) -> pd.DataFrame:
    """A run's input rows (:data:`checker.txn.tables.INPUT_COLUMNS`) as described in the module docstring."""
    rng = random.Random(seed)
    ends = [0] * PARTITIONS
    written: list[tuple[int, int, int]] = []
    rows: list[list[int]] = []
    index, value, done = 0, 0, 0
    plant_rounds = set(rng.sample(range(max(1, txns // processes - 1)), min(planted, txns // processes - 1)))
    for number in range(txns // processes):
        for process in range(processes):
            rows.append([1, index + process, 10 * (index + process), process, 0, F_TXN, -1, -1, -1, -1, 0])
        index += processes
        sends: list[list[tuple[int, int, int, int]]] = []
        for _ in range(processes):
            a, b = rng.sample(range(PARTITIONS), 2)
            sends.append([(F_TXN_SEND, a, 0, value), (F_TXN_SEND, b, 0, value + 1)])
            value += 2
        if number in plant_rounds:  # the first two transactions write partitions 0 and 1 in opposite orders
            sends[0] = [(F_TXN_SEND, 0, 0, sends[0][0][3]), (F_TXN_SEND, 1, 0, sends[0][1][3])]
            sends[1] = [(F_TXN_SEND, 1, 0, sends[1][0][3]), (F_TXN_SEND, 0, 0, sends[1][1][3])]
        placed = _place(sends, ends, number in plant_rounds)
        for process, micro in enumerate(placed):
            if written:
                micro = [*micro, (F_TXN_POLL, *rng.choice(written))]
            rows += _txn_rows(index, 10 * index, process, micro)
            index += 1
        written += [(m[1], m[2], m[3]) for micro in placed for m in micro]
        done += processes
    return pd.DataFrame(rows, columns=list(INPUT_COLUMNS)).astype({"complete": bool})


def _place(
    sends: list[list[tuple[int, int, int, int]]], ends: list[int], planted: bool
) -> list[list[tuple[int, int, int, int]]]:
    """Offsets in commit order; a planted pair's second partition gets the second txn's send first."""
    placed = [[(f, p, -1, v) for f, p, _, v in micro] for micro in sends]
    order = [(t, n) for t in range(len(sends)) for n in range(len(sends[t]))]
    if planted:
        order.remove((1, 0))
        order.insert(order.index((0, 1)), (1, 0))
    for t, n in order:
        f, p, _, v = placed[t][n]
        placed[t][n] = (f, p, ends[p], v)
        ends[p] += 1
    return placed


def _networkx(n: int, src: list[int], dst: list[int], kind: list[int]) -> int:
    """Components of the ww edges that networkx finds a cycle in (after the union's SCCs)."""
    union = nx.DiGraph()
    union.add_nodes_from(range(n))
    union.add_edges_from(zip(src, dst, strict=True))
    big = [c for c in nx.strongly_connected_components(union) if len(c) > 1]
    ww = nx.DiGraph()
    ww.add_edges_from((a, b) for a, b, k in zip(src, dst, kind, strict=True) if k == WW)
    found = 0
    for component in nx.strongly_connected_components(
        ww.subgraph(set().union(*big)) if big else ww.subgraph([])
    ):
        if len(component) > 1 and nx.find_cycle(ww.subgraph(component)):
            found += 1
    return found


def measure(size: int, processes: int, planted: int) -> dict[str, Any]:
    rows = synthetic_rows(size, processes, planted)
    settings = RunSettings(True, frozenset())
    started = time.perf_counter()
    answer = run_anomalies(rows, settings, frozenset(TXN_CHECKS), 5)
    pipeline = time.perf_counter() - started
    tables = build(normalized(rows))
    started = time.perf_counter()
    graph = dependency_graph(tables, realtime=True)
    built = time.perf_counter() - started
    started = time.perf_counter()
    cycles = find_cycles(graph.size, graph.src, graph.dst, graph.kind, TXN_SPECS)
    searched = time.perf_counter() - started
    started = time.perf_counter()
    events = event_graph(tables, realtime=True, read_committed=True)
    events_built = time.perf_counter() - started
    started = time.perf_counter()
    event_cycles = find_cycles(events.size, events.src, events.dst, events.kind, EVENT_SPECS)
    events_searched = time.perf_counter() - started
    started = time.perf_counter()
    reference = _networkx(graph.size, graph.src, graph.dst, graph.kind)
    networkx_s = time.perf_counter() - started
    totals = answer.drop_duplicates("kind").set_index("kind")["total"].to_dict()
    return {
        "txns": len(graph.txns),
        "edges": len(graph.src),
        "pipeline_s": round(pipeline, 3),
        "graph_build_s": round(built, 3),
        "find_cycles_s": round(searched, 3),
        "event_edges": len(events.src),
        "event_graph_build_s": round(events_built, 3),
        "event_find_cycles_s": round(events_searched, 3),
        "g1c_family_ours": len(event_cycles),
        "networkx_s": round(networkx_s, 3),
        "g0_ours": sum(1 for c in cycles if c.name == "G0"),
        "g0_networkx": reference,
        "found": totals,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--planted", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes:
        print(measure(size, args.processes, args.planted), flush=True)


if __name__ == "__main__":
    main()
