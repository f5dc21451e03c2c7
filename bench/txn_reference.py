"""The transactional bench's reference: DuckDB SQL for the checks and the graphs' edges, networkx for the cycles.

Written from the definitions (``docs/anomalies.md``, ``docs/history.md``), not from
:mod:`checker.txn`, over the runs' ``history.parquet`` files: what :func:`reference_counts` answers
per run is every count of :data:`CHECKS` that ``results.json`` would show, so the bench can hold
the engines' answers against it (and against what was planted).

* **DuckDB** -- one connection, two threads, the runs in chunks (bounded memory): the value
  family's lost-write and G1a per (partition, value); precommitted-read, int-send-skip,
  int-nonmonotonic-send and torn-transaction per transaction; consumed-twice and consumed-skipped
  per (group, partition, offset) from the send-offsets rows (``f`` 9); and the edges of the two graphs
  each run's cycles are searched in, as integer node ids:

  - the *transaction graph* (the G0 family): a node per committed transaction (its completion
    index), ww between the writers of consecutive known log positions, process order, and real
    time through time points (a point per ``ok`` completion, negative ids, chained in history
    order; a transaction points to its own, the last point before its invoke points to it);
  - the *event graph* (the G1c family): per committed transaction ``S`` (its invoke), each
    micro-op that sent or read ``M``, each send's append ``A``, ``C`` (commit) and ``E``
    (completion), id ``txn * 256 + slot``; internal edges ``S -> M.. -> C -> E`` in call order and
    ``M -> A -> C``; ww between appends at consecutive known positions (internal for one
    writer's two); wr from the writer's ``C`` (``read_committed``; its ``A`` otherwise) to the
    reading ``M``; process ``E -> S``; real time ``E -> point -> .. -> S``.

* **networkx** -- per run and graph, ``strongly_connected_components`` of all the edges; only if
  a component has two nodes or more, per anomaly the components of its allowed edges inside the
  union's, each counted once when it holds an edge of every required kind (such a component
  always holds a closed walk through them: the checker's one cycle per component).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import networkx as nx  # type: ignore[import-untyped]  # a dev dependency of the benches alone
import numpy as np

from checker.definitions import (
    CONSUMED_SKIPPED,
    CONSUMED_TWICE,
    G0,
    G0_PROCESS,
    G0_REALTIME,
    G1A,
    G1C,
    G1C_PROCESS,
    G1C_REALTIME,
    INT_NONMONOTONIC_SEND,
    INT_SEND_SKIP,
    LOST_WRITE,
    PRECOMMITTED_READ,
    TORN_TRANSACTION,
    TXN_CHECKS,
)

CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, G1A, *TXN_CHECKS)
"""The checks the transactional bench runs: the family and the value checks its anomalies need."""
WW, WR, PROCESS, REALTIME, INTERNAL = range(5)
TXN_GRAPH, EVENT_GRAPH = 0, 1
SPECS: Final[dict[int, tuple[tuple[str, frozenset[int], frozenset[int]], ...]]] = {
    TXN_GRAPH: (
        (G0, frozenset({WW}), frozenset({WW})),
        (G0_PROCESS, frozenset({WW, PROCESS}), frozenset({PROCESS})),
        (G0_REALTIME, frozenset({WW, REALTIME}), frozenset({REALTIME})),
    ),
    EVENT_GRAPH: (
        (G1C, frozenset({WR, WW, INTERNAL}), frozenset({WR})),
        (G1C_PROCESS, frozenset({WR, WW, INTERNAL, PROCESS}), frozenset({WR, PROCESS})),
        (G1C_REALTIME, frozenset({WR, WW, INTERNAL, REALTIME}), frozenset({WR, REALTIME})),
    ),
}
"""Per graph, each cycle anomaly: its allowed edge kinds and those it must hold."""
CHUNK_RUNS: Final = 50
"""Runs per DuckDB pass (the edges of one chunk are held in memory at once)."""

_TABLES: Final = """
CREATE OR REPLACE TEMP TABLE r AS
  SELECT run_id, "index" AS idx, time, process, type, f, item, partition,
         coalesce("offset", -1) AS off, value, coalesce(complete, false) AS complete
  FROM read_parquet({files}) WHERE f = 5 OR (f IN (0, 1, 2, 6, 7, 8, 9) AND value IS NOT NULL);
