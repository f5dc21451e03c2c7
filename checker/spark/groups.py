"""The consumer-group checks of :mod:`checker.definitions` with Spark (no UDFs, nothing collected).

The pandas engine (:mod:`checker.pandas.groups`, the oracle) computes the same rows; each
step here is the counterpart of one step there:

* the group ops: their rows (``f`` = other client op) decoded with ``from_json`` and
  :data:`VALUE_SCHEMA` -- a field that is not a JSON integer is null, an ``offsets`` object
  holding anything but integers and nulls is null as a whole -- each invoke paired with its
  process's next row, its completion (``lead`` over the process);
* member processes and takeover chains: ``last(process of a non-takeover assign, ignore
  nulls)`` over a consumer's assigns in history order; the members are few, so they are
  broadcast to every join with reads;
* the comparisons "highest so far" are ``max(struct(offset, -index, ...))`` over range
  frames ending one below the current key, as in :mod:`checker.spark.order`: commits
  against the ``ok`` commits completed before their invoke (commit-regression), commits
  against their reader's reads before their invoke (committed-beyond-read), reads against the
  known committed positions of older generations (group-redelivery);
* a late commit that may explain an anomaly is a ``left_anti`` join on (run, partition) with
  the commits that did not end ``ok``;
* generation-regression: ``max(struct(generation, -index))`` over a consumer's ``ok`` assigns
  completed before each assign's invoke, the same range frame.

:func:`group_anomalies` is asked only for passes with group ops (the engine knows from the
row counts it computes anyway), so runs without consumer groups cost nothing here.  With
them, the frames several checks read (members, commits, known positions) are handed to the
engine's ``keep``, which persists them for the one job: decoding the commits' JSON once
instead of once per check took a fifth off that job (measured on a 680 K-row history with
60 K commits: 5.2-6.5 s against 5.7-6.8 s, on a busy 2-core machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType
from pyspark.sql.window import WindowSpec

from checker.definitions import (
    ASSIGN,
    COMMIT,
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION,
    GROUP_EXAMPLE_COLUMNS,
    GROUP_REDELIVERY,
    GROUP_SKIP,
    PARTITION_KEY_PATTERN,
    REVOKE,
    TYPE_INVOKE,
    TYPE_OK,
)
from testbed.record.history import F_OTHER, POLL_CODES, SEND_CODES

VALUE_SCHEMA = StructType(
    [
        StructField("generation", LongType()),
        StructField("takeover", LongType()),
        StructField("consumer", LongType()),
        StructField("polled_by", LongType()),
        StructField("offsets", MapType(StringType(), LongType())),
    ]
)
"""What the checks read of a group op's value (``checker.pandas.groups.decode_payload``)."""
OUTPUT = ["run_id", "kind", *GROUP_EXAMPLE_COLUMNS]
IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {GROUP_SKIP, GROUP_REDELIVERY, COMMIT_REGRESSION, COMMITTED_BEYOND_READ, GENERATION_REGRESSION}
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""


def _output(frame: DataFrame, kind: str) -> DataFrame:
    """The output columns (those the frame lacks as null longs), ``kind`` set."""
    columns = {"kind": F.lit(kind)}
    return frame.select(
        *[
            columns.get(name, F.col(name) if name in frame.columns else F.lit(None).cast("long")).alias(name)
            for name in OUTPUT
        ]
    )


def _before(*keys: str, order: str) -> WindowSpec:
    """The rows of ``keys`` whose ``order`` is below the current row's (a range frame)."""
    return Window.partitionBy(*keys).orderBy(order).rangeBetween(Window.unboundedPreceding, -1)


def group_ops(history: DataFrame) -> DataFrame:
    """One row per group-op invoke: ``run_id, process, f_name, invoke_index, complete_index,
    outcome`` (null: no completion) and ``v``, its decoded value."""
    rows = history.where(
        (F.col("f") == F_OTHER) & F.col("process").isNotNull() & F.col("f_name").isin(ASSIGN, REVOKE, COMMIT)
    ).select("run_id", "process", "index", "type", "f_name", "payload")
    following = F.lead(F.struct("index", "type", "f_name")).over(
        Window.partitionBy("run_id", "process").orderBy("index")
    )
    paired = rows.withColumn("next", following).where(F.col("type") == TYPE_INVOKE)
    completed = (F.col("next.f_name") == F.col("f_name")) & (F.col("next.type") != TYPE_INVOKE)
    return paired.select(
        "run_id",
        "process",
        "f_name",
        F.col("index").alias("invoke_index"),
        F.when(completed, F.col("next.index")).alias("complete_index"),
        F.when(completed, F.col("next.type").cast("long")).alias("outcome"),
        F.from_json("payload", VALUE_SCHEMA).alias("v"),
    )


