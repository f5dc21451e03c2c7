"""The Spark engine: the checks of :mod:`checker.definitions` over one run or thousands.

Each check is one grouped aggregation on integer keys, written with the DataFrame API
(no Python UDFs, so nothing leaves the JVM on the hot path):

* ``groupBy(run_id, partition, value)`` answers lost-write, unseen, aborted-read, lost-read,
  unexpected and duplicate at once -- instead of one anti-join per check, which measured
  2-3x slower;
* ``groupBy(run_id, partition, offset)`` over the history answers inconsistent-offsets, and
  over the replicas (record identity = the integer ``record_id`` stored in
  ``replicas.parquet``; :mod:`checker.spark.replicas`) replica-divergence and divergent-tail;
* windows per (run, process, partition) and (run, partition) answer the order checks
  (:mod:`checker.spark.order`): poll-skip, nonmonotonic-poll and their ``int-`` variants,
  stale-read, nonmonotonic-send and realtime-order -- and, for runs with a consumer group,
  the group checks (:mod:`checker.spark.groups`);
* ``groupBy(run_id).applyInPandas`` answers the transactional checks (:mod:`checker.txn`, the
  one implementation both engines run): the only Python on the rows, since a dependency graph's
  cycles are a search, not an aggregation -- and a run's transactions fit one worker.

Only the columns a question needs are read (Parquet column pruning), literal filters are
pushed into the Parquet reader, and each answer is reduced to ``limit`` example rows per
(run, anomaly) plus the count inside Spark before anything is collected, so the driver
only ever receives small results -- and, from the same job, the few anomalies' every record
that a report marks whole (:mod:`checker.records`: lost values, divergent offsets).  String
aggregates are avoided on purpose: a ``min`` of a string forces Spark from hash to sort
aggregation.

Four things are not done in Spark jobs, on purpose: how the files are presented
(:mod:`checker.spark.inputs` -- a bucketed table lets every aggregation above run without a
shuffle), fetching the few rows that examples show, the value-check examples' own
columns (send and read indexes, ack and poll offsets), which are aggregated from the rows of
the few values shown (:mod:`checker.value_details`, on the driver) instead of for every value, and
the row counts, drain status, order checks and liveness of a pass of many small runs
(:mod:`checker.spark.small_counts`), whose cost as jobs was the files and runs, not the rows.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checker import example_rules, fetch, value_details
from checker.definitions import (
    GROUP_EXAMPLE_COLUMNS,
    GROUP_ORDER,
    INCONSISTENT_OFFSETS,
    OFFSET_EXAMPLE_COLUMNS,
    ORDER_EXAMPLE_COLUMNS,
    TYPE_OK,
    UNEXPECTED,
    VALUE_EXAMPLE_COLUMNS,
)
from checker.engine import plain_value, to_pandas
from checker.evidence import RunInput
from checker.pandas.engine import aggregate_values
from checker.records import VALUE_RECORD_KINDS, Answer, no_records, records_of
from checker.spark import groups, invariants, liveness, replicas, small_counts, values
from checker.spark import order as order_checks
from checker.spark.inputs import SparkInputs, arrow_frame, history_file, replica_file
from checker.spark.order import poll_order, send_order
from checker.txn import run as txn
from checker.txn import tables as txn_tables
from testbed.record.history import F_DRAIN, F_OTHER, F_TXN, HISTORY_SCHEMA, POLL_CODES, SEND_CODES
from testbed.record.replicas import REPLICAS_SCHEMA

IMPLEMENTS: Final[frozenset[str]] = values.IMPLEMENTS | {INCONSISTENT_OFFSETS}
"""The registry entries (:mod:`checker.anomalies`) this module flags: the value checks (by
:mod:`checker.spark.values`) and offsets."""


def _key_tuple(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """An op key (``OP_KEY_COLUMNS``) as plain Python values, missing ones as ``None``."""
    return tuple(plain_value(value) for value in key)


def _collect(frame: DataFrame) -> pd.DataFrame:
    return to_pandas(frame.toArrow())


def _top(
    frame: DataFrame, group: list[str], order: list[str], limit: int, every: frozenset[str] = frozenset()
) -> DataFrame:
    """The first ``limit`` rows per group (ascending, nulls first) with the group's ``total``; with
    ``every``, also each further row whose ``kind`` is in it, ``_example`` telling the two apart."""
    ordered = Window.partitionBy(*group).orderBy(*[F.col(c).asc_nulls_first() for c in order])
    shown = F.col("_rank") <= limit
    ranked = frame.withColumn("_rank", F.row_number().over(ordered)).withColumn(
        "total", F.count(F.lit(1)).over(Window.partitionBy(*group))
    )
    if every:
        return ranked.where(shown | F.col("kind").isin(*every)).withColumn("_example", shown).drop("_rank")
    return ranked.where(shown).drop("_rank")


class SparkEngine:
    """Answers the engine questions with one SparkSession (see :mod:`checker.spark.session`)."""

    name = "spark"
    implements: frozenset[str] = frozenset().union(
        IMPLEMENTS,
        order_checks.IMPLEMENTS,
        groups.IMPLEMENTS,
        replicas.IMPLEMENTS,
        invariants.IMPLEMENTS,
        liveness.IMPLEMENTS,
        txn.IMPLEMENTS,
    )
    """Every registry entry, each flagged by one module of this engine (its ``IMPLEMENTS``)."""
    concurrent = True
    """The driver may ask two questions at once (see ``checker.driver``): Spark runs both jobs."""

    def __init__(self, session: SparkSession, *, bucketed: bool | None = None) -> None:
        """``bucketed``: force the input layout of :mod:`checker.spark.inputs` (default: its choice)."""
        self.spark = session
        self.inputs = SparkInputs(session, bucketed)
        self._counts_for: tuple[int, ...] = ()
        self._counts_cache = (pd.DataFrame(), pd.DataFrame())
        self.small_runs_in_spark = False
        """Spark jobs even for a pass of many small runs (:mod:`checker.spark.small_counts`)."""
        self._counting = threading.Lock()  # row counts and drain status may be asked from two threads
        # The ops of the value-check examples, read with their details: (pass, keys, rows).
        self._example_ops: tuple[tuple[int, ...], set[tuple[Any, ...]], pd.DataFrame] = (
            (),
            set(),
            pd.DataFrame(),
        )

    def close(self) -> None:
        self.inputs.close()

    # ---------------------------------------------------------------- inputs

    def _history(self, runs: list[RunInput]) -> DataFrame:
        """All histories of the pass as one DataFrame (the schema is given: no footer is read twice)."""
        return self.inputs.frame([history_file(run) for run in runs], HISTORY_SCHEMA)

    def _replicas(self, runs: list[RunInput]) -> DataFrame:
        with_replicas = [run for run in runs if run.replicas_path is not None]
        frame = self.inputs.frame(
            [file for file in map(replica_file, with_replicas) if file is not None], REPLICAS_SCHEMA
        )
        if all(run.replicas_hold_one_topic for run in with_replicas):
            # Most dumps hold the run's topic alone, which their footers prove: comparing every
            # row's topic cost about 1 of the divergence job's 17 CPU-seconds at 50 M ops.
            return frame.drop("topic")
        topics = {run.topic for run in with_replicas}
        if len(topics) == 1:
            return frame.where(F.col("topic") == topics.pop()).drop("topic")
        wanted = self._small(
            pd.DataFrame(
                {
                    "run_id": [run.replicas_run_id for run in with_replicas],
                    "topic": [run.topic for run in with_replicas],
                }
            ),
            pa.schema([("run_id", pa.int64()), ("topic", pa.string())]),
        )
        return frame.join(F.broadcast(wanted), ["run_id", "topic"]).drop("topic")

    def _small(self, frame: pd.DataFrame, schema: pa.Schema) -> DataFrame:
        """A small driver-side table as a DataFrame, by way of Arrow.

        Arrow tables become a local relation inside the JVM; a list of rows is unpickled by
        Python worker processes, which cost 1.5 s to start on a 2-core machine.
        """
        return arrow_frame(self.spark, pa.Table.from_pandas(frame, schema=schema, preserve_index=False))

    # ---------------------------------------------------------------- questions

    def _counts(self, runs: list[RunInput]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Row counts and drain status of the pass, computed once for both questions: on the driver
        for many small runs (:mod:`checker.spark.small_counts`), else in one Spark job."""
        key = tuple(run.history_run_id for run in runs)
        with self._counting:
            if self._counts_for != key:
                self._counts_cache = (
                    small_counts.row_counts_and_drains(runs)
                    if self._small_runs(runs)
                    else self._counts_job(runs)
                )
                self._counts_for = key
            return self._counts_cache

    def _small_runs(self, runs: list[RunInput]) -> bool:
        """Whether the pass's per-run questions are answered on the driver (:mod:`checker.spark.small_counts`)."""
        return small_counts.applies(runs) and not self.small_runs_in_spark

    def _counts_job(self, runs: list[RunInput]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Both answers from one job: rows grouped by (run, f, type, is_record, drained partition)."""
        is_drain = (F.col("f") == F_DRAIN) & (F.col("type") == TYPE_OK)
        rows = self._history(runs).select(
            "run_id",
            "f",
            "type",
            F.col("item").isNotNull().alias("is_record"),
            F.when(is_drain, F.col("partition")).alias("drain_partition"),
            F.when(is_drain, F.col("complete")).alias("complete"),
            F.when(is_drain, F.col("end_offset")).alias("end_offset"),
        )
        grouped = rows.groupBy("run_id", "f", "type", "is_record", "drain_partition").agg(
            F.count(F.lit(1)).alias("rows"),
            F.max("complete").alias("complete"),
            F.max("end_offset").alias("end_offset"),
        )
        counts = _collect(grouped)
        drains = counts[counts["drain_partition"].notna()]
        drains = drains.assign(records=drains["rows"].where(drains["is_record"], 0))
        return (
            counts.groupby(["run_id", "f", "type", "is_record"])["rows"].sum().reset_index(),
            drains.rename(columns={"drain_partition": "partition"})
            .groupby(["run_id", "partition"])
            .agg(complete=("complete", "max"), end_offset=("end_offset", "max"), records=("records", "sum"))
            .reset_index(),
        )

    def row_counts(self, runs: list[RunInput]) -> pd.DataFrame:
        return self._counts(runs)[0]

    def drain_status(self, runs: list[RunInput]) -> pd.DataFrame:
        return self._counts(runs)[1]

    def value_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> Answer:
        chosen = {name: flag for name, flag in values.value_flags().items() if name in checks}
        status = F.broadcast(
            self._small(
                complete[["run_id", "partition", "complete"]],
                pa.schema([("run_id", pa.int64()), ("partition", pa.int32()), ("complete", pa.bool_())]),
            )
        )
        kinds = F.array(*[F.when(flag, F.lit(name)) for name, flag in chosen.items()])
        stacked = (
            values.value_facts(self._history(runs), checks)
            .join(status, ["run_id", "partition"], "left")
            # A plain disjunction: ``exists`` over the array is interpreted (no generated code)
            # for every group, 2 CPU-seconds of the job at 50 M ops.
            .where(functools.reduce(lambda left, right: left | right, chosen.values(), F.lit(False)))
            .select("*", F.explode(kinds).alias("kind"))
            .where(F.col("kind").isNotNull())
            .withColumn("value_text", F.lit(None).cast("string"))
        )
        if UNEXPECTED in checks:
            stacked = stacked.unionByName(self._unexpected_text(runs), allowMissingColumns=True)
        columns = ["run_id", "kind", "total", *VALUE_EXAMPLE_COLUMNS]
        # The examples and, in the same job, every record of the kinds a report marks whole.
        top = _top(
            stacked, ["run_id", "kind"], ["partition", "value", "value_text"], limit, VALUE_RECORD_KINDS
        )
        found = _collect(
            top.select(
                *[name if name in top.columns else F.lit(None).cast("long").alias(name) for name in columns],
                "_example",
            )
        )
        records = records_of(found, VALUE_RECORD_KINDS, "value")
        found = found[found.pop("_example").astype(bool)]
        ordered = self._with_details(runs, found, tuple(run.history_run_id for run in runs)).sort_values(
            ["run_id", "kind", "partition", "value", "value_text"], na_position="first", kind="stable"
        )
        return Answer(ordered[columns].reset_index(drop=True), records)

    def _with_details(
        self, runs: list[RunInput], found: pd.DataFrame, pass_key: tuple[int, ...]
    ) -> pd.DataFrame:
        """Fill the example columns of integer values from their rows, read on the driver.

        The same read finds the ops these examples show; they are kept for :meth:`fetch_ops`.
        """
        shown = found[found["value"].notna()]
        if shown.empty:
            return found
        keys = ["run_id", "partition", "value"]
        details, op_keys, ops = value_details.value_details_with_ops(
            runs, shown[keys].drop_duplicates(), aggregate_values
        )
        self._example_ops = (pass_key, {_key_tuple(key) for key in op_keys.itertuples(index=False)}, ops)
        detail_columns = ["ack_offset", "send_index", "read_index", "poll_offset"]
        filled = shown.drop(columns=detail_columns).merge(
            details[[*keys, *detail_columns]], on=keys, how="left"
        )
        return pd.concat([found[found["value"].isna()], filled], ignore_index=True)

    def _unexpected_text(self, runs: list[RunInput]) -> DataFrame:
        f = F.col("f")
        reads = self._history(runs).where(
            (f.isin(*POLL_CODES) | (f == F_DRAIN)) & F.col("item").isNotNull() & F.col("value").isNull()
        )
        return (
            reads.groupBy("run_id", "partition", "value_text")
            .agg(
                F.min("index").alias("read_index"),
                F.min(F.when(f.isin(*POLL_CODES), F.col("offset"))).alias("poll_offset"),
                F.min("offset").alias("read_min_offset"),
                F.max("offset").alias("read_max_offset"),
            )
            .withColumn("kind", F.lit(UNEXPECTED))
            .withColumn("value", F.lit(None).cast("long"))
        )

    def offset_anomalies(self, runs: list[RunInput], limit: int) -> pd.DataFrame:
        f = F.col("f")
        # An ack observes a position only with a known offset (acks=0 answers -1); null-value
        # records count in neither n_int nor n_text, so equal nulls are one value.
        observing = (f.isin(*SEND_CODES) & (F.col("type") == TYPE_OK) & (F.col("offset") >= 0)) | (
            (f.isin(*POLL_CODES) | (f == F_DRAIN)) & F.col("item").isNotNull()
        )
        text_hash = F.when(F.col("value_text").isNotNull(), F.xxhash64("value_text"))
        positions = (
            self._history(runs)
            .where(observing)
            .groupBy("run_id", "partition", "offset")
            .agg(
                F.count(F.lit(1)).alias("observations"),
                F.count("value").alias("n_int"),
                F.min("value").alias("int_min"),
                F.max("value").alias("int_max"),
                F.count(text_hash).alias("n_text"),
                F.min(text_hash).alias("text_min"),
                F.max(text_hash).alias("text_max"),
            )
        )
        n, n_int, n_text = F.col("observations"), F.col("n_int"), F.col("n_text")
        inconsistent = (
            F.coalesce(F.col("int_min") != F.col("int_max"), F.lit(False))
            | ((n_int > 0) & (n_int < n))
            | (
                (n_int == 0)
                & (
                    F.coalesce(F.col("text_min") != F.col("text_max"), F.lit(False))
                    | ((n_text > 0) & (n_text < n))
                )
            )
        )
        found = positions.where(inconsistent)
        return _collect(
            _top(found, ["run_id"], ["partition", "offset"], limit).select(
                "run_id", "total", *OFFSET_EXAMPLE_COLUMNS
            )
        )

    def order_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The order checks (:mod:`checker.spark.order`) in one job: their rows unioned, then the examples.

        A pass with group ops reads its takeover chains too (:func:`checker.spark.groups.chains`);
        small runs: on the driver (:mod:`checker.spark.small_counts`)."""
        if self._small_runs(runs):
            return small_counts.order_anomalies(runs, checks, limit)
        history = self._history(runs)
        chains = groups.takeover_chains(history) if self._has_group_ops(runs) else None
        parts = [
            part
            for part in (poll_order(history, checks, chains), send_order(history, checks))
            if part is not None
        ]
        columns = ["run_id", "kind", "total", *ORDER_EXAMPLE_COLUMNS]
        if not parts:
            return pd.DataFrame(columns=columns)
        found = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        return _collect(
            _top(found, ["run_id", "kind"], ["process", "partition", "index", "item"], limit).select(*columns)
        )

    def _has_group_ops(self, runs: list[RunInput]) -> bool:
        """Whether some run of the pass has other client ops (the group ops): told by the row
        counts, which the drain status already computed -- no job for a pass without any."""
        counts = self.row_counts(runs)
        return bool(((counts["f"] == F_OTHER) & (counts["rows"] > 0)).any())

    def group_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The group checks (:mod:`checker.spark.groups`) in one job, for a pass with group ops."""
        columns = ["run_id", "kind", "total", *GROUP_EXAMPLE_COLUMNS]
        kept: list[DataFrame] = []

        def keep(frame: DataFrame) -> DataFrame:
            kept.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
            return kept[-1]

        found = (
            groups.group_anomalies(self._history(runs), checks, keep) if self._has_group_ops(runs) else None
        )
        try:
            if found is None:
                return pd.DataFrame(columns=columns)
            return _collect(_top(found, ["run_id", "kind"], list(GROUP_ORDER), limit).select(*columns))
        finally:
            for frame in kept:
                frame.unpersist()

    def invariant_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The white-box checks in one job (:mod:`checker.spark.invariants`)."""
        dumped = [run for run in runs if run.replicas_path is not None]
        return invariants.pass_anomalies(
            self.spark, runs, self._replicas(dumped) if dumped else None, checks, limit
        )

    def txn_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> pd.DataFrame:
        """The transactional checks (:mod:`checker.txn`) in one job: each run's rows, grouped by
        ``run_id``, go to one call of the package's own function (``applyInPandas``; DataFrame API
        only, so Spark Connect serves it too), which answers that run's examples and totals."""
        history = self._history(runs)
        with_txns = [
            row[0] for row in history.where(F.col("f") == F_TXN).select("run_id").distinct().collect()
        ]
        if not with_txns:  # a pass of plain runs: no job over its polls and drains
            return txn.empty_answer()
        rows = history.where(F.col("f").isin(list(txn_tables.INPUT_FS)) & F.col("run_id").isin(with_txns))
        rows = rows.select(*txn_tables.INPUT_COLUMNS)
        per_run = txn.spark_function(txn.pass_settings(runs, complete), checks, limit)
        return txn.ordered(_collect(rows.groupBy("run_id").applyInPandas(per_run, txn.OUTPUT_DDL)))

    def liveness(self, runs: list[RunInput], windows: pd.DataFrame, heals: pd.DataFrame) -> pd.DataFrame:
        """The liveness figures in one job (:mod:`checker.spark.liveness`), fault tables broadcast."""
        if self._small_runs(runs):
            return small_counts.liveness(runs, windows, heals)
        spans = self._small(
            windows[["run_id", "start", "end"]],
            pa.schema([("run_id", pa.int64()), ("start", pa.int64()), ("end", pa.int64())]),
        )
        marks = self._small(
            heals[["run_id", "last_heal"]], pa.schema([("run_id", pa.int64()), ("last_heal", pa.int64())])
        )
        found = liveness.liveness(self._history(runs), spans, marks).orderBy("run_id", "partition")
        return _collect(found)

    def divergence(self, runs: list[RunInput], limit: int) -> Answer:
        """replica-divergence and divergent-tail in one job (:mod:`checker.spark.replicas`)."""
        width = max(len(run.replica_nodes) for run in runs)
        if width < 2:
            return Answer(pd.DataFrame(columns=replicas.COLUMNS), no_records())
        marks = self._small(*replicas.high_watermark_table(runs, width))
        found = _collect(replicas.divergent_pairs(self._replicas(runs), marks, width))
        return replicas.top_examples(found, runs, limit)

    # ---------------------------------------------------------------- example rows

    def fetch_ops(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        """Read on the driver (see :mod:`checker.fetch`): a Spark job here cost 7-10 s at 50 runs.

        The value-check examples' ops were read with their details (``value_anomalies``);
        the rule of ``Engine.fetch_ops`` picks the rows of those keys from what was kept.
        """
        pass_key, known, kept = self._example_ops
        if pass_key != tuple(run.history_run_id for run in runs) or not known:
            return fetch.fetch_ops(runs, keys)
        served = np.array([_key_tuple(key) in known for key in keys.itertuples(index=False)], dtype=bool)
        rows = example_rules.select_example_rows(kept, keys[served])
        if not served.all():
            others = fetch.fetch_ops(runs, keys[~served])
            if not others.empty:
                rows = others if rows.empty else pd.concat([rows, others], ignore_index=True)
        return rows.drop_duplicates(["run_id", "index", "item"]).reset_index(drop=True)

    def fetch_observations(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        return fetch.fetch_observations(runs, keys)

    def fetch_replica_records(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        return fetch.fetch_replica_records(runs, keys)
