"""Benchmark: Spark engine vs pandas engine vs a DuckDB reference on generated Parquet histories.

    .venv/bin/python bench/checker.py --sizes 1M,10M,50M [--data /tmp/tidemark-bench] [--rounds 1]

For each size it generates (once, cached in ``--data``) run directories of ``--run-size``
history rows each -- sends (invoke + ok), consumer poll records, final drain records --
plus three replicas per run, with planted lost writes, duplicates and divergent replica
positions.  Then, in one invocation and interleaved round by round, it times the three
core checks (lost-write, replica-divergence, duplicate):

* ``spark``  -- the real checker (``checker.driver`` + ``SparkEngine``, ``local[2]``), which
  also produces the stats and examples of ``results.json``; session start is timed apart;
* ``pandas`` -- the real checker with the pandas engine (only up to ``--pandas-max``);
* ``duckdb`` -- a bench-only SQL implementation of the same three checks (counts plus
  five examples each), as a reference for how fast a scan can go on this machine.

Each measurement runs in its own subprocess, which samples the RSS of itself and every
descendant (the Spark JVM included) to report the peak.  Every engine's counts are
compared with the planted counts.  No timing is asserted anywhere; the numbers are printed.

Read the figures as ranges over ``--rounds``: on this project's (Firecracker) VMs, memory a
process touches for the first time cost up to 2.5 ms per MB, against 0.1 ms once the VM had
backed it, so one engine's time moved by 30-50% from round to round (measured: a fresh
process touching 100 MB took 0.28 s, 0.08 s, 0.01 s in three runs).  Engines that hold
more memory (pandas, the Spark heap) are hit hardest; DuckDB streams.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.history import HISTORY_SCHEMA, ROW_GROUP_ROWS, parquet_metadata, write_parquet
from harness.replicas import REPLICA_PARTITIONS_SCHEMA, REPLICAS_SCHEMA, record_identity

PARTITIONS = 8
NODES = ("n1", "n2", "n3")
PLANT_RATE = 1e-4  # of values: lost writes, duplicates, divergent positions each


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


# ---------------------------------------------------------------- data generation


def _column(
    values: np.ndarray[Any, Any] | None, kind: pa.DataType, n: int, mask: np.ndarray[Any, Any] | None = None
) -> pa.Array:
    if values is None:
        return pa.nulls(n, kind)
    return pa.array(values, type=kind, mask=mask)


def _keys(values: np.ndarray[Any, Any]) -> pa.Array:
    dictionary = pa.array([f"k{i}" for i in range(16)])
    return pa.DictionaryArray.from_arrays(pa.array(values % 16, pa.int32()), dictionary).dictionary_decode()


def generate_run(run_dir: Path, rows: int, seed: int) -> dict[str, int]:
    """One run of about ``rows`` history rows; returns the planted counts."""
    rng = np.random.default_rng(seed)
    values_n = int(rows / 3.5)
    value = np.arange(values_n, dtype=np.int64) + seed * 10_000_000_000
    partition = (np.arange(values_n) % PARTITIONS).astype(np.int32)
    offset = (np.arange(values_n) // PARTITIONS).astype(np.int64)
    planted = max(1, int(values_n * PLANT_RATE))
    lost = np.zeros(values_n, dtype=bool)
    lost[rng.choice(values_n, planted, replace=False)] = True
    kept = ~lost
    duplicated = rng.choice(np.flatnonzero(kept), planted, replace=False)

    # sends: invoke then ok, indexes 0 .. 2V-1
    send_n = 2 * values_n
    s_index = np.arange(send_n, dtype=np.int64)
    s_value = np.repeat(value, 2)
    s_type = np.tile(np.array([0, 1], dtype=np.int8), values_n)
    s_offset_mask = s_type == 0
    s_offset = np.repeat(offset, 2)
    # polls: the first half of each partition's kept records, 10 per poll op
    poll_rows = np.flatnonzero(kept & (offset < offset.max() // 2))
    p_n = len(poll_rows)
    p_index = send_n + np.arange(p_n, dtype=np.int64) // 10
    # drains: every kept record plus the duplicates, one drain op per partition
    d_rows = np.concatenate([np.flatnonzero(kept), duplicated])
    d_n = len(d_rows)
    d_offset = np.concatenate([offset[kept], offset.max() + 1 + np.arange(planted)])
    d_partition = partition[d_rows]
    order = np.lexsort((d_offset, d_partition))
    d_rows, d_offset, d_partition = d_rows[order], d_offset[order], d_partition[order]
    d_index = p_index[-1] + 1 + d_partition.astype(np.int64) if p_n else send_n + d_partition.astype(np.int64)

    n = send_n + p_n + d_n
    f = np.concatenate([np.zeros(send_n, np.int8), np.ones(p_n, np.int8), np.full(d_n, 2, np.int8)])
    all_values = np.concatenate([s_value, value[poll_rows], value[d_rows]])
    columns = {
        "run_id": pa.array(np.full(n, seed + 1, np.int64)),
        "index": pa.array(np.concatenate([s_index, p_index, d_index])),
        "time": pa.array(np.concatenate([s_index, p_index, d_index]) * 1000),
        "process": pa.array(
            np.concatenate(
                [np.repeat(value % 64, 2), 1000 + partition[poll_rows], 2000 + d_partition]
            ).astype(np.int32)
        ),
        "type": pa.array(np.concatenate([s_type, np.ones(p_n + d_n, np.int8)])),
        "f": pa.array(f),
        "f_name": pa.DictionaryArray.from_arrays(
            pa.array(f.astype(np.int32)), pa.array(["send", "poll", "drain"])
        ).dictionary_decode(),
        "shape": pa.array(
            np.concatenate([np.full(send_n, 2, np.int8), np.full(p_n, 3, np.int8), np.full(d_n, 4, np.int8)])
        ),
        "item": _column(
            np.concatenate(
                [np.zeros(send_n, np.int32), np.arange(p_n, dtype=np.int32) % 10, d_offset.astype(np.int32)]
            ),
            pa.int32(),
            n,
            np.concatenate([np.ones(send_n, bool), np.zeros(p_n + d_n, bool)]),
        ),
        "partition": pa.array(np.concatenate([np.repeat(partition, 2), partition[poll_rows], d_partition])),
        "offset": _column(
            np.concatenate([s_offset, offset[poll_rows], d_offset]),
            pa.int64(),
            n,
            np.concatenate([s_offset_mask, np.zeros(p_n + d_n, bool)]),
        ),
        "key": _keys(all_values),
        "value": pa.array(all_values),
        "value_text": pa.nulls(n, pa.string()),
        "end_offset": _column(np.full(n, offset.max() + 1 + planted), pa.int64(), n, f != 2),
        "complete": _column(np.ones(n, bool), pa.bool_(), n, f != 2),
        "inherited": pa.array(np.zeros(n, bool)),
        "error": pa.nulls(n, pa.string()),
        "node": pa.nulls(n, pa.string()),
        "payload": pa.nulls(n, pa.string()),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    history = pa.table(columns, schema=HISTORY_SCHEMA).replace_schema_metadata(
        parquet_metadata(seed + 1, "history", {"skipped_line_count": "0", "skipped_lines": "[]"})
    )
    write_parquet(history, run_dir / "history.parquet")

    # replicas: every node holds the drained log; n3 differs at planted positions
    log_values, log_partition, log_offset = value[d_rows], d_partition, d_offset
    m = len(log_values)
    text = pc.cast(pa.array(log_values), pa.string())
    diverged = np.zeros(m, bool)
    diverged[rng.choice(m, planted, replace=False)] = True
    n3_text = pc.if_else(pa.array(diverged), pc.binary_join_element_wise("x", text, ""), text)
    replica = {
        "run_id": pa.array(np.full(3 * m, seed + 1, np.int64)),
        "node": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(3, dtype=np.int32), m)), pa.array(list(NODES))
        ).dictionary_decode(),
        "topic": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(3 * m, np.int32)), pa.array(["queue"])
        ).dictionary_decode(),
        "partition": pa.array(np.tile(log_partition, 3)),
        "offset": pa.array(np.tile(log_offset, 3)),
        "leader_epoch": pa.array(np.ones(3 * m, np.int32)),
        "key": pa.concat_arrays([_keys(log_values)] * 3),
        "value": pa.concat_arrays([text, text, n3_text]),
        "value_int": pa.concat_arrays([pa.array(log_values)] * 2 + [pa.array(log_values, mask=diverged)]),
    }
    keys = replica["key"]
    replica["record_id"] = pa.array(record_identity(keys, replica["value"]))
    replica["node_index"] = pa.array(np.repeat(np.arange(3, dtype=np.int16), m))
    meta = {"nodes": json.dumps(list(NODES)), "missing_nodes": "{}"}
    replicas = pa.table(replica, schema=REPLICAS_SCHEMA).sort_by(
        [("partition", "ascending"), ("offset", "ascending"), ("node_index", "ascending")]
    )
    write_parquet(
        replicas.replace_schema_metadata(parquet_metadata(seed + 1, "replicas", meta)),
        run_dir / "replicas.parquet",
    )
    end = int(offset.max() + 1 + planted)
    parts = [
        {
            "run_id": seed + 1,
            "node": node,
            "topic": "queue",
            "partition": p,
            "high_watermark": end,
            "log_end_offset": end,
            "log_start_offset": 0,
            "epochs": "[[1, 0]]",
        }
        for node in NODES
        for p in range(PARTITIONS)
    ]
    write_parquet(
        pa.Table.from_pylist(parts, schema=REPLICA_PARTITIONS_SCHEMA).replace_schema_metadata(
            parquet_metadata(seed + 1, "replica-partitions", meta)
        ),
        run_dir / "replica_partitions.parquet",
    )
    spec = {
        "schema_version": 1,
        "name": "bench",
        "topic": "queue",
        "workload": {"name": "queue", "partitions": PARTITIONS, "acks": "all"},
        "broker_config": {},
        "nemesis": {"faults": ["kill"]},
        "scenario": None,
        "nodes": list(NODES),
    }
    (run_dir / "test.json").write_text(json.dumps(spec))
    counts = {
        "lost-write": planted,
        "duplicate": planted,
        "replica-divergence": planted,
        "history_rows": n,
        "replica_rows": 3 * m,
    }
    (run_dir / "planted.json").write_text(json.dumps(counts))
    return counts


def dataset(root: Path, total: int, run_size: int) -> list[Path]:
    target = root / f"{total}-rows-per-group-{ROW_GROUP_ROWS}"  # a new layout is generated afresh
    runs = [target / f"run-{i:04d}" for i in range(max(1, total // run_size))]
    for number, run_dir in enumerate(runs):
        if not (run_dir / "planted.json").is_file():
            generate_run(run_dir, min(run_size, total), seed=number)
    return runs


# ---------------------------------------------------------------- engines (in a subprocess)


def _tree_rss(root: int) -> int:
    """RSS in bytes of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return total


