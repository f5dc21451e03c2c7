"""The liveness figures (:data:`checker.liveness.LIVENESS_COLUMNS`) in one Spark job.

The same three aggregations as :mod:`checker.pandas.liveness`, the oracle, with the DataFrame API
(no Python UDFs), every window and group keyed by ``run_id`` first, so that on a bucketed table
(:mod:`checker.spark.inputs`) each run is handled inside the task that read it:

* the send period and the highest offset acknowledged before the last heal are windows over
  ``(run)`` and ``(run, partition)`` of the send and poll rows; the fault windows and last heals
  are the driver's small tables (:func:`checker.liveness.fault_tables`), broadcast;
* **gaps**: progress points, the period's ends and the windows clipped to the period, ordered by
  start per (run, partition); ``max(end)`` over the rows before each is where its gap began, and
  ``max(struct(gap, -gap_from))`` picks the longest (of equal ones the earliest);
* **recovery**: ``min`` of the ``ok`` send and the new poll record times at or after the heal;
* **unpolled**: grouped by (run, partition, value), then by (run, partition) into age buckets.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checker.definitions import STALLED, TYPE_OK, UNPOLLED_AGE_EDGES_S
from checker.liveness import LIVENESS_COLUMNS, NS, UNPOLLED_AGE_COLUMNS
from testbed.record.history import F_POLL, F_SEND

IMPLEMENTS: Final[frozenset[str]] = frozenset({STALLED})
"""The registry entries (:mod:`checker.anomalies`) decided from these figures (by :mod:`checker.liveness`)."""
_KEYS = ["run_id", "partition"]


def _sum(columns: list[Column]) -> Column:
    total = columns[0]
    for column in columns[1:]:
        total = total + column
    return total


def liveness(history: DataFrame, windows: DataFrame, heals: DataFrame) -> DataFrame:
    """``run_id`` + :data:`checker.liveness.LIVENESS_COLUMNS` (longs), per (run, partition) with a send.

    ``windows``: ``run_id, start, end``; ``heals``: ``run_id, last_heal`` (both small)."""
    f, kind = F.col("f"), F.col("type")
    is_send = f == F_SEND
    is_poll = (f == F_POLL) & (kind == TYPE_OK) & F.col("item").isNotNull() & F.col("offset").isNotNull()
    rows = history.where(
        (is_send | is_poll) & F.col("run_id").isNotNull() & F.col("partition").isNotNull()
    ).select(
        "run_id",
        F.col("partition").cast("long").alias("partition"),
        is_send.alias("send"),
        (is_send & (kind == TYPE_OK)).alias("ack"),
        "time",
        "offset",
        "value",
    )
    by_run = Window.partitionBy("run_id")
    rows = (
        rows.withColumn("period_start", F.min(F.when(F.col("send"), F.col("time"))).over(by_run))
        .withColumn("period_end", F.max(F.when(F.col("send"), F.col("time"))).over(by_run))
        .join(F.broadcast(heals), "run_id", "left")
    )
    ack, poll, time = F.col("ack"), ~F.col("send"), F.col("time")
    heal = F.col("last_heal")
    known = ack & (F.col("offset") >= 0) & (time < heal)
    rows = rows.withColumn(
        "end_at_heal", F.max(F.when(known, F.col("offset"))).over(Window.partitionBy(*_KEYS))
    )
    new_read = poll & (time >= heal) & (F.col("offset") > F.coalesce(F.col("end_at_heal"), F.lit(-1)))
    base = rows.groupBy(*_KEYS).agg(
        F.max(F.col("send").cast("int")).alias("has_send"),
        F.first("period_start").alias("period_start"),
        F.first("period_end").alias("period_end"),
        F.min(F.when(ack & (time >= heal), time)).alias("first_send"),
        F.min(F.when(new_read, time)).alias("first_poll"),
    )
    base = base.where(F.col("has_send") == 1).drop("has_send")
    return (
        base.join(_gaps(rows, base, windows), _KEYS, "left")
        .join(_unpolled(rows), _KEYS, "left")
        .select(
            "run_id",
            *[
                F.coalesce(F.col(name), F.lit(0)).alias(name)
                if name in ("gap", "unpolled", *UNPOLLED_AGE_COLUMNS)
                else F.col(name)
                for name in LIVENESS_COLUMNS
            ],
        )
    )


def _gaps(rows: DataFrame, base: DataFrame, windows: DataFrame) -> DataFrame:
    """``run_id, partition, gap, gap_from``: the longest stretch without progress or fault."""
    points = rows.where(F.col("ack")).select(*_KEYS, F.col("time").alias("start"), F.col("time").alias("end"))
    periods = base.where(F.col("period_start").isNotNull()).select(*_KEYS, "period_start", "period_end")
    ends = periods.select(*_KEYS, F.col("period_start").alias("start"), F.col("period_start").alias("end"))
    ends = ends.unionByName(
        periods.select(*_KEYS, F.col("period_end").alias("start"), F.col("period_end").alias("end"))
    )
    clipped = (
        periods.join(F.broadcast(windows), "run_id")
        .select(
            *_KEYS,
            F.greatest("start", "period_start").alias("start"),
            F.least("end", "period_end").alias("end"),
        )
        .where(F.col("start") <= F.col("end"))
    )
    items = points.unionByName(ends).unionByName(clipped)
    earlier = Window.partitionBy(*_KEYS).orderBy("start", "end").rowsBetween(Window.unboundedPreceding, -1)
    gaps = (
        items.withColumn("gap_from", F.max("end").over(earlier))
        .withColumn("gap", F.col("start") - F.col("gap_from"))
        .where(F.col("gap") > 0)
    )
    longest = gaps.groupBy(*_KEYS).agg(
        F.max(F.struct("gap", (-F.col("gap_from")).alias("first"))).alias("at")
    )
    return longest.select(*_KEYS, F.col("at.gap").alias("gap"), (-F.col("at.first")).alias("gap_from"))


def _unpolled(rows: DataFrame) -> DataFrame:
    """``run_id, partition, unpolled, unpolled_age_*, unpolled_oldest``: acknowledged values no poll returned."""
    values = (
        rows.where(F.col("value").isNotNull() & (F.col("ack") | ~F.col("send")))
        .groupBy(*_KEYS, "value")
        .agg(
            F.min(F.when(F.col("ack"), F.col("time"))).alias("acked"),
            F.max((~F.col("send")).cast("int")).alias("polled"),
            F.first("period_end").alias("period_end"),
        )
        .where(F.col("acked").isNotNull() & (F.col("polled") == 0))
    )
    age = F.col("period_end") - F.col("acked")
    bucket = _sum([(age >= edge * NS).cast("int") for edge in UNPOLLED_AGE_EDGES_S])
    return values.groupBy(*_KEYS).agg(
        F.count(F.lit(1)).alias("unpolled"),
        *[F.sum((bucket == i).cast("long")).alias(name) for i, name in enumerate(UNPOLLED_AGE_COLUMNS)],
        F.max(age).alias("unpolled_oldest"),
    )
