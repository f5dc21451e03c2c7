"""Parity: the Spark engine writes exactly the pandas engine's results.json, for batches of runs.

One SparkSession serves the whole module (see conftest); each hypothesis example is a batch
of generated runs checked in one Spark pass -- the batch path the CLI uses for campaigns.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, LOST_READ, LOST_WRITE, REPLICA_DIVERGENCE
from checker.driver import check_pass
from checker.evidence import load_run, split_passes
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from tests.checker.strategies import plans
from tests.checker.synthetic import Plan, write_run
from tests.checker.txn import runs as txn_runs
from tests.checker.txn.histories import History

pytestmark = pytest.mark.spark


def canonical(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


@pytest.mark.parametrize(
    ("bucketed", "small_runs_in_spark"),
    [(False, True), (True, False)],
    ids=["plain-files-all-in-spark", "bucketed-table-small-runs-on-the-driver"],
)
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch=st.lists(st.one_of(plans(), plans(clean=True)), min_size=2, max_size=6, unique_by=lambda p: p.seed)
)
def test_spark_matches_pandas_and_the_planted_anomalies(
    tmp_path: Path, spark: Any, bucketed: bool, small_runs_in_spark: bool, batch: list[Plan]
) -> None:
    """Both input layouts of :mod:`checker.spark.inputs`, and both ways of answering a pass of
    small runs (counts, order checks and liveness on the driver, :mod:`checker.spark.small_counts`,
    or Spark jobs), must give pandas' answers."""
    root = tmp_path / "batch"
    shutil.rmtree(root, ignore_errors=True)
    planted = [write_run(root / f"run-{plan.seed}", plan) for plan in batch]
    runs = [load_run(root / f"run-{plan.seed}") for plan in batch]
    (group,) = split_passes(runs)
    engine = SparkEngine(spark, bucketed=bucketed)
    engine.small_runs_in_spark = small_runs_in_spark
    spark_records: dict[Path, pa.Table] = {}
    try:
        spark_results = check_pass(engine, group, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, records=spark_records)
        if bucketed:
            plan = _grouped_plan(engine, group)
            assert "Bucketed: true" in plan and "Exchange" not in plan
        links = engine.inputs.scratch
    finally:
        engine.close()
    # The scratch links are gone with the engine; the stored files they pointed to are not.
    assert links is None or not links.exists()
    assert all(run.history_path.is_file() for run in runs)
    assert all(run.replicas_path is None or run.replicas_path.is_file() for run in runs)
    assert (links is not None) == bucketed
    for run, expected, from_spark in zip(runs, planted, spark_results, strict=True):
        pandas_records: dict[Path, pa.Table] = {}
        from_pandas = check_pass(
            PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, records=pandas_records
        )[0]
        assert canonical(from_spark) == canonical(from_pandas)
        assert {name: a["count"] for name, a in from_spark["anomalies"].items()} == expected
        assert spark_records[run.run_dir].equals(pandas_records[run.run_dir])  # checker.records


def test_every_lost_and_divergent_record_is_found_as_pandas_finds_it(tmp_path: Path, spark: Any) -> None:
    """More lost writes, lost reads and divergent positions than examples (checker.records): Spark
    hands over every one, the same table as pandas, beside a clean run of the same pass."""
    many = {LOST_WRITE: 9, LOST_READ: 7, REPLICA_DIVERGENCE: 8}
    batch = [Plan(seed=31, partitions=3, values_per_partition=16, plant=tuple(many.items())), Plan(seed=32)]
    for plan in batch:
        write_run(tmp_path / f"run-{plan.seed}", plan)
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in batch]
    engine = SparkEngine(spark)
    engine.small_runs_in_spark = True
    spark_records: dict[Path, pa.Table] = {}
    try:
        check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, records=spark_records)
    finally:
        engine.close()
    pandas_records: dict[Path, pa.Table] = {}
    check_pass(PandasEngine(), runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, records=pandas_records)
    lossy, clean = (spark_records[run.run_dir] for run in runs)
    assert lossy.equals(pandas_records[runs[0].run_dir]) and clean.equals(pandas_records[runs[1].run_dir])
    assert dict(Counter(lossy["kind"].to_pylist())) == many and clean.num_rows == 0


def _grouped_plan(engine: SparkEngine, runs: list[Any]) -> str:
    """The physical plan of an aggregation by run over the pass's histories."""
    frame = engine._history(runs).groupBy("run_id", "partition").count()
    return str(frame._jdf.queryExecution().executedPlan().toString())


def test_dumps_of_the_run_topic_alone_are_read_without_a_topic_filter(tmp_path: Path, spark: Any) -> None:
    """When every footer proves the dump holds the run's topic alone, no row's topic is compared
    (``SparkEngine._replicas``) -- and the answers stay pandas'."""
    batch = [
        Plan(seed=21, plant=(("replica-divergence", 2),), other_topic=False),
        Plan(seed=22, plant=(("lost-write", 1), ("duplicate", 1)), other_topic=False),
    ]
    for plan in batch:
        write_run(tmp_path / f"run-{plan.seed}", plan)
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in batch]
    engine = SparkEngine(spark)
    try:
        plan_text = str(engine._replicas(runs)._jdf.queryExecution().executedPlan().toString())
        spark_results = check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
    assert "topic#" not in plan_text and "topic:string" not in plan_text  # neither filtered nor read
    for run, from_spark in zip(runs, spark_results, strict=True):
        from_pandas = check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
        assert canonical(from_spark) == canonical(from_pandas)
    assert spark_results[0]["anomalies"]["replica-divergence"]["count"] == 2


def test_copied_run_directories_are_checked_apart(tmp_path: Path, spark: Any) -> None:
    """A copied run keeps its run_id; it must go to its own pass, not be merged with the original."""
    write_run(tmp_path / "a", Plan(seed=11, plant=(("lost-write", 1),)))
    load_run(tmp_path / "a")  # converts, so the copy carries the same run ids
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    runs = [load_run(tmp_path / "a"), load_run(tmp_path / "b")]
    passes = split_passes(runs)
    assert [len(p) for p in passes] == [1, 1]
    results = [
        check_pass(SparkEngine(spark), group, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0] for group in passes
    ]
    assert [r["anomalies"]["lost-write"]["count"] for r in results] == [1, 1]


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
def test_transactional_runs_answer_as_pandas_in_one_pass(tmp_path: Path, spark: Any, bucketed: bool) -> None:
    """The transactional family (:mod:`checker.txn`) through ``applyInPandas``: every case of
    :mod:`tests.checker.txn.runs` in one Spark pass gives the pandas engine's answer, frame for
    frame, with the planted totals -- and results.json is byte-equal for the whole run."""
    runs = txn_runs.write_cases(tmp_path)
    plain = History()
    plain.drain(0, [(0, 1)])
    without = txn_runs.write_run(tmp_path / "plain", plain)
    engine = SparkEngine(spark, bucketed=bucketed)
    engine.small_runs_in_spark = True
    try:
        assert txn_runs.answers(engine, [without]).empty  # no job: no run of the pass has a txn op
        from_spark = txn_runs.answers(engine, runs)
        spark_results = check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
    from_pandas = txn_runs.answers(PandasEngine(), runs)
    pd.testing.assert_frame_equal(from_spark, from_pandas)
    for run, (name, (_, expected)), result in zip(runs, txn_runs.CASES.items(), spark_results, strict=True):
        assert txn_runs.totals(from_spark, run) == expected, name
        alone = check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
        assert canonical(result) == canonical(alone), name