def _duckdb(runs: list[Path]) -> dict[str, int]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    hist = "[" + ",".join(f"'{r / 'history.parquet'}'" for r in runs) + "]"
    reps = "[" + ",".join(f"'{r / 'replicas.parquet'}'" for r in runs) + "]"
    con.execute(f"""
        CREATE TEMP TABLE complete AS SELECT run_id, partition, bool_or(complete) AS complete
        FROM read_parquet({hist}) WHERE f = 2 AND type = 1 GROUP BY ALL""")
    con.execute(f"""
        CREATE TEMP TABLE flagged AS
        WITH v AS (
          SELECT run_id, partition, value,
                 max(CASE WHEN f = 0 AND type = 1 THEN 1 ELSE 0 END) AS acked,
                 sum(CASE WHEN f = 2 THEN 1 ELSE 0 END) AS drained,
                 max(CASE WHEN f = 0 AND type <> 0 THEN "index" END) AS send_index,
                 min(CASE WHEN f IN (1, 2) THEN "offset" END) AS lo,
                 max(CASE WHEN f IN (1, 2) THEN "offset" END) AS hi
          FROM read_parquet({hist}) WHERE f <= 2 AND value IS NOT NULL GROUP BY ALL)
        SELECT v.*, (acked = 1 AND drained = 0 AND coalesce(c.complete, false)) AS lost, (lo <> hi) AS dup
        FROM v LEFT JOIN complete c USING (run_id, partition) WHERE (acked = 1 AND drained = 0) OR lo <> hi""")
    lost = con.execute(
        "SELECT count(*) FILTER (WHERE lost), count(*) FILTER (WHERE dup) FROM flagged"
    ).fetchone()
    con.execute("SELECT * FROM flagged WHERE lost ORDER BY run_id, partition, value LIMIT 5").fetchall()
    diverged = con.execute(f"""
        SELECT count(*) FROM (SELECT run_id, partition, "offset" FROM read_parquet({reps}) WHERE topic = 'queue'
        GROUP BY ALL HAVING min(hash(key, value)) <> max(hash(key, value)))""").fetchone()
    assert lost is not None and diverged is not None
    return {"lost-write": lost[0], "duplicate": lost[1], "replica-divergence": diverged[0]}