CREATE OR REPLACE TEMP TABLE txns AS
  WITH heads AS (
    SELECT run_id, idx, time, process, type, lag(type) OVER w AS prev_type,
           lag(idx) OVER w AS invoke_index, lag(time) OVER w AS invoke_time
    FROM r WHERE f = 5 WINDOW w AS (PARTITION BY run_id, process ORDER BY idx)),
  ends AS (SELECT run_id, idx, first(value) AS end_time, first(complete) AS committed_end
           FROM r WHERE f = 8 GROUP BY ALL)
  SELECT h.run_id, h.idx AS txn, h.invoke_index, h.invoke_time, h.time, h.process, h.type,
         e.end_time, e.committed_end
  FROM heads h LEFT JOIN ends e USING (run_id, idx) WHERE h.type <> 0 AND h.prev_type = 0;
CREATE OR REPLACE TEMP TABLE sends AS
  SELECT run_id, idx AS txn, item, partition, value, off FROM r WHERE f = 6;
CREATE OR REPLACE TEMP TABLE reads AS
  SELECT run_id, idx, f, time, item, partition, off, value FROM r WHERE f IN (1, 2, 7);
CREATE OR REPLACE TEMP TABLE writers AS
  SELECT run_id, partition, value, min(txn) AS writer FROM sends GROUP BY ALL;
CREATE OR REPLACE TEMP TABLE committed AS
  WITH seen AS (SELECT DISTINCT s.run_id, s.txn FROM sends s
                SEMI JOIN reads x ON x.run_id = s.run_id AND x.partition = s.partition AND x.value = s.value)
  SELECT t.* FROM txns t LEFT JOIN seen USING (run_id, txn)
  WHERE t.type = 1 OR (t.type = 3 AND seen.txn IS NOT NULL);
CREATE OR REPLACE TEMP TABLE sent_offsets AS
  SELECT o.run_id, o.idx AS txn, o.partition, o.off, o.value AS grp, t.type, c.txn IS NOT NULL AS must_commit
  FROM r o JOIN txns t ON t.run_id = o.run_id AND t.txn = o.idx
  LEFT JOIN committed c ON c.run_id = o.run_id AND c.txn = o.idx WHERE o.f = 9;
CREATE OR REPLACE TEMP TABLE processed AS
  SELECT DISTINCT x.run_id, x.idx AS txn, x.partition, x.off, s.grp, s.type, s.must_commit
  FROM reads x JOIN sent_offsets s ON s.run_id = x.run_id AND s.txn = x.idx AND s.partition = x.partition
  WHERE x.f = 7 AND x.off >= 0;
CREATE OR REPLACE TEMP TABLE csends AS
  SELECT s.* FROM sends s SEMI JOIN committed c ON c.run_id = s.run_id AND c.txn = s.txn;
CREATE OR REPLACE TEMP TABLE sitem AS
  SELECT run_id, txn, partition, value, min(item) AS item FROM csends GROUP BY ALL;
CREATE OR REPLACE TEMP TABLE complete AS
  SELECT run_id, partition FROM r WHERE f = 2 AND type = 1 GROUP BY ALL HAVING bool_or(complete);
CREATE OR REPLACE TEMP TABLE placed AS
  WITH seen AS (SELECT DISTINCT * FROM (
      SELECT run_id, partition, off, value FROM csends WHERE off >= 0
      UNION ALL SELECT run_id, partition, off, value FROM reads WHERE off >= 0)),
  single AS (SELECT * FROM seen QUALIFY count(*) OVER (PARTITION BY run_id, partition, off) = 1),
  lowest AS (SELECT run_id, partition, value, min(off) AS off FROM single GROUP BY ALL),
  mine AS (SELECT l.*, w.writer FROM lowest l JOIN writers w USING (run_id, partition, value)
           SEMI JOIN committed c ON c.run_id = l.run_id AND c.txn = w.writer),
  known_at AS (SELECT m.*, s.item FROM mine m
         LEFT JOIN sitem s ON s.run_id = m.run_id AND s.txn = m.writer AND s.partition = m.partition
                           AND s.value = m.value)
  SELECT *, lag(writer) OVER w AS prev_writer, lag(item) OVER w AS prev_item
  FROM known_at WINDOW w AS (PARTITION BY run_id, partition ORDER BY off);
