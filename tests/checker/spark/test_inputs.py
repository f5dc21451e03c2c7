"""The input layouts of :mod:`checker.spark.inputs`: small runs packed many to a bucket.

A check of thousands of small runs used to read one bucket (one task) per run; now small runs
share buckets (:func:`testbed.record.packed.bucket_count`).  Sharing must change nothing but
the task count: every run still lies in exactly one bucket, Spark still aggregates by run
without an exchange, and the results are still the pandas engine's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from testbed.record.packed import BUCKET_ROWS, MIN_BUCKETS_PER_CORE, bucket_count
from tests.checker.synthetic import PLANTABLE, Plan, write_run


def test_small_runs_share_buckets_and_big_ones_get_one_each() -> None:
    cores = 2
    floor = MIN_BUCKETS_PER_CORE * cores
    assert bucket_count(([10_000] * 1000), cores) == 10  # 10 M rows: a bucket per BUCKET_ROWS
    assert bucket_count(([1_000] * 10_000), cores) == 10
    assert bucket_count(([10_000] * 100), cores) == floor  # 1 M rows: still a few per core
    assert bucket_count(([10_000] * 5000), cores) == 50
    assert bucket_count(([BUCKET_ROWS] * 50), cores) == 50  # a big run keeps its own bucket
    assert bucket_count(([10_000] * 3), cores) == 3  # never more buckets than files
    assert bucket_count(([0, 0]), cores) == 2


@pytest.mark.spark
def test_runs_packed_several_to_a_bucket_give_the_pandas_results(tmp_path: Path, spark: Any) -> None:
    kinds = list(PLANTABLE)
    plans = [
        Plan(seed=100 + number, partitions=2, plant=((kinds[number % len(kinds)], 1),) if number % 3 else ())
        for number in range(3 * MIN_BUCKETS_PER_CORE)
    ]
    for plan in plans:
        write_run(tmp_path / f"run-{plan.seed}", plan)
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in plans]
    engine = SparkEngine(spark, bucketed=True)
    try:
        from_spark = check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        history = engine._history(runs)
        plan_text = str(history.groupBy("run_id").count()._jdf.queryExecution().executedPlan().toString())
        assert engine.inputs.scratch is not None
        histories = {run.history_path.resolve() for run in runs}
        # (link name, target) of the history table's links, read before the links are removed.
        links = [(path.name, path.resolve()) for path in engine.inputs.scratch.rglob("*.parquet")]
        links = [(name, target) for name, target in links if target in histories]
    finally:
        engine.close()
    assert "Bucketed: true" in plan_text and "Exchange" not in plan_text
    # Every run's file is linked once, under a bucket number below the count; buckets are shared.
    assert sorted(target for _, target in links) == sorted(histories)
    used = {int(name.split("_")[1].split(".")[0]) for name, _ in links}
    count = bucket_count([run.history_rows for run in runs], spark.sparkContext.defaultParallelism)
    assert count < len(runs) and max(used) < count
    assert len(used) < len(runs)
    for run, result in zip(runs, from_spark, strict=True):
        (expected,) = check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        assert json.dumps(result, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert any(result["anomalies"] for result in from_spark)
