"""Benchmark: Spark engine vs pandas engine vs a DuckDB reference on generated Parquet histories.

    .venv/bin/python bench/checker.py --sizes 1M,10M,50M [--data /tmp/tidemark-bench] [--rounds 1]
    .venv/bin/python bench/checker.py --sizes 10M/10k,10M/1k,50M/1M --rounds 2   # many small runs

A size ``TOTAL/RUN`` is TOTAL history rows in runs of RUN rows each (a plain TOTAL uses
``--run-size``): the store users accumulate is thousands of runs of 10-30 k rows, where the
per-run and per-file costs, not the rows, decide the time.

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

With ``--packed`` the same runs are also packed (``tidemark store pack``, :mod:`checker.pack`; once,
cached beside the runs, its time printed apart and never inside a check's) and two more rows per
round time ``duckdb@packed`` and ``spark@packed`` over the packed store: the bench's SQL over the
packed tables' directories, and the real checker over the runs of the store's index.  Their ratio
is to the same round's DuckDB on the run directories, as for every row, and also to
``duckdb@packed`` (printed in brackets).

With ``--floor`` one more row per round (two with ``--packed``), ``spark-sql``: the DuckDB
reference's own SQL text run by Spark SQL in a fresh session, over the inputs as the checker
presents them (bucketed tables), its two scans at once -- the same work as the DuckDB row, no
examples per run, no ``results.json``.  It is the floor under the Spark checker on the shape:
what a fresh Spark JVM needs for the bare aggregations, before anything the checker adds.

With ``--warm`` one more row per round, ``spark-warm``: the ``spark`` row's pass through a Spark
Connect server started once for the invocation, after an untimed warm-up pass
(``bench/connect_warm.py``) -- what a campaign's or hunt's checks cost on their long-lived server.
With ``--warm --floor`` also ``spark-sql-warm``: the floor's queries through that server, after an
untimed pass of them (``bench/spark_floor.py``) -- the warm floor, which bounds the warm row.

With ``--checks all`` two more rows per round, ``spark+all`` and ``pandas+all``, run every check
(:data:`checker.definitions.ALL_CHECKS`: the order, group, white-box and liveness checks too)
over the same runs, reported apart so the core three stay comparable with earlier figures; each
also prints the wall time of every question of the pass (:data:`checker.driver.QUESTIONS`) --
the time from the previous answer of the same chain (the driver answers the history questions
in one thread and the replica, white-box, liveness and row-count questions in another) -- so the
cost of the liveness job on a big pass is measured, not guessed.  The synthetic runs have no
nemesis ops or broker event logs, so those questions measure their scans, not their findings.

Each measurement runs in its own subprocess, which samples the RSS of itself and every
descendant (the Spark JVM included) to report the peak (``peak RSS``), and reports apart the
peak of the driver -- the Python process, ``ru_maxrss`` -- and of the JVM -- its ``VmHWM``, the
kernel's high-water mark, sampled while it lives (``driver``, ``JVM``; 0 without a JVM).  Every engine's counts are
compared with the planted counts.  No timing is asserted anywhere; the numbers are printed,
a line per measurement and, last, each engine's min-max over the rounds (wall time and
ratio to the same round's DuckDB).

Read the figures as ranges over ``--rounds``: on this project's (Firecracker) VMs, memory a
process touches for the first time cost up to 2.5 ms per MB, against 0.1 ms once the VM had
backed it, so one engine's time moved by 30-50% from round to round (measured: a fresh
process touching 100 MB took 0.28 s, 0.08 s, 0.01 s in three runs).  Engines that hold
more memory (pandas, the Spark heap) are hit hardest; DuckDB streams.  The pandas engine
runs right after the Spark JVM has given back its ~1.3 GB, which it pays for: at 1 M ops
it measured 0.39-0.6 s there against 0.28-0.36 s run alone (``--worker pandas RUN_DIR``)
in the same minutes, DuckDB 0.17-0.19 s either way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.connect_warm import WARM, WARM_FLOOR, start_warm_server, warm_checker, warm_floor
from bench.measure import PeakSampler, checker_engine, local_session, print_ranges, run_worker, timed_pass
from bench.spark_floor import floor_pass, reference_queries
from checker.synthetic_runs import generate_run
from testbed.record.history import PARQUET_LAYOUT


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


# ---------------------------------------------------------------- data generation


PACKED_SUFFIX = "@packed"
"""An engine name with this suffix reads the packed store of the runs (``--packed``)."""


def packed_dataset(runs: list[Path]) -> tuple[Path, float | None]:
    """The packed store of ``runs`` (beside them) and the seconds packing took (None: cached)."""
    from checker.api import load_runs
    from checker.pack import pack_runs, remove_partial
    from testbed.record.packed import is_packed

    target = runs[0].parent.with_name(runs[0].parent.name + "-packed")
    if is_packed(target):
        return target, None
    remove_partial(target)
    started = time.perf_counter()
    pack_runs(load_runs(runs), target)
    return target, time.perf_counter() - started


def dataset(root: Path, total: int, run_size: int) -> list[Path]:
    # A new layout is generated afresh; the run size is part of the name, since the same total
    # in runs of another size is another data set.
    target = root / f"{total}-by-{run_size}-{PARQUET_LAYOUT}"
    runs = [target / f"run-{i:04d}" for i in range(max(1, total // run_size))]
    for number, run_dir in enumerate(runs):
        if not (run_dir / "planted.json").is_file():
            generate_run(run_dir, min(run_size, total), seed=number)
    return runs


# ---------------------------------------------------------------- engines (in a subprocess)


def _duckdb(runs: list[Path], packed: bool = False) -> dict[str, int]:
    import duckdb

    from testbed.record.packed import HISTORY, REPLICAS

    con = duckdb.connect()
    con.execute("SET threads = 2")
    if packed:  # runs: the packed store; its tables' directories as globs
        hist, reps = (f"read_parquet('{runs[0] / table}/*.parquet')" for table in (HISTORY, REPLICAS))
    else:
        hist = "read_parquet([" + ",".join(f"'{r / 'history.parquet'}'" for r in runs) + "])"
        reps = "read_parquet([" + ",".join(f"'{r / 'replicas.parquet'}'" for r in runs) + "])"
    flagged, counts, examples, diverged = reference_queries(hist, reps, '"')
    con.execute(f"CREATE TEMP TABLE flagged AS {flagged}")
    lost = con.execute(counts).fetchone()
    con.execute(examples).fetchall()
    divergence = con.execute(diverged).fetchone()
    assert lost is not None and divergence is not None
    return {"lost-write": lost[0], "duplicate": lost[1], "replica-divergence": divergence[0]}


def _load_runs(runs: list[Path], packed: bool) -> list[Any]:
    """The runs as the checker loads them: from the packed store's index (``runs[0]``) or their directories."""
    from checker.evidence import load_run
    from checker.packed_runs import load_packed

    return load_packed(runs[0]) if packed else [load_run(r) for r in runs]


