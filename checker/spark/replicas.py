"""The replica checks of :mod:`checker.definitions` with Spark: replica-divergence and divergent-tail.

One scan and one aggregation answer both.  Per (run, partition, offset) the replicas' record
identities (the integer ``record_id`` of ``replicas.parquet``) become one column per replica,
``id0 .. id{width-1}`` by ``node_index`` (the node's position in the run's node list), so
"which replicas disagree" is a comparison of integer columns in a hash aggregate -- no join of
the replicas back onto themselves.  The replicas' high watermarks (a few rows per run,
:func:`checker.engine.high_watermark_rows`) are broadcast as ``hw0 .. hw{width-1}`` and decide,
per position, its kind (TLA+ LogMatching): replica-divergence when some pair differs below
both its HWs, else divergent-tail.  A position is exploded into the pairs that make it its
kind; the pair listed first counts the position once, so each kind's total is a sum over its
pairs and the pairs, their first offsets and the totals come out of the same job.

The pandas engine (``PandasEngine.divergence``, the oracle) computes the same rows by merging
the replicas of the positions whose identities differ.
"""

from __future__ import annotations

import functools
from typing import Final

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.definitions import DIVERGENCE_EXAMPLE_COLUMNS, DIVERGENT_TAIL, REPLICA_DIVERGENCE
from checker.engine import high_watermark_rows
from checker.evidence import RunInput
from checker.records import OFFSET_RECORD_KINDS, Answer, no_records, records_of

COLUMNS = ["run_id", "kind", "total", *DIVERGENCE_EXAMPLE_COLUMNS]
"""What ``Engine.divergence`` answers."""
IMPLEMENTS: Final[frozenset[str]] = frozenset({REPLICA_DIVERGENCE, DIVERGENT_TAIL})
"""The registry entries (:mod:`checker.anomalies`) this module flags."""


def high_watermark_table(runs: list[RunInput], width: int) -> tuple[pd.DataFrame, pa.Schema]:
    """``run_id, partition, hw0 .. hw{width-1}``: each replica's HW by its node index (null: no such replica)."""
    wide: dict[tuple[int, int], list[int | None]] = {}
    for run_id, partition, node_index, mark in high_watermark_rows(runs).itertuples(index=False):
        wide.setdefault((int(run_id), int(partition)), [None] * width)[int(node_index)] = int(mark)
    frame = pd.DataFrame(
        {
            "run_id": pd.array([key[0] for key in wide], dtype="int64"),
            "partition": pd.array([key[1] for key in wide], dtype="int32"),
            **{
                f"hw{n}": pd.array([marks[n] for marks in wide.values()], dtype="Int64") for n in range(width)
            },
        }
    )
    schema = pa.schema(
        [("run_id", pa.int64()), ("partition", pa.int32()), *[(f"hw{n}", pa.int64()) for n in range(width)]]
    )
    return frame, schema


def _mark(n: int) -> Column:
    """Replica ``n``'s HW; missing (no partition line, no row for the partition) is 0: nothing committed."""
    return F.coalesce(F.col(f"hw{n}"), F.lit(0))


def divergent_pairs(replicas: DataFrame, marks: DataFrame, width: int) -> DataFrame:
    """``run_id, kind, partition, a, b, offset, positions, first_of_position, record_offsets`` per (run,
    kind, partition, replica pair): its first offset, its positions of that kind, how many of them it is
    the first pair of, and those positions' offsets when the kind is replica-divergence (``marks``:
    :func:`high_watermark_table`)."""
    identities = [
        F.max(F.when(F.col("node_index") == n, F.col("record_id"))).alias(f"id{n}") for n in range(width)
    ]
    positions = (
        replicas.groupBy("run_id", "partition", "offset")
        .agg(*identities)
        .join(F.broadcast(marks), ["run_id", "partition"], "left")
    )
    differs = {
        (a, b): F.col(f"id{a}").isNotNull()
        & F.col(f"id{b}").isNotNull()
        & (F.col(f"id{a}") != F.col(f"id{b}"))
        for a in range(width)
        for b in range(a + 1, width)
    }
    below = {
        (a, b): flag & (F.col("offset") < F.least(_mark(a), _mark(b))) for (a, b), flag in differs.items()
    }
    committed = functools.reduce(lambda left, right: left | right, below.values())
    kind = F.when(committed, F.lit(REPLICA_DIVERGENCE)).otherwise(F.lit(DIVERGENT_TAIL))
    making = F.array(
        *[
            F.when(
                F.when(committed, below[pair]).otherwise(flag),
                F.struct(F.lit(pair[0]).alias("a"), F.lit(pair[1]).alias("b")),
            )
            for pair, flag in differs.items()
        ]
    )
    first = F.col("pair_number") == 0
    return (
        positions.select(
            "run_id",
            "partition",
            "offset",
            kind.alias("kind"),
            F.posexplode(F.filter(making, lambda pair: pair.isNotNull())).alias("pair_number", "pair"),
        )
        .groupBy("run_id", "kind", "partition", F.col("pair.a").alias("a"), F.col("pair.b").alias("b"))
        .agg(
            F.min("offset").alias("offset"),
            F.count(F.lit(1)).alias("positions"),
            F.count(F.when(first, F.lit(1))).alias("first_of_position"),
            # Every replica-divergence position once (by its first pair): checker.records.
            F.collect_list(F.when(first & (F.col("kind") == REPLICA_DIVERGENCE), F.col("offset"))).alias(
                "record_offsets"
            ),
        )
    )


def top_examples(found: pd.DataFrame, runs: list[RunInput], limit: int) -> Answer:
    """The collected :func:`divergent_pairs` as :data:`COLUMNS`: nodes named, ``limit`` pairs per (run, kind);
    every replica-divergence position as the records (:mod:`checker.records`)."""
    if found.empty:
        return Answer(pd.DataFrame(columns=COLUMNS), no_records())
    positions = found[["run_id", "kind", "partition", "record_offsets"]].explode("record_offsets")
    positions = positions.dropna(subset=["record_offsets"]).rename(columns={"record_offsets": "offset"})
    records = records_of(positions, OFFSET_RECORD_KINDS, "offset")
    totals = found.groupby(["run_id", "kind"])["first_of_position"].sum().rename("total").reset_index()
    nodes = {run.replicas_run_id: run.replica_nodes for run in runs}
    found = found.assign(
        node_a=[nodes[int(r)][int(a)] for r, a in zip(found["run_id"], found["a"], strict=True)],
        node_b=[nodes[int(r)][int(b)] for r, b in zip(found["run_id"], found["b"], strict=True)],
    )
    # Name order can differ from index order: put the lexically smaller node first, as pandas does.
    swap = found["node_a"] > found["node_b"]
    found.loc[swap, ["node_a", "node_b"]] = found.loc[swap, ["node_b", "node_a"]].to_numpy()
    found = found.sort_values(["run_id", "kind", "partition", "node_a", "node_b"], kind="stable")
    top = found[found.groupby(["run_id", "kind"]).cumcount() < limit]
    return Answer(top.merge(totals, on=["run_id", "kind"])[COLUMNS].reset_index(drop=True), records)