def _checker(runs: list[Path], engine_name: str) -> tuple[dict[str, int], float]:
    from checker.definitions import CORE_CHECKS, DEFAULT_EXAMPLE_LIMIT
    from checker.driver import check_pass
    from checker.evidence import load_run

    start_session = time.perf_counter()
    session = None
    if engine_name == "spark":
        from checker.engine_spark import SparkEngine
        from checker.spark_session import build_session

        session = build_session("local[2]", driver_memory="3g")
        engine: Any = SparkEngine(session)
    else:
        from checker.engine_pandas import PandasEngine

        engine = PandasEngine()
    session_seconds = time.perf_counter() - start_session
    started = time.perf_counter()
    results = check_pass(engine, [load_run(r) for r in runs], CORE_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    counts = {k: sum(r["anomalies"].get(k, {}).get("count", 0) for r in results) for k in CORE_CHECKS}
    counts["_seconds"] = time.perf_counter() - started  # type: ignore[assignment]
    if session is not None:
        engine.close()
        session.stop()
    return counts, session_seconds


def worker(engine: str, runs: list[Path]) -> None:
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.25):
            peak[0] = max(peak[0], _tree_rss(os.getpid()))

    threading.Thread(target=sample, daemon=True).start()
    session = 0.0
    started = time.perf_counter()
    if engine == "duckdb":
        counts: dict[str, Any] = dict(_duckdb(runs))
        counts["_seconds"] = time.perf_counter() - started
    else:
        counts, session = _checker(runs, engine)
    done.set()
    peak[0] = max(peak[0], _tree_rss(os.getpid()))
    seconds = counts.pop("_seconds")
    print(
        json.dumps(
            {
                "engine": engine,
                "seconds": seconds,
                "session_seconds": session,
                "peak_rss": peak[0],
                "counts": counts,
            }
        )
    )