def _spark_sql(runs: list[Path], packed: bool) -> tuple[dict[str, int], float, float]:
    """The reference's own queries run by Spark SQL in a fresh session (:func:`bench.spark_floor.floor_pass`):
    the floor under the Spark checker -- the same JVM, inputs presented as the checker presents them,
    but no examples per run, no details, no ``results.json``.  Counts, wall seconds, session seconds."""
    start_session = time.perf_counter()
    session = local_session()
    session_seconds = time.perf_counter() - start_session
    try:
        found, seconds = floor_pass(session, lambda: _load_runs(runs, packed), SAMPLER.sample_java)
    finally:
        session.stop()
    return found, seconds, session_seconds


SPARK_SQL = "spark-sql"
"""The floor row (``--floor``): the DuckDB reference's queries run by Spark SQL (:func:`_spark_sql`)."""
ALL_SUFFIX = "+all"
"""An engine name with this suffix runs every check, not the core three (``--checks all``)."""


def _checker(runs: list[Path], engine_name: str) -> tuple[dict[str, Any], float]:
    from checker.definitions import ALL_CHECKS, CORE_CHECKS

    packed = engine_name.endswith(PACKED_SUFFIX)
    engine_name = engine_name.removesuffix(PACKED_SUFFIX)
    every_check = engine_name.endswith(ALL_SUFFIX)
    engine_name = engine_name.removesuffix(ALL_SUFFIX)
    with checker_engine(engine_name, SAMPLER) as (engine, session_seconds):
        _, results, seconds, questions = timed_pass(
            engine, lambda: _load_runs(runs, packed), ALL_CHECKS if every_check else CORE_CHECKS
        )
    counts: dict[str, Any] = {
        k: sum(r["anomalies"].get(k, {}).get("count", 0) for r in results) for k in CORE_CHECKS
    }
    counts["_seconds"] = seconds
    counts["_questions"] = questions
    return counts, session_seconds


SAMPLER = PeakSampler()
"""The worker's memory sampler (started by :func:`worker`)."""