CREATE OR REPLACE TEMP TABLE micro AS
  SELECT DISTINCT * FROM (SELECT run_id, txn, item FROM csends
    UNION ALL SELECT x.run_id, x.idx, x.item FROM reads x
    SEMI JOIN committed c ON c.run_id = x.run_id AND c.txn = x.idx WHERE x.f = 7);
"""

_COUNTS: Final = f"""
WITH v AS (
  SELECT run_id, partition, value, bool_or(f IN (0, 6) AND type = 1) AS acked,
         bool_or(f = 6 AND type = 2) AS aborted, count(*) FILTER (WHERE f = 2) AS drained,
         count(*) FILTER (WHERE f IN (1, 2, 7)) AS read
  FROM r WHERE f IN (0, 1, 2, 6, 7) GROUP BY ALL),
values_found AS (
  SELECT run_id, count(*) FILTER (WHERE acked AND drained = 0 AND c.partition IS NOT NULL) AS lost,
         count(*) FILTER (WHERE aborted AND read > 0) AS g1a
  FROM v LEFT JOIN complete c USING (run_id, partition) GROUP BY run_id),
early AS (
  SELECT x.run_id, count(*) AS n FROM (SELECT DISTINCT run_id, idx, partition, value, time FROM reads WHERE f = 7) x
  JOIN writers w USING (run_id, partition, value) JOIN txns t ON t.run_id = x.run_id AND t.txn = w.writer
  SEMI JOIN settings s ON s.run_id = x.run_id AND s.read_committed
  WHERE (w.writer = x.idx OR x.time < coalesce(t.end_time, t.invoke_time))
    AND NOT coalesce(t.end_time IS NOT NULL AND NOT t.committed_end, false)
  GROUP BY x.run_id),
steps AS (
  SELECT run_id, count(*) FILTER (WHERE d > 1) AS skip, count(*) FILTER (WHERE d < 1) AS back FROM (
    SELECT run_id, off, lag(off) OVER w AS prev, off - lag(off) OVER w AS d FROM csends
    WINDOW w AS (PARTITION BY run_id, txn, partition ORDER BY item))
  WHERE off >= 0 AND prev >= 0 AND d <> 1 GROUP BY run_id),
torn AS (
  SELECT run_id, count(*) AS n FROM (
    SELECT s.run_id, s.txn, bool_or(d.value IS NOT NULL) AS any_kept, bool_and(d.value IS NOT NULL) AS all_kept
    FROM csends s JOIN complete USING (run_id, partition)
    LEFT JOIN (SELECT DISTINCT run_id, partition, value FROM r WHERE f = 2) d USING (run_id, partition, value)
    GROUP BY ALL) WHERE any_kept AND NOT all_kept GROUP BY run_id),
twice AS (
  SELECT run_id, count(*) AS n FROM (SELECT run_id FROM processed WHERE must_commit
    GROUP BY run_id, grp, partition, off HAVING count(DISTINCT txn) > 1) GROUP BY run_id),
frontier AS (SELECT run_id, grp, partition, max(off) AS top FROM sent_offsets WHERE must_commit GROUP BY ALL),
records AS (
  SELECT DISTINCT x.run_id, x.partition, x.off, x.value FROM reads x
  LEFT JOIN writers w USING (run_id, partition, value)
  LEFT JOIN committed c ON c.run_id = x.run_id AND c.txn = w.writer
  WHERE x.off >= 0 AND (w.writer IS NULL OR c.txn IS NOT NULL)),
skipped AS (
  SELECT e.run_id, count(*) AS n FROM records e JOIN frontier f USING (run_id, partition)
  WHERE e.off < f.top AND NOT EXISTS (
    SELECT 1 FROM processed p WHERE p.run_id = e.run_id AND p.grp = f.grp AND p.partition = e.partition
      AND p.off = e.off AND p.type IN (1, 3))
  GROUP BY e.run_id)
SELECT run_id, coalesce(lost, 0) AS "{LOST_WRITE}", coalesce(g1a, 0) AS "{G1A}",
       coalesce(early.n, 0) AS "{PRECOMMITTED_READ}", coalesce(skip, 0) AS "{INT_SEND_SKIP}",
       coalesce(back, 0) AS "{INT_NONMONOTONIC_SEND}", coalesce(torn.n, 0) AS "{TORN_TRANSACTION}",
       coalesce(twice.n, 0) AS "{CONSUMED_TWICE}", coalesce(skipped.n, 0) AS "{CONSUMED_SKIPPED}"
