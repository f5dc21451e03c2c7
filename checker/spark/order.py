"""The order checks of :mod:`checker.definitions` with Spark windows (no UDFs, nothing collected).

Each function takes a pass's history DataFrame and returns the anomalies found, one row per
anomaly with ``run_id, kind`` and :data:`checker.definitions.ORDER_EXAMPLE_COLUMNS`;
:class:`checker.spark.engine.SparkEngine` keeps the first examples of each.  The pandas
engine (:mod:`checker.pandas.order`, the oracle) computes the same rows:

* poll-skip, nonmonotonic-poll and their ``int-`` variants: ``lag`` over (run, consumer,
  partition) ordered by (op index, item); the same op -> ``int-``; a consumer is a process,
  or a group's takeover chain (:mod:`checker.spark.groups`);
* stale-read: ``max(struct(offset, -index))`` over the earlier ops of (run, consumer, partition)
  -- a range frame on the op index ending one below the current op -- gives the highest offset
  read before and the first op that read it; one row per (op, partition), its first stale record;
* nonmonotonic-send: ``lag`` over the acknowledgements of (run, process, partition);
* realtime-order: acknowledgements and the invokes of acknowledged sends, as events of (run,
  partition) ordered by op index: the same ``max(struct(offset, -index))`` over the events
  before an invoke is the highest offset acknowledged before it.

Every window partitions by ``run_id`` first, so on a bucketed table (:mod:`checker.spark.inputs`)
each run is ordered inside the task that read it, without an exchange.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checker.definitions import (
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    ORDER_EXAMPLE_COLUMNS,
    POLL_SKIP,
    REALTIME_ORDER,
    STALE_READ,
    TYPE_INVOKE,
    TYPE_OK,
)
from checker.spark.groups import union_all, with_chain
from testbed.record.history import F_DRAIN, F_POLL, F_SEND

OUTPUT = ["run_id", "kind", *ORDER_EXAMPLE_COLUMNS]

IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {
        POLL_SKIP,
        NONMONOTONIC_POLL,
        INT_POLL_SKIP,
        INT_NONMONOTONIC_POLL,
        STALE_READ,
        NONMONOTONIC_SEND,
        REALTIME_ORDER,
    }
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""


def _output(frame: DataFrame) -> DataFrame:
    """The output columns, those the frame lacks as null longs."""
    return frame.select(
        *[name if name in frame.columns else F.lit(None).cast("long").alias(name) for name in OUTPUT]
    )


def _highest(offset: str = "offset", index: str = "index") -> Column:
    """The larger offset, and of equal offsets the earlier op (max of ``(offset, -index)``)."""
    return F.struct(F.col(offset).alias("offset"), (-F.col(index)).alias("first"))


def poll_order(
    history: DataFrame, checks: frozenset[str], chains: DataFrame | None = None
) -> DataFrame | None:
    """poll-skip, nonmonotonic-poll, int-poll-skip, int-nonmonotonic-poll and stale-read.

    A consumer is a process, or -- for the processes ``chains`` names (``run_id, process,
    chain``: :func:`checker.spark.groups.chains`) -- a group's takeover chain; each example
    names the process of its own (later) read."""
    f = F.col("f")
    placed = F.col("item").isNotNull() & F.col("partition").isNotNull() & F.col("offset").isNotNull()
    read = (f == F_POLL) | (f == F_DRAIN) if STALE_READ in checks else f == F_POLL
    reads = history.where((F.col("type") == TYPE_OK) & placed & F.col("process").isNotNull() & read).select(
        "run_id", "process", "partition", "index", "item", "offset", "f"
    )
    reads = with_chain(reads, chains) if chains is not None else reads.withColumn("chain", F.col("process"))
    parts = []
    pairwise = [
        kind
        for kind in (POLL_SKIP, NONMONOTONIC_POLL, INT_POLL_SKIP, INT_NONMONOTONIC_POLL)
        if kind in checks
    ]
    if pairwise:
        sequence = Window.partitionBy("run_id", "chain", "partition").orderBy("index", "item")
        pairs = (
            reads.where(f == F_POLL)
            .withColumn("prev_index", F.lag("index").over(sequence))
            .withColumn("prev_offset", F.lag("offset").over(sequence))
            .where(F.col("prev_offset").isNotNull())
        )
        delta, inside = F.col("offset") - F.col("prev_offset"), F.col("prev_index") == F.col("index")
        kind = (
            F.when((delta > 1) & ~inside, F.lit(POLL_SKIP))
            .when((delta < 1) & ~inside, F.lit(NONMONOTONIC_POLL))
            .when((delta > 1) & inside, F.lit(INT_POLL_SKIP))
            .when((delta < 1) & inside, F.lit(INT_NONMONOTONIC_POLL))
        )
        parts.append(_output(pairs.withColumn("kind", kind).where(F.col("kind").isin(*pairwise))))
    if STALE_READ in checks:
        parts.append(_stale_reads(reads))
    return union_all(parts)


def _stale_reads(reads: DataFrame) -> DataFrame:
    """Per (op, partition), the first record at or below the highest offset the consumer's earlier ops read."""
    keys = ["run_id", "chain", "partition"]
    earlier = Window.partitionBy(*keys).orderBy("index").rangeBetween(Window.unboundedPreceding, -1)
    known = reads.withColumn("known", F.max(_highest()).over(earlier))
    stale = known.where(F.col("offset") <= F.col("known.offset"))
    first = stale.groupBy(*keys, "process", "index").agg(
        F.min(
            F.struct(
                "item",
                "offset",
                F.col("known.offset").alias("prev_offset"),
                F.col("known.first").alias("first"),
            )
        ).alias("at")
    )
    return _output(
        first.select(
            "run_id",
            "process",
            "partition",
            "index",
            F.col("at.item").alias("item"),
            F.col("at.offset").alias("offset"),
            F.col("at.prev_offset").alias("prev_offset"),
            (-F.col("at.first")).alias("prev_index"),
            F.lit(STALE_READ).alias("kind"),
        )
    )


