"""The white-box checks with Spark: the steps of :mod:`checker.pandas.invariants`, as windows and joins.

Every run's ``events.parquet`` is one DataFrame; each step of the pandas oracle is a window
partitioned by run (and partition, or log) or a join on (run, partition), so thousands of runs are
checked in one job, in parallel, with no Python on the executors:

* ``t`` is the running maximum of ``ts`` over a log in ``seq`` order, ``order`` the
  ``row_number`` over the run by (``t``, ``node_name``, ``seq``);
* truncated-committed and incomplete-leader join their events with the exposures of the same
  (run, partition) before them (``order``) and of admissible epochs, then keep
  ``max(struct(hw, -order, node, seq))``: the highest HW and, of equals, the first exposure;
* hw-regression's "current", "established" and running maximum are windows over the exposures of
  a partition (rows before: ``rowsBetween(unboundedPreceding, -1)``) and of a tenure
  (``last(..., ignorenulls)``);
* isr-divergence takes the controller's last partition state before the first broker
  ``shutdown`` (a window), explodes its ISR, names the members from the brokers' logs, and
  compares the members' dumped records with the leader's in one aggregation of the replicas by
  (run, partition, member, offset) -- each replica row joined (broadcast) to the few pairs of its
  partition, the leader's and the member's identity taken per group, as
  :mod:`checker.spark.replicas` does, with no join of the replicas onto themselves.

The answers are pandas' rows exactly (the parity tests compare whole ``results.json`` files).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checker.controller_log import PARTITION_STATE_KINDS, VERSION_COLUMNS
from checker.definitions import (
    EPOCH_REUSE,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    INVARIANT_ORDER,
    ISR_DIVERGENCE,
    METADATA_ROLLBACK,
    MIN_ISR_VIOLATION,
    TRUNCATED_COMMITTED,
)
from checker.engine import to_pandas
from checker.evidence import RunInput
from checker.pandas.invariants import EVENT_COLUMNS, OUTPUT
from checker.spark.inputs import arrow_frame
from checker.txn import white_box

IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {TRUNCATED_COMMITTED, INCOMPLETE_LEADER, HW_REGRESSION, MIN_ISR_VIOLATION, ISR_DIVERGENCE}
    | {EPOCH_REUSE, METADATA_ROLLBACK}  # the controller's log (checker.controller_log)
    | white_box.CHECKS
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""
_NONE = -1
_TYPES = {
    "run_id": "long",
    "node_name": "string",
    "process": "string",
    "node": "int",
    "seq": "long",
    "ts": "long",
    "kind": "string",
    "topic": "string",
    "partition": "int",
    "role": "string",
    "epoch": "int",
    "leo": "long",
    "hw": "long",
    "old_leo": "long",
    "old_hw": "long",
    "queried_epoch": "int",
    "min_isr": "int",
    "isr": "array<int>",
    "leader": "int",
    "lineage_epoch": "int",
}
EVENTS_DDL = ", ".join(f"`{name}` {_TYPES[name]}" for name in EVENT_COLUMNS)
"""The check columns of ``events.parquet`` (:data:`testbed.record.event_table.EVENTS_SCHEMA`)."""
VERSIONS_DDL = ", ".join(f"`{name}` {_TYPES.get(name, 'string')}" for name in VERSION_COLUMNS)
"""The columns :func:`metadata_rollback` reads (``line`` besides the check columns)."""


def _small(spark: SparkSession, rows: Sequence[tuple[object, ...]], schema: pa.Schema) -> DataFrame:
    """A driver-side table as a DataFrame, by way of Arrow (no Python workers)."""
    table = pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema)
    return arrow_frame(spark, table)


def prepare(events: DataFrame) -> DataFrame:
    """``t`` and ``order``, as :func:`checker.pandas.invariants.prepare`."""
    log = Window.partitionBy("run_id", "node_name").orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)
    events = events.withColumn("t", F.max("ts").over(log))
    in_run = Window.partitionBy("run_id").orderBy("t", "node_name", "seq")
    return events.withColumn("order", F.row_number().over(in_run) - 1)


def exposures(rows: DataFrame) -> DataFrame:
    kind = F.col("kind")
    leader = (kind == "become-leader") | ((kind == "hw") & (F.col("role") == "leader"))
    return rows.where(leader & F.col("hw").isNotNull() & F.col("epoch").isNotNull())


def _highest_before(queries: DataFrame, shown: DataFrame, below: Column, inclusive: bool) -> DataFrame:
    """Per query (``key``): ``bound`` (the highest exposure HW before it, of epochs below
    ``below`` -- or at most, ``inclusive``), ``prev_node``, ``prev_seq`` (the first such exposure)."""
    exposed = shown.select(
        "run_id",
        "partition",
        F.col("order").alias("x_order"),
        F.col("epoch").alias("x_epoch"),
        F.struct(F.col("hw"), (-F.col("order")).alias("first"), "node_name", "seq").alias("x"),
    )
    limit = queries.select("key", "run_id", "partition", "order", below.alias("limit"))
    epoch_ok = F.col("x_epoch") <= F.col("limit") if inclusive else F.col("x_epoch") < F.col("limit")
    best = (
        limit.join(exposed, ["run_id", "partition"])
        .where((F.col("x_order") < F.col("order")) & epoch_ok)
        .groupBy("key")
        .agg(F.max("x").alias("x"))
    )
    return best.select(
        "key",
        F.col("x.hw").alias("bound"),
        F.col("x.node_name").alias("prev_node"),
        F.col("x.seq").alias("prev_seq"),
    )


def _examples(found: DataFrame, kind: str, value: Column, positions: Column, **others: Column) -> DataFrame:
    """``found`` as the output columns (``others`` override the defaults taken from ``found``)."""
    columns = {
        "run_id": F.col("run_id"),
        "kind": F.lit(kind),
        "partition": F.col("partition"),
        "ts": F.col("t"),
        "node": F.col("node_name"),
        "seq": F.col("seq"),
        "value": value.cast("long"),
        "bound": F.col("bound").cast("long"),
        "positions": positions.cast("long"),
        "prev_node": F.col("prev_node"),
        "prev_seq": F.col("prev_seq").cast("long"),
        "peer": F.lit(None).cast("string"),
        **others,
    }
    return found.select(*[column.alias(name) for name, column in columns.items()])


def truncated_committed(rows: DataFrame, shown: DataFrame) -> DataFrame:
    kind = F.col("kind")
    node = Window.partitionBy("run_id", "node_name", "partition").orderBy("order")
    so_far = node.rowsBetween(Window.unboundedPreceding, 0)
    opened = (kind == "replica-opened").cast("long")
    evidence = (
        F.when(kind == "replica-opened", F.coalesce(F.col("lineage_epoch"), F.lit(_NONE)))
        .when(
            (kind == "become-leader") | ((kind == "hw") & (F.col("role") == "follower")),
            F.coalesce(F.col("epoch"), F.lit(_NONE)),
        )
        .otherwise(F.lit(_NONE))
    )
    tracked = rows.withColumn("incarnation", F.sum(opened).over(so_far)).withColumn(
        "tracked",
        F.max(evidence).over(
            Window.partitionBy("run_id", "node_name", "partition", "incarnation")
            .orderBy("order")
            .rowsBetween(Window.unboundedPreceding, 0)
        ),
    )
    cut = (kind == "truncate") & F.col("leo").isNotNull() & F.col("old_leo").isNotNull()
    truncations = (
        tracked.where(cut & (F.col("leo") < F.col("old_leo")))
        .withColumn("lineage", F.coalesce(F.col("queried_epoch"), F.col("tracked")))
        .withColumn("key", F.struct("run_id", "node_name", "seq"))
    )
    found = truncations.join(_highest_before(truncations, shown, F.col("lineage"), True), "key")
    found = found.where(F.col("leo") < F.col("bound"))
    return _examples(found, TRUNCATED_COMMITTED, F.col("leo"), F.least("old_leo", "bound") - F.col("leo"))


def incomplete_leader(shown: DataFrame) -> DataFrame:
    elections = shown.where((F.col("kind") == "become-leader") & F.col("leo").isNotNull()).withColumn(
        "key", F.struct("run_id", "node_name", "seq")
    )
    found = elections.join(_highest_before(elections, shown, F.col("epoch"), False), "key")
    found = found.where(F.col("leo") < F.col("bound"))
    return _examples(found, INCOMPLETE_LEADER, F.col("leo"), F.col("bound") - F.col("leo"))


def hw_regression(shown: DataFrame) -> DataFrame:
    before = (
        Window.partitionBy("run_id", "partition").orderBy("order").rowsBetween(Window.unboundedPreceding, -1)
    )
    tenure = (
        Window.partitionBy("run_id", "partition", "node_name")
        .orderBy("order")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    election = F.col("kind") == "become-leader"
    announced = F.when(election, F.col("epoch")).otherwise(F.lit(_NONE))
    marked = (
        shown.withColumn("current", F.col("epoch") >= F.coalesce(F.max(announced).over(before), F.lit(_NONE)))
        .withColumn("start_leo", F.last(F.when(election, F.col("leo")), ignorenulls=True).over(tenure))
        .withColumn("start_epoch", F.last(F.when(election, F.col("epoch")), ignorenulls=True).over(tenure))
    )
    current_hw = F.when(F.col("current"), F.col("hw")).otherwise(F.lit(_NONE))
    marked = marked.withColumn("bound", F.coalesce(F.max(current_hw).over(before), F.lit(_NONE)))
    established = F.coalesce(
        (F.col("start_epoch") == F.col("epoch")) & (F.col("hw") >= F.col("start_leo")), F.lit(False)
    )
    regressed = marked.where(F.col("current") & established & (F.col("hw") < F.col("bound")))
    first_of_tenure = Window.partitionBy("run_id", "partition", "node_name", "epoch").orderBy("order")
    first = (
        regressed.withColumn("number", F.row_number().over(first_of_tenure))
        .where(F.col("number") == 1)
        .withColumn("key", F.struct("run_id", "node_name", "seq"))
    )
    earlier = marked.where(F.col("current")).select(
        "run_id",
        "partition",
        F.col("hw").alias("x_hw"),
        F.col("order").alias("x_order"),
        F.struct("order", "node_name", "seq").alias("x"),
    )
    prev = (
        first.select("key", "run_id", "partition", "order", "bound")
        .join(earlier, ["run_id", "partition"])
        .where((F.col("x_order") < F.col("order")) & (F.col("x_hw") == F.col("bound")))
        .groupBy("key")
        .agg(F.min("x").alias("x"))
        .select("key", F.col("x.node_name").alias("prev_node"), F.col("x.seq").alias("prev_seq"))
    )
    found = first.join(prev, "key", "left")
    return _examples(found, HW_REGRESSION, F.col("hw"), F.col("bound") - F.col("hw"))


def min_isr_violation(shown: DataFrame) -> DataFrame:
    found = shown.where(
        (F.col("kind") == "hw")
        & F.col("isr").isNotNull()
        & F.col("min_isr").isNotNull()
        & (F.size("isr") < F.col("min_isr"))
    )
    found = found.withColumn("bound", F.col("min_isr")).withColumn("prev_node", F.lit(None).cast("string"))
    found = found.withColumn("prev_seq", F.lit(None).cast("long"))
    return _examples(found, MIN_ISR_VIOLATION, F.size("isr"), F.col("hw") - F.col("old_hw"))


def epoch_reuse(rows: DataFrame) -> DataFrame:
    """The controller's reused leader epochs, as :func:`checker.controller_log.reused_epochs`."""
    states = rows.where(
        (F.col("process") == "controller")
        & F.col("kind").isin(*PARTITION_STATE_KINDS)
        & F.col("epoch").isNotNull()
    )
    before = (
        Window.partitionBy("run_id", "partition").orderBy("order").rowsBetween(Window.unboundedPreceding, -1)
    )
    states = states.withColumn("bound", F.coalesce(F.max("epoch").over(before), F.lit(_NONE)))
    election = F.col("kind") == "election"
    epoch, bound = F.col("epoch"), F.col("bound")
    found = states.where((election & (epoch <= bound)) | (~election & (epoch < bound)))
    first = (
        states.groupBy("run_id", "partition", "epoch")
        .agg(F.min(F.struct("order", "node_name", "seq")).alias("x"))
        .select(
            "run_id",
            "partition",
            F.col("epoch").alias("bound"),
            F.col("x.node_name").alias("prev_node"),
            F.col("x.seq").alias("prev_seq"),
        )
    )
    return _examples(
        found.join(first, ["run_id", "partition", "bound"], "left"), EPOCH_REUSE, epoch, F.lit(1)
    )