# ---------------------------------------------------------------- orchestration


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        default="1M,10M",
        help="history sizes in rows (default 1M,10M; add 50M for the full target)",
    )
    parser.add_argument("--data", default="/tmp/tidemark-bench", help="where generated runs are cached")
    parser.add_argument("--run-size", default="1M", help="history rows per run directory (default 1M)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument("--pandas-max", default="10M", help="largest size the pandas engine is run on")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("runs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, [Path(r) for r in args.runs])
        return
    print(
        f"{'size':>6} {'engine':>7} {'wall s':>8} {'ops/s':>12} {'peak RSS':>9} {'session s':>9}  vs duckdb  counts"
    )
    for size_text in args.sizes.split(","):
        total = _size(size_text)
        generated = time.perf_counter()
        runs = dataset(Path(args.data), total, _size(args.run_size))
        planted = [json.loads((r / "planted.json").read_text()) for r in runs]
        rows = sum(p["history_rows"] for p in planted)
        expected = {k: sum(p[k] for p in planted) for k in ("lost-write", "duplicate", "replica-divergence")}
        print(
            f"# {size_text}: {len(runs)} run(s), {rows:,} history rows, {sum(p['replica_rows'] for p in planted):,} replica rows "
            f"(ready in {time.perf_counter() - generated:.0f} s); planted {expected}",
            flush=True,
        )
        engines = ["duckdb", "spark"] + (["pandas"] if total <= _size(args.pandas_max) else [])
        for _ in range(args.rounds):
            duck = None
            for engine in engines:
                command = [sys.executable, __file__, "--worker", engine, *map(str, runs)]
                out = (
                    subprocess.run(command, check=True, capture_output=True, text=True)
                    .stdout.strip()
                    .splitlines()[-1]
                )
                result = json.loads(out)
                duck = result["seconds"] if engine == "duckdb" else duck
                ratio = f"{result['seconds'] / duck:8.2f}x" if duck else "        -"
                verdict = "ok" if result["counts"] == expected else f"MISMATCH {result['counts']}"
                print(
                    f"{size_text:>6} {engine:>7} {result['seconds']:8.1f} {rows / result['seconds']:12,.0f} "
                    f"{result['peak_rss'] / 2**30:8.2f}G {result['session_seconds']:9.1f} {ratio}  {verdict}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