FROM settings LEFT JOIN values_found USING (run_id) LEFT JOIN early USING (run_id)
LEFT JOIN steps USING (run_id) LEFT JOIN torn USING (run_id) LEFT JOIN twice USING (run_id)
LEFT JOIN skipped USING (run_id) ORDER BY run_id
"""

_POINTS: Final = """
  points AS (SELECT run_id, txn, -txn - 1 AS point, lag(-txn - 1) OVER (PARTITION BY run_id ORDER BY txn) AS prev
             FROM committed WHERE type = 1),
  follows AS (SELECT c.run_id, c.txn, p.point FROM committed c
              ASOF JOIN points p ON c.run_id = p.run_id AND c.invoke_index > p.txn),
  order_ AS (SELECT run_id, txn, lag(txn) OVER (PARTITION BY run_id, process ORDER BY txn) AS prev FROM committed)
"""

_TXN_EDGES: Final = f"""
WITH {_POINTS}
SELECT run_id, prev_writer AS src, writer AS dst, {WW} AS kind FROM placed WHERE prev_writer <> writer
UNION ALL SELECT run_id, prev, txn, {PROCESS} FROM order_ WHERE prev IS NOT NULL
UNION ALL SELECT run_id, txn, point, {REALTIME} FROM points
UNION ALL SELECT run_id, prev, point, {REALTIME} FROM points WHERE prev IS NOT NULL
UNION ALL SELECT run_id, point, txn, {REALTIME} FROM follows
ORDER BY run_id
"""

_EVENT_EDGES: Final = f"""
WITH {_POINTS},
  chain AS (SELECT run_id, txn, item, lag(item) OVER w AS prev, lead(item) OVER w AS next
            FROM micro WINDOW w AS (PARTITION BY run_id, txn ORDER BY item)),
  wr AS (SELECT x.run_id, w.writer, x.idx AS reader, x.item, s.read_committed, i.item AS writer_item
         FROM reads x JOIN writers w USING (run_id, partition, value) JOIN settings s USING (run_id)
         JOIN sitem i ON i.run_id = x.run_id AND i.txn = w.writer AND i.partition = x.partition
                      AND i.value = x.value
         SEMI JOIN committed c ON c.run_id = x.run_id AND c.txn = x.idx
         WHERE x.f = 7 AND w.writer <> x.idx)
SELECT run_id, txn * 256 AS src, txn * 256 + 8 + item AS dst, {INTERNAL} AS kind FROM chain WHERE prev IS NULL
UNION ALL SELECT run_id, txn * 256 + 8 + prev, txn * 256 + 8 + item, {INTERNAL} FROM chain WHERE prev IS NOT NULL
UNION ALL SELECT run_id, txn * 256 + 8 + item, txn * 256 + 1, {INTERNAL} FROM chain WHERE next IS NULL
UNION ALL SELECT c.run_id, c.txn * 256, c.txn * 256 + 1, {INTERNAL} FROM committed c
  ANTI JOIN micro m ON m.run_id = c.run_id AND m.txn = c.txn
UNION ALL SELECT run_id, txn * 256 + 1, txn * 256 + 2, {INTERNAL} FROM committed
UNION ALL SELECT run_id, txn * 256 + 8 + item, txn * 256 + 128 + item, {INTERNAL} FROM csends
UNION ALL SELECT run_id, txn * 256 + 128 + item, txn * 256 + 1, {INTERNAL} FROM csends
UNION ALL SELECT run_id, prev_writer * 256 + 128 + prev_item, writer * 256 + 128 + item,
                 CASE WHEN prev_writer = writer THEN {INTERNAL} ELSE {WW} END FROM placed WHERE prev_writer IS NOT NULL
UNION ALL SELECT run_id, CASE WHEN read_committed THEN writer * 256 + 1 ELSE writer * 256 + 128 + writer_item END,
                 reader * 256 + 8 + item, {WR} FROM wr
