"""The checker bench's reference SQL, and the floor rows that run it with Spark SQL.

:func:`reference_queries` is the DuckDB reference's SQL for the three core checks (``bench/checker.py``'s
``duckdb`` row); :func:`floor_pass` runs the same text with Spark SQL over the inputs as the checker
presents them (:mod:`checker.spark.inputs`: bucketed tables) -- the bare aggregations, no examples per
run, no ``results.json`` -- which bounds what any change to the Spark checker can reach on a shape.
Two rows run it: ``spark-sql`` in a fresh session (the cold floor, ``bench/checker.py --floor``) and
``spark-sql-warm`` through the warm row's Spark Connect server after one untimed pass (the warm
floor, ``--floor --warm``: :mod:`bench.connect_warm`).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any


def reference_queries(hist: str, reps: str, quote: str) -> tuple[str, str, str, str]:
    """The reference's SQL over the relations ``hist`` and ``reps``, for DuckDB and Spark SQL alike:
    the flagged values (lost or duplicated), their counts, five examples, the diverged positions.

    ``quote`` quotes the identifiers that are keywords (``index``, ``offset``): DuckDB's ``"``,
    Spark's backtick.  The same text runs in both, so the two rows measure the same work.
    """
    index, offset = f"{quote}index{quote}", f"{quote}offset{quote}"
    flagged = f"""
        WITH complete AS (
          SELECT run_id, partition, bool_or(complete) AS complete
          FROM {hist} WHERE f = 2 AND type = 1 GROUP BY run_id, partition),
        v AS (
          SELECT run_id, partition, value,
                 max(CASE WHEN f = 0 AND type = 1 THEN 1 ELSE 0 END) AS acked,
                 sum(CASE WHEN f = 2 THEN 1 ELSE 0 END) AS drained,
                 max(CASE WHEN f = 0 AND type <> 0 THEN {index} END) AS send_index,
                 min(CASE WHEN f IN (1, 2) THEN {offset} END) AS lo,
                 max(CASE WHEN f IN (1, 2) THEN {offset} END) AS hi
          FROM {hist} WHERE f <= 2 AND value IS NOT NULL GROUP BY run_id, partition, value)
        SELECT v.*, (acked = 1 AND drained = 0 AND coalesce(c.complete, false)) AS lost, (lo <> hi) AS dup
        FROM v LEFT JOIN complete c USING (run_id, partition) WHERE (acked = 1 AND drained = 0) OR lo <> hi"""
    counts = "SELECT count(*) FILTER (WHERE lost), count(*) FILTER (WHERE dup) FROM flagged"
    examples = "SELECT * FROM flagged WHERE lost ORDER BY run_id, partition, value LIMIT 5"
    diverged = f"""
        SELECT count(*) FROM (SELECT run_id, partition, {offset} FROM {reps} WHERE topic = 'queue'
        GROUP BY run_id, partition, {offset} HAVING min(hash(key, value)) <> max(hash(key, value)))"""
    return flagged, counts, examples, diverged


def floor_pass(
    session: Any, load: Callable[[], list[Any]], before_close: Callable[[], None] = lambda: None
) -> tuple[dict[str, int], float]:
    """The reference's queries over the runs ``load`` gives, run by Spark SQL in ``session`` (an
    embedded or a Spark Connect one): the counts and the wall seconds, loading included as in the
    checker's rows.  The two scans run at once, as the checker runs them; ``before_close`` is called
    while the session's tables still exist (the cold row samples its JVM's memory there).  The
    cached table and the registered tables are dropped: a Connect server outlives the pass."""
    from checker.spark.inputs import SparkInputs, history_file, replica_file
    from testbed.record.history import HISTORY_SCHEMA
    from testbed.record.replicas import REPLICAS_SCHEMA

    started = time.perf_counter()
    loaded = load()
    inputs = SparkInputs(session)
    try:
        inputs.frame([history_file(run) for run in loaded], HISTORY_SCHEMA).createOrReplaceTempView("hist")
        replica_files = [file for file in map(replica_file, loaded) if file is not None]
        inputs.frame(replica_files, REPLICAS_SCHEMA).createOrReplaceTempView("reps")
        flagged, counts, examples, diverged = reference_queries("hist", "reps", "`")

        def values() -> tuple[Any, ...]:
            session.sql(f"CACHE TABLE flagged AS {flagged}")  # eager, as DuckDB's temp table
            found = session.sql(counts).collect()[0]
            session.sql(examples).collect()
            return tuple(found)

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            other = pool.submit(lambda: session.sql(diverged).collect()[0][0])
            lost, duplicate = values()
            divergence = other.result()
        seconds = time.perf_counter() - started
        before_close()
    finally:
        session.sql("UNCACHE TABLE IF EXISTS flagged")
        inputs.close()
    return {"lost-write": lost, "duplicate": duplicate, "replica-divergence": divergence}, seconds