def metadata_rollback(read: DataFrame) -> DataFrame:
    """The controller starts below a version their log recorded, as :func:`checker.controller_log.rollbacks`."""
    log = Window.partitionBy("run_id", "node_name").orderBy("seq")
    controller = (
        read.where(F.col("process") == "controller")
        .withColumn("t", F.max("ts").over(log.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("version", F.get_json_object("line", "$.metadata_version").cast("long"))
        .where(F.col("version").isNotNull())
    )
    before = F.coalesce(F.max("version").over(log.rowsBetween(Window.unboundedPreceding, -1)), F.lit(_NONE))
    found = controller.withColumn("bound", before).where(
        (F.col("kind") == "start") & (F.col("version") < F.col("bound"))
    )
    first = controller.groupBy("run_id", "node_name", F.col("version").alias("bound")).agg(
        F.min("seq").alias("prev_seq")
    )
    found = found.join(first, ["run_id", "node_name", "bound"], "left").withColumn(
        "prev_node", F.col("node_name")
    )
    return _examples(
        found,
        METADATA_ROLLBACK,
        F.col("version"),
        F.col("bound") - F.col("version"),
        partition=F.lit(None).cast("int"),
    )


def final_isr(events: DataFrame, rows: DataFrame) -> DataFrame:
    """``run_id, partition, leader, member, prev_node, prev_seq``, as
    :func:`checker.pandas.invariants.final_isr`."""
    broker = F.col("process") == "broker"
    cutoff = (
        events.where((F.col("kind") == "shutdown") & broker)
        .groupBy("run_id")
        .agg(F.min("order").alias("cutoff"))
    )
    states = rows.where(
        (F.col("process") == "controller")
        & F.col("kind").isin(*PARTITION_STATE_KINDS)
        & F.col("leader").isNotNull()
        & F.col("isr").isNotNull()
    )
    states = states.join(cutoff, "run_id", "left").where(
        F.col("order") < F.coalesce(F.col("cutoff"), F.lit(2**63 - 1))
    )
    latest = Window.partitionBy("run_id", "partition").orderBy(F.col("order").desc())
    last = states.withColumn("number", F.row_number().over(latest)).where(F.col("number") == 1)
    last = last.where(F.col("leader") >= 0)
    members = last.select(
        "run_id",
        "partition",
        F.col("leader").alias("leader_id"),
        F.explode("isr").alias("member_id"),
        F.col("node_name").alias("prev_node"),
        F.col("seq").alias("prev_seq"),
    ).where(F.col("member_id") != F.col("leader_id"))
    names = events.where(broker).groupBy("run_id", "node").agg(F.min("node_name").alias("name"))
    leader_names = names.select("run_id", F.col("node").alias("leader_id"), F.col("name").alias("leader"))
    member_names = names.select("run_id", F.col("node").alias("member_id"), F.col("name").alias("member"))
    named = members.join(leader_names, ["run_id", "leader_id"]).join(member_names, ["run_id", "member_id"])
    return named.select("run_id", "partition", "leader", "member", "prev_node", "prev_seq").distinct()


def isr_divergence(
    spark: SparkSession, pairs: DataFrame, replicas: DataFrame, runs: list[RunInput]
) -> DataFrame | None:
    """Positions below the leader's dumped HW where an ISR member's record differs or is missing.

    ``replicas``: the runs' replica rows of their topics (``run_id`` is the replicas' run id)."""
    dumped: list[tuple[object, ...]] = []
    marks: list[tuple[object, ...]] = []
    for run in runs:
        if run.replicas_path is None or run.replicas_run_id is None:
            continue
        for index, node in enumerate(run.replica_nodes):
            if node not in run.missing_nodes:
                dumped.append((run.events_run_id, run.replicas_run_id, node, index))
            marks.extend(
                (run.events_run_id, node, p, mark) for p, mark in run.high_watermarks.get(node, {}).items()
            )
    if not dumped:
        return None
    nodes = _small(
        spark,
        dumped,
        pa.schema(
            [("run_id", pa.int64()), ("rid", pa.int64()), ("node", pa.string()), ("index", pa.int16())]
        ),
    )
    hws = _small(
        spark,
        marks,
        pa.schema(
            [("run_id", pa.int64()), ("leader", pa.string()), ("partition", pa.int32()), ("hw", pa.int64())]
        ),
    )
    leaders = nodes.select(
        "run_id", "rid", F.col("node").alias("leader"), F.col("index").alias("leader_index")
    )
    members = nodes.select("run_id", F.col("node").alias("member"), F.col("index").alias("member_index"))
    placed = (
        pairs.join(F.broadcast(leaders), ["run_id", "leader"])
        .join(F.broadcast(members), ["run_id", "member"])
        .join(F.broadcast(hws), ["run_id", "leader", "partition"], "left")
        .withColumn("hw", F.coalesce(F.col("hw"), F.lit(0)))
    )
    keys = placed.select(F.col("rid").alias("run_id"), "partition", "leader_index", "member_index", "hw")
    is_leader = F.col("node_index") == F.col("leader_index")
    is_member = F.col("node_index") == F.col("member_index")
    positions = (
        replicas.select("run_id", "partition", "offset", "node_index", "record_id")
        .join(F.broadcast(keys), ["run_id", "partition"])
        .where((is_leader | is_member) & (F.col("offset") < F.col("hw")))
        .groupBy("run_id", "partition", "member_index", "offset")
        .agg(
            F.max(F.when(is_leader, F.col("record_id"))).alias("held"),
            F.max(F.when(is_member, F.col("record_id"))).alias("copy"),
        )
        .where(F.col("held").isNotNull() & (F.col("copy").isNull() | (F.col("copy") != F.col("held"))))
        .groupBy(F.col("run_id").alias("rid"), "partition", "member_index")
        .agg(F.min("offset").alias("offset"), F.count(F.lit(1)).alias("positions"))
    )
    found = placed.join(positions, ["rid", "partition", "member_index"])
    return _examples(
        found,
        ISR_DIVERGENCE,
        F.col("offset"),
        F.col("positions"),
        ts=F.lit(None).cast("long"),
        node=F.col("member"),
        seq=F.lit(None).cast("long"),
        bound=F.col("hw").cast("long"),
        peer=F.col("leader"),
    )


def top(found: DataFrame, limit: int) -> DataFrame:
    """The first ``limit`` rows per (run, kind) in :data:`INVARIANT_ORDER` (nulls first), with ``total``
    (rows; for isr-divergence, positions)."""
    weight = F.when(F.col("kind") == ISR_DIVERGENCE, F.col("positions")).otherwise(F.lit(1)).cast("long")
    ordered = Window.partitionBy("run_id", "kind").orderBy(
        *[F.col(c).asc_nulls_first() for c in INVARIANT_ORDER]
    )
    return (
        found.withColumn("_rank", F.row_number().over(ordered))
        .withColumn("total", F.sum(weight).over(Window.partitionBy("run_id", "kind")))
        .where(F.col("_rank") <= limit)
        .select(*OUTPUT)
    )


def transaction_invariants(spark: SparkSession, runs: list[RunInput], checks: frozenset[str]) -> DataFrame:
    """The transactional white-box checks (those of ``checks``) per run with ``applyInPandas``
    over the run's transaction, ``hw`` and role events (with their ``line``):
    :mod:`checker.txn.white_box`, the one implementation; ``runs`` are its transactional runs."""
    topics = {int(run.events_run_id): run.topic for run in runs if run.events_run_id is not None}
    paths = list(dict.fromkeys(str(run.events_path.resolve()) for run in runs if run.events_path is not None))
    events = spark.read.schema(white_box.INPUT_DDL).parquet(*paths)
    events = events.where(F.col("kind").isin(*white_box.EVENT_KINDS) & F.col("run_id").isin(list(topics)))
    return events.groupBy("run_id").applyInPandas(
        white_box.spark_function(topics, checks), white_box.OUTPUT_DDL
    )


def pass_anomalies(
    spark: SparkSession, runs: list[RunInput], replicas: DataFrame | None, checks: frozenset[str], limit: int
) -> pd.DataFrame:
    """The white-box checks among ``checks`` for the runs with event logs, in one job."""
    runs = [run for run in runs if run.events_path is not None and run.events_run_id is not None]
    if not runs:
        return pd.DataFrame(columns=OUTPUT)
    # A packed file (testbed.record.packed) holds many runs' events: each read once, the pass's runs kept.
    paths = list(dict.fromkeys(str(run.events_path.resolve()) for run in runs if run.events_path is not None))
    read = spark.read.schema(EVENTS_DDL).parquet(*paths)
    if any(run.events_slice is not None for run in runs):
        read = read.where(F.col("run_id").isin([run.events_run_id for run in runs]))
    events = prepare(read)
    topics = _small(
        spark,
        [(run.events_run_id, run.topic) for run in runs],
        pa.schema([("run_id", pa.int64()), ("topic", pa.string())]),
    )
    rows = events.join(F.broadcast(topics), ["run_id", "topic"]).where(F.col("partition").isNotNull())
    shown = exposures(rows)
    parts = []
    if TRUNCATED_COMMITTED in checks:
        parts.append(truncated_committed(rows, shown))
    if INCOMPLETE_LEADER in checks:
        parts.append(incomplete_leader(shown))
    if HW_REGRESSION in checks:
        parts.append(hw_regression(shown))
    if MIN_ISR_VIOLATION in checks:
        parts.append(min_isr_violation(shown))
    if EPOCH_REUSE in checks:
        parts.append(epoch_reuse(rows))
    if METADATA_ROLLBACK in checks:
        versions = spark.read.schema(VERSIONS_DDL).parquet(*paths)
        if any(run.events_slice is not None for run in runs):
            versions = versions.where(F.col("run_id").isin([run.events_run_id for run in runs]))
        parts.append(metadata_rollback(versions))
    transactional = white_box.transactional_runs(runs)
    if checks & white_box.CHECKS and transactional:
        parts.append(transaction_invariants(spark, transactional, checks & white_box.CHECKS))
    if ISR_DIVERGENCE in checks and replicas is not None:
        found = isr_divergence(spark, final_isr(events, rows), replicas, runs)
        if found is not None:
            parts.append(found)
    if not parts:
        return pd.DataFrame(columns=OUTPUT)
    union = functools.reduce(lambda left, right: left.unionByName(right), parts)
    collected = to_pandas(top(union, limit).toArrow())
    return collected.sort_values(
        ["run_id", "kind", *INVARIANT_ORDER], na_position="first", kind="stable"
    ).reset_index(drop=True)[list(OUTPUT)]