UNION ALL SELECT run_id, prev * 256 + 2, txn * 256, {PROCESS} FROM order_ WHERE prev IS NOT NULL
UNION ALL SELECT run_id, txn * 256 + 2, point, {REALTIME} FROM points
UNION ALL SELECT run_id, prev, point, {REALTIME} FROM points WHERE prev IS NOT NULL
UNION ALL SELECT run_id, point, txn * 256, {REALTIME} FROM follows
ORDER BY run_id
"""


def cycle_counts(
    src: np.ndarray[Any, Any],
    dst: np.ndarray[Any, Any],
    kind: np.ndarray[Any, Any],
    specs: Sequence[tuple[str, frozenset[int], frozenset[int]]],
) -> dict[str, int]:
    """Per anomaly, the components of its allowed edges that hold every required kind (networkx)."""
    union = nx.DiGraph()
    union.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    component: dict[int, int] = {}
    for number, members in enumerate(nx.strongly_connected_components(union)):
        if len(members) > 1:
            component.update(dict.fromkeys(members, number))
    if not component:
        return {}
    inside = [
        (a, b, k)
        for a, b, k in zip(src.tolist(), dst.tolist(), kind.tolist(), strict=True)
        if a in component and component[a] == component.get(b)
    ]
    found: dict[str, int] = {}
    for name, allowed, required in specs:
        graph = nx.DiGraph()
        graph.add_edges_from((a, b) for a, b, k in inside if k in allowed)
        mine: dict[int, int] = {}
        for number, members in enumerate(nx.strongly_connected_components(graph)):
            if len(members) > 1:
                mine.update(dict.fromkeys(members, number))
        kinds: dict[int, set[int]] = {}
        for a, b, k in inside:
            if k in allowed and a in mine and mine[a] == mine.get(b):
                kinds.setdefault(mine[a], set()).add(k)
        count = sum(1 for held in kinds.values() if required <= held)
        if count:
            found[name] = count
    return found


def _settings(runs: list[Path]) -> list[tuple[int, bool]]:
    """(run_id, read_committed) per run: its history's footer and its ``test.json``."""
    import pyarrow.parquet as pq

    settings = []
    for run in runs:
        meta = pq.read_schema(run / "history.parquet").metadata or {}
        run_id = int(meta[b"tidemark.run_id"])
        workload = json.loads((run / "test.json").read_text()).get("workload") or {}
        settings.append((run_id, workload.get("isolation", "read_committed") == "read_committed"))
    return settings


def _graph_counts(con: Any, query: str, graph: int, found: dict[int, dict[str, int]]) -> float:
    """The cycles of one graph for every run of the chunk, added to ``found``; networkx's seconds."""
    edges = con.execute(query).fetchnumpy()
    run_id = np.asarray(edges["run_id"])
    src, dst, kind = (np.asarray(edges[c], dtype=np.int64) for c in ("src", "dst", "kind"))
    started = time.perf_counter()
    bounds: list[int] = (
        np.flatnonzero(np.r_[True, run_id[1:] != run_id[:-1], True]).tolist() if len(run_id) else []
    )
    for low, high in itertools.pairwise(bounds):
        found[int(run_id[low])].update(
            cycle_counts(src[low:high], dst[low:high], kind[low:high], SPECS[graph])
        )
    return time.perf_counter() - started


def reference_counts(
    runs: list[Path], chunk: int = CHUNK_RUNS
) -> tuple[dict[int, dict[str, int]], float, float]:
    """Per run id, every non-zero count of :data:`CHECKS`; DuckDB's seconds and networkx's."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    found: dict[int, dict[str, int]] = {}
    sql_seconds = graph_seconds = 0.0
    for start in range(0, len(runs), chunk):
        began = time.perf_counter()
        part = runs[start : start + chunk]
        con.execute("CREATE OR REPLACE TEMP TABLE settings (run_id BIGINT, read_committed BOOLEAN)")
        con.executemany("INSERT INTO settings VALUES (?, ?)", _settings(part))
        files = "[" + ",".join(f"'{run / 'history.parquet'}'" for run in part) + "]"
        con.execute(_TABLES.format(files=files))
        counts = con.execute(_COUNTS).fetchall()
        names = [column[0] for column in con.description]
        for row in counts:
            found[int(row[0])] = {k: int(n) for k, n in zip(names[1:], row[1:], strict=True) if n}
        networkx_seconds = _graph_counts(con, _TXN_EDGES, TXN_GRAPH, found)
        networkx_seconds += _graph_counts(con, _EVENT_EDGES, EVENT_GRAPH, found)
        graph_seconds += networkx_seconds
        sql_seconds += time.perf_counter() - began - networkx_seconds
    con.close()
    return found, sql_seconds, graph_seconds