def worker(engine: str, runs: list[Path]) -> None:
    SAMPLER.start()
    session = 0.0
    started = time.perf_counter()
    if engine.removesuffix(PACKED_SUFFIX) == "duckdb":
        counts: dict[str, Any] = dict(_duckdb(runs, packed=engine.endswith(PACKED_SUFFIX)))
        counts["_seconds"] = time.perf_counter() - started
    elif engine.removesuffix(PACKED_SUFFIX) == SPARK_SQL:
        found, seconds, session = _spark_sql(runs, packed=engine.endswith(PACKED_SUFFIX))
        counts = {**found, "_seconds": seconds}
    elif engine == WARM:
        counts, session = warm_checker(runs)
    elif engine == WARM_FLOOR:
        found, seconds, session = warm_floor(runs)
        counts = {**found, "_seconds": seconds}
    else:
        counts, session = _checker(runs, engine)
    memory = SAMPLER.stop()
    seconds = counts.pop("_seconds")
    questions = counts.pop("_questions", {})
    print(
        json.dumps(
            {
                "engine": engine,
                "seconds": seconds,
                "session_seconds": session,
                **memory,
                "counts": counts,
                "questions": questions,
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
        help="history sizes in rows, TOTAL or TOTAL/RUN (default 1M,10M; add 50M for the full target)",
    )
    parser.add_argument("--data", default="/tmp/tidemark-bench", help="where generated runs are cached")
    parser.add_argument("--run-size", default="1M", help="history rows per run directory (default 1M)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument("--pandas-max", default="10M", help="largest size the pandas engine is run on")
    parser.add_argument(
        "--checks",
        choices=("core", "all"),
        default="core",
        help="all: also time every check (spark+all, pandas+all rows, with each question's time)",
    )
    parser.add_argument(
        "--packed",
        action="store_true",
        help="also pack the runs (tidemark store pack, timed apart) and time duckdb@packed and spark@packed",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time spark-sql: the DuckDB reference's own queries run by Spark SQL (the floor)",
    )
    parser.add_argument(
        "--only",
        help="time only these rows (comma-separated, e.g. spark@packed,spark-sql@packed); the DuckDB rows always run",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help=f"also time {WARM}: the spark row's pass through a running Spark Connect server, after a warm-up pass",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("runs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, [Path(r) for r in args.runs])
        return
    start_warm_server(args.warm)  # one server for the whole invocation (bench/connect_warm.py)
    print(
        f"{'size':>6} {'engine':>16} {'wall s':>8} {'ops/s':>12} {'peak RSS':>9} {'driver':>7} {'JVM':>6} "
        f"{'session s':>9}  vs duckdb  counts"
    )
    # (size, engine) -> [(wall seconds, seconds / DuckDB's of the same round)] for the closing ranges.
    measured: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for size_text in args.sizes.split(","):
        total_text, _, run_text = size_text.partition("/")
        total, run_size = _size(total_text), _size(run_text or args.run_size)
        generated = time.perf_counter()
        runs = dataset(Path(args.data), total, run_size)
        planted = [json.loads((r / "planted.json").read_text()) for r in runs]
        rows = sum(p["history_rows"] for p in planted)
        expected = {k: sum(p[k] for p in planted) for k in ("lost-write", "duplicate", "replica-divergence")}
        print(
            f"# {size_text}: {len(runs)} run(s), {rows:,} history rows, {sum(p['replica_rows'] for p in planted):,} replica rows "
            f"(ready in {time.perf_counter() - generated:.0f} s); planted {expected}",
            flush=True,
        )
        engines = ["duckdb", "spark", *([WARM] if args.warm else [])]
        engines += ["pandas"] if total <= _size(args.pandas_max) else []
        if args.checks == "all":
            engines += [engine + ALL_SUFFIX for engine in engines if engine != "duckdb"]
        store = None
        if args.packed:
            store, packing = packed_dataset(runs)
            took = "cached" if packing is None else f"packed in {packing:.1f} s"
            print(f"# {size_text}: packed store {store} ({took}, not in any check's time)", flush=True)
            engines += ["duckdb" + PACKED_SUFFIX, "spark" + PACKED_SUFFIX]
        if args.floor:
            engines += [SPARK_SQL] + ([SPARK_SQL + PACKED_SUFFIX] if store is not None else [])
            engines += [WARM_FLOOR] if args.warm else []
        if args.only:
            kept = {
                "duckdb",
                *(["duckdb" + PACKED_SUFFIX] if store is not None else []),
                *args.only.split(","),
            }
            engines = [engine for engine in engines if engine in kept]
        for _ in range(args.rounds):
            duck = duck_packed = None
            for engine in engines:
                sources = [store] if engine.endswith(PACKED_SUFFIX) and store is not None else runs
                result = run_worker(__file__, engine, sources)
                duck = result["seconds"] if engine == "duckdb" else duck
                duck_packed = result["seconds"] if engine == "duckdb" + PACKED_SUFFIX else duck_packed
                ratio = f"{result['seconds'] / duck:8.2f}x" if duck else "        -"
                if engine.endswith(PACKED_SUFFIX) and duck_packed:
                    ratio += f" [{result['seconds'] / duck_packed:.2f}x]"
                measured.setdefault((size_text, engine), []).append(
                    (result["seconds"], result["seconds"] / duck if duck else 0.0)
                )
                verdict = "ok" if result["counts"] == expected else f"MISMATCH {result['counts']}"
                print(
                    f"{size_text:>6} {engine:>16} {result['seconds']:8.1f} {rows / result['seconds']:12,.0f} "
                    f"{result['peak_rss'] / 2**30:8.2f}G {result['driver_peak_rss'] / 2**30:6.2f}G "
                    f"{result['jvm_peak_rss'] / 2**30:5.2f}G {result['session_seconds']:9.1f} {ratio}  {verdict}",
                    flush=True,
                )
                if engine.endswith(ALL_SUFFIX):
                    spent = ", ".join(f"{q} {t:.1f}" for q, t in result["questions"].items())
                    print(f"#      {engine} questions (s): {spent}", flush=True)
    print_ranges(measured, args.rounds, "duckdb")


if __name__ == "__main__":
    main()