def members(ops: DataFrame) -> DataFrame:
    """``run_id, process, root, generation, fresh`` per process with an ``assign`` (its first)."""
    fields = F.struct("invoke_index", "v.generation", "v.consumer", "v.takeover")
    first = (
        ops.where(F.col("f_name") == ASSIGN)
        .groupBy("run_id", "process")
        .agg(F.min(fields).alias("a"))
        .select("run_id", "process", "a.invoke_index", "a.generation", "a.consumer", "a.takeover")
    )
    history_order = (
        Window.partitionBy("run_id", "consumer")
        .orderBy("invoke_index")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    anchor = F.last(F.when(F.col("takeover").isNull(), F.col("process")), ignorenulls=True).over(
        history_order
    )
    root = F.coalesce(F.when(F.col("consumer").isNotNull(), anchor), F.col("process").cast("long"))
    return first.select("run_id", "process", root.alias("root"), "generation", "takeover").select(
        "run_id",
        "process",
        "root",
        "generation",
        ((F.col("root") != F.col("process")) | F.col("takeover").isNull()).alias("fresh"),
    )


def chains(members_: DataFrame) -> DataFrame:
    """``run_id, process, chain``: the takeover processes and their chains' first processes."""
    return members_.where(F.col("root") != F.col("process")).select(
        "run_id", "process", F.col("root").alias("chain")
    )


def with_chain(rows: DataFrame, chained: DataFrame) -> DataFrame:
    """``rows`` with ``chain``: the takeover chain's first process, or the row's own ``process``."""
    keyed = chained.select("run_id", F.col("process").cast("long").alias("_process"), "chain")
    joined = rows.withColumn("_process", F.col("process").cast("long")).join(
        F.broadcast(keyed), ["run_id", "_process"], "left"
    )
    return joined.drop("_process").withColumn(
        "chain", F.coalesce(F.col("chain"), F.col("process").cast("long"))
    )


def _reads(history: DataFrame) -> DataFrame:
    placed = F.col("item").isNotNull() & F.col("partition").isNotNull() & F.col("offset").isNotNull()
    return history.where(
        F.col("f").isin(*POLL_CODES) & (F.col("type") == TYPE_OK) & placed & F.col("process").isNotNull()
    ).select("run_id", "process", "partition", "index", "item", "offset")


def _commits(ops: DataFrame) -> DataFrame:
    """One row per (commit, partition named by a plain decimal key with an offset)."""
    entries = ops.where(F.col("f_name") == COMMIT).select(
        "run_id",
        "process",
        F.coalesce(F.col("v.polled_by"), F.col("process").cast("long")).alias("reader"),
        "invoke_index",
        "complete_index",
        "outcome",
        F.col("v.generation").alias("generation"),
        F.explode("v.offsets").alias("key", "offset"),
    )
    return entries.where(F.col("key").rlike(PARTITION_KEY_PATTERN) & F.col("offset").isNotNull()).select(
        "run_id",
        "process",
        "reader",
        "invoke_index",
        "complete_index",
        "outcome",
        "generation",
        F.col("key").cast("int").alias("partition"),
        "offset",
    )


def _evidence(member_reads: DataFrame, members_: DataFrame, ok: DataFrame) -> DataFrame:
    """The known committed positions: ``run_id, partition, offset, generation, index``."""
    roots = members_.where(F.col("fresh") & (F.col("root") == F.col("process"))).select(
        "run_id", F.col("process").cast("long").alias("root"), "generation"
    )
    first = member_reads.groupBy("run_id", "root", "partition").agg(
        F.min(F.struct("index", "item", "offset")).alias("first")
    )
    resumed = first.join(F.broadcast(roots), ["run_id", "root"]).select(
        "run_id", "partition", "first.offset", "generation", "first.index"
    )
    committed = ok.select(
        "run_id", "partition", "offset", "generation", F.col("complete_index").alias("index")
    )
    return committed.unionByName(resumed)


def _unexplained(candidates: DataFrame, late: DataFrame, at: str, offset: str) -> DataFrame:
    """``candidates`` that no late commit explains (see ``checker.definitions``): none of ``late``
    of the partition invoked before ``at``, at or below ``offset``, of a generation not older
    than ``known_generation`` (or unknown)."""
    explaining = late.select(
        F.col("run_id").alias("i_run_id"),
        F.col("partition").alias("i_partition"),
        F.col("invoke_index").alias("i_at"),
        F.col("offset").alias("i_offset"),
        F.col("generation").alias("i_generation"),
    )
    newer = F.coalesce(F.col("i_generation") >= F.col("known_generation"), F.lit(True))
    condition = (
        (F.col("run_id") == F.col("i_run_id"))
        & (F.col("partition") == F.col("i_partition"))
        & (F.col("i_at") < F.col(at))
        & (F.col("i_offset") <= F.col(offset))
        & newer
    )
    return candidates.join(explaining, condition, "left_anti")


def _skips(history: DataFrame, member_reads: DataFrame, known: DataFrame) -> DataFrame:
    top = known.groupBy("run_id", "partition").agg(
        F.max(F.struct("offset", (-F.col("index")).alias("first"))).alias("top")
    )
    acked = (
        history.where(
            F.col("f").isin(*SEND_CODES)
            & (F.col("type") == TYPE_OK)
            & (F.col("offset") >= 0)
            & F.col("partition").isNotNull()
        )
        .groupBy("run_id", "partition", "offset")
        .agg(F.min("index").alias("index"))
    )
    read = member_reads.select("run_id", "partition", "offset").distinct()
    below = acked.join(F.broadcast(top), ["run_id", "partition"]).where(F.col("offset") < F.col("top.offset"))
    skipped = below.join(read, ["run_id", "partition", "offset"], "left_anti")
    return _output(
        skipped.select(
            "run_id",
            "partition",
            "index",
            "offset",
            F.col("top.offset").alias("prev_offset"),
            (-F.col("top.first")).alias("prev_index"),
        ),
        GROUP_SKIP,
    )


def _redeliveries(member_reads: DataFrame, known: DataFrame, late: DataFrame) -> DataFrame:
    """Reads below a known position of an older generation, as events of (run, partition) by generation."""
    position = F.struct(
        "offset", (-F.col("generation")).alias("older"), (-F.col("index")).alias("first"), "generation"
    )
    positions = known.where(F.col("generation").isNotNull()).select(
        "run_id", "partition", "generation", position.alias("known")
    )
    read = F.struct("process", "index", "item", "offset")
    reads = member_reads.where(F.col("generation").isNotNull()).select(
        "run_id",
        "partition",
        "generation",
        F.lit(None).cast(positions.schema["known"].dataType).alias("known"),
        read.alias("read"),
    )
    events = positions.withColumn("read", F.lit(None).cast(reads.schema["read"].dataType)).unionByName(reads)
    floor = F.max("known").over(_before("run_id", "partition", order="generation"))
    below = (
        events.withColumn("floor", floor)
        .where(F.col("read").isNotNull() & (F.col("read.offset") < F.col("floor.offset")))
        .select(
            "run_id",
            "partition",
            "read.process",
            "read.index",
            "read.item",
            "read.offset",
            F.col("floor.offset").alias("prev_offset"),
            (-F.col("floor.first")).alias("prev_index"),
            F.col("floor.generation").alias("known_generation"),
        )
    )
    kept = _unexplained(below, late, "index", "offset")
    first = kept.groupBy("run_id", "process", "partition", "index").agg(
        F.min(F.struct("item", "offset", "prev_offset", "prev_index")).alias("at")
    )
    return _output(
        first.select(
            "run_id",
            "process",
            "partition",
            "index",
            "at.item",
            "at.offset",
            "at.prev_offset",
            "at.prev_index",
        ),
        GROUP_REDELIVERY,
    )


def _regressions(ok: DataFrame, late: DataFrame) -> DataFrame:
    """``ok`` commits below the highest offset ``ok``-committed before their invoke (events by index)."""
    done = ok.select(
        "run_id",
        "partition",
        F.col("complete_index").alias("at"),
        F.struct("offset", (-F.col("complete_index")).alias("first"), "generation").alias("done"),
    )
    commit = F.struct("process", "invoke_index", "complete_index", "offset")
    later = ok.select(
        "run_id",
        "partition",
        F.col("invoke_index").alias("at"),
        F.lit(None).cast(done.schema["done"].dataType).alias("done"),
        commit.alias("commit"),
    )
    events = done.withColumn("commit", F.lit(None).cast(later.schema["commit"].dataType)).unionByName(later)
    known = F.max("done").over(_before("run_id", "partition", order="at"))
    below = (
        events.withColumn("known", known)
        .where(F.col("commit").isNotNull() & (F.col("commit.offset") < F.col("known.offset")))
        .select(
            "run_id",
            "partition",
            "commit.process",
            "commit.invoke_index",
            F.col("commit.complete_index").alias("index"),
            "commit.offset",
            F.col("known.offset").alias("prev_offset"),
            (-F.col("known.first")).alias("prev_index"),
            F.col("known.generation").alias("known_generation"),
        )
    )
    return _output(_unexplained(below, late, "invoke_index", "offset"), COMMIT_REGRESSION)


def _generation_regressions(ops: DataFrame) -> DataFrame:
    """``ok`` assigns (not takeovers) below the highest generation a consumer's ``ok`` assigns
    completed before their invoke (events by index, per consumer)."""
    assigns = ops.where(
        (F.col("f_name") == ASSIGN)
        & (F.col("outcome") == TYPE_OK)
        & F.col("v.generation").isNotNull()
        & F.col("v.consumer").isNotNull()
    )
    done = assigns.select(
        "run_id",
        F.col("v.consumer").alias("consumer"),
        F.col("complete_index").alias("at"),
        F.struct("v.generation", (-F.col("complete_index")).alias("first")).alias("done"),
    )
    assign = F.struct("process", "complete_index", "v.generation")
    fresh = assigns.where(F.col("v.takeover").isNull()).select(
        "run_id",
        F.col("v.consumer").alias("consumer"),
        F.col("invoke_index").alias("at"),
        F.lit(None).cast(done.schema["done"].dataType).alias("done"),
        assign.alias("assign"),
    )
    events = done.withColumn("assign", F.lit(None).cast(fresh.schema["assign"].dataType)).unionByName(fresh)
    known = F.max("done").over(_before("run_id", "consumer", order="at"))
    below = events.withColumn("known", known).where(
        F.col("assign").isNotNull() & (F.col("assign.generation") < F.col("known.generation"))
    )
    return _output(
        below.select(
            "run_id",
            "assign.process",
            F.col("assign.complete_index").alias("index"),
            F.col("assign.generation").alias("offset"),
            F.col("known.generation").alias("prev_offset"),
            (-F.col("known.first")).alias("prev_index"),
        ),
        GENERATION_REGRESSION,
    )


def _beyond_read(ok: DataFrame, reads: DataFrame, chained: DataFrame) -> DataFrame:
    """``ok`` commits past the highest offset their reader's chain had read + 1 (events by index)."""
    by_reader = with_chain(
        ok.select(
            "run_id",
            F.col("reader").alias("process"),
            "partition",
            F.col("invoke_index").alias("at"),
            F.struct(F.col("process").alias("committer"), "complete_index", "offset").alias("commit"),
        ),
        chained,
    ).drop("process")
    read = with_chain(reads, chained).select(
        "run_id",
        "chain",
        "partition",
        F.col("index").alias("at"),
        F.struct("offset", (-F.col("index")).alias("first")).alias("read"),
    )
    events = read.withColumn("commit", F.lit(None).cast(by_reader.schema["commit"].dataType)).unionByName(
        by_reader.withColumn("read", F.lit(None).cast(read.schema["read"].dataType))
    )
    known = F.max("read").over(_before("run_id", "chain", "partition", order="at"))
    allowed = F.coalesce(F.col("known.offset") + 1, F.lit(0))
    beyond = events.withColumn("known", known).where(
        F.col("commit").isNotNull() & (F.col("commit.offset") > allowed)
    )
    return _output(
        beyond.select(
            "run_id",
            F.col("commit.committer").alias("process"),
            "partition",
            F.col("commit.complete_index").alias("index"),
            "commit.offset",
            F.col("known.offset").alias("prev_offset"),
            (-F.col("known.first")).alias("prev_index"),
        ),
        COMMITTED_BEYOND_READ,
    )


def union_all(parts: list[DataFrame]) -> DataFrame | None:
    """The rows of every frame in ``parts`` (matched by column name), None when there are none."""
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


def group_anomalies(
    history: DataFrame, checks: frozenset[str], keep: Callable[[DataFrame], DataFrame] = lambda frame: frame
) -> DataFrame | None:
    """Every group anomaly among ``checks``: ``run_id, kind`` + ``GROUP_EXAMPLE_COLUMNS``.

    ``keep`` is given each intermediate frame that several checks read (the members, the
    commits, the known positions) and returns the
    frame to use: the engine persists them for the one job that answers, so each is computed
    once instead of once per reader."""
    ops = group_ops(history)
    members_ = keep(members(ops))
    reads = _reads(history)
    member_reads = reads.join(
        F.broadcast(members_.select("run_id", "process", "root", "generation")), ["run_id", "process"]
    )
    commits_ = keep(_commits(ops))
    is_ok = F.coalesce(F.col("outcome") == TYPE_OK, F.lit(False))
    ok, late = commits_.where(is_ok), commits_.where(~is_ok)
    known = keep(_evidence(member_reads, members_, ok))
    parts = []
    if GROUP_SKIP in checks:
        parts.append(_skips(history, member_reads, known))
    if GROUP_REDELIVERY in checks:
        parts.append(_redeliveries(member_reads, known, late))
    if COMMIT_REGRESSION in checks:
        parts.append(_regressions(ok, late))
    if COMMITTED_BEYOND_READ in checks:
        parts.append(_beyond_read(ok, reads, chains(members_)))
    if GENERATION_REGRESSION in checks:
        parts.append(_generation_regressions(ops))
    return union_all(parts)


def takeover_chains(history: DataFrame) -> DataFrame:
    """``run_id, process, chain`` of the pass's takeover processes (for the order checks)."""
    return chains(members(group_ops(history)))