def send_order(history: DataFrame, checks: frozenset[str]) -> DataFrame | None:
    """nonmonotonic-send and realtime-order."""
    by_process = Window.partitionBy("run_id", "process").orderBy("index")
    sends = (
        history.where((F.col("f") == F_SEND) & F.col("process").isNotNull())
        .select("run_id", "process", "index", "type", "partition", "offset")
        .withColumn(
            "invoke_index",
            F.when(F.lag("type").over(by_process) == TYPE_INVOKE, F.lag("index").over(by_process)),
        )
    )
    acks = sends.where((F.col("type") == TYPE_OK) & (F.col("offset") >= 0) & F.col("partition").isNotNull())
    parts = []
    if NONMONOTONIC_SEND in checks:
        sequence = Window.partitionBy("run_id", "process", "partition").orderBy("index")
        pairs = (
            acks.drop("invoke_index")
            .withColumn("prev_index", F.lag("index").over(sequence))
            .withColumn("prev_offset", F.lag("offset").over(sequence))
            .where(F.col("offset") <= F.col("prev_offset"))
            .withColumn("kind", F.lit(NONMONOTONIC_SEND))
        )
        parts.append(_output(pairs))
    if REALTIME_ORDER in checks:
        parts.append(_realtime(acks))
    return union_all(parts)


def _realtime(acks: DataFrame) -> DataFrame:
    """Acknowledged sends at or below the highest offset acknowledged in their partition before their invoke."""
    done = acks.select("run_id", "partition", F.col("index").alias("at"), _highest().alias("acked"))
    invoked = acks.where(F.col("invoke_index").isNotNull()).select(
        "run_id",
        "partition",
        F.col("invoke_index").alias("at"),
        F.lit(None).cast(done.schema["acked"].dataType).alias("acked"),
        F.struct("process", "index", "offset", "invoke_index").alias("send"),
    )
    events = done.withColumn("send", F.lit(None).cast(invoked.schema["send"].dataType)).unionByName(invoked)
    before = (
        Window.partitionBy("run_id", "partition").orderBy("at").rangeBetween(Window.unboundedPreceding, -1)
    )
    late = (
        events.withColumn("known", F.max("acked").over(before))
        .where(F.col("send").isNotNull() & (F.col("send.offset") <= F.col("known.offset")))
        .select(
            "run_id",
            "partition",
            "send.process",
            "send.index",
            "send.offset",
            "send.invoke_index",
            F.col("known.offset").alias("prev_offset"),
            (-F.col("known.first")).alias("prev_index"),
            F.lit(REALTIME_ORDER).alias("kind"),
        )
    )
    return _output(late)
