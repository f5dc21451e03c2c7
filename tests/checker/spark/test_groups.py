"""The consumer-group checks on Spark: the tiny examples and planted runs, as pandas answers them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from checker.definitions import ALL_CHECKS, GROUP_CHECKS, ORDER_CHECKS
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.pandas.groups import decode_payload
from checker.spark.engine import SparkEngine
from checker.spark.groups import VALUE_SCHEMA
from tests.checker.group_cases import CASES
from tests.checker.group_synthetic import GROUP_PLANTABLE, GroupPlan, write_group_run
from tests.checker.order_cases import write_case
from tests.checker.spark.one_pass import canonical, check_cases_in_one_pass
from tests.checker.synthetic import Plan, write_run
from tests.checker.test_groups import assert_group_case

pytestmark = pytest.mark.spark
CHECKS = (*ORDER_CHECKS, *GROUP_CHECKS)


def test_the_definitions_tiny_examples_in_one_pass(tmp_path: Path, spark: Any) -> None:
    check_cases_in_one_pass(spark, tmp_path, CASES, write_case, assert_group_case, CHECKS)


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
def test_every_planted_group_anomaly_as_pandas_reports_it(tmp_path: Path, spark: Any, bucketed: bool) -> None:
    """Several of each kind in one run (examples beyond the limit are cut alike), both commit
    modes, a clean group run, and runs without a group in the same pass."""
    every = tuple((kind, 3) for kind in GROUP_PLANTABLE)
    groups = [
        GroupPlan(seed=41, partitions=3, consumers=3, generations=4, plant=every),
        GroupPlan(seed=42, partitions=1, consumers=2, commit="async", plant=every),
        GroupPlan(seed=43, partitions=2, consumers=2, generations=2),
        GroupPlan(seed=44, partitions=2, consumers=1, commit="async", plant=((GROUP_PLANTABLE[0], 1),)),
    ]
    others = [Plan(seed=45, partitions=2, plant=(("poll-skip", 2), ("stale-read", 2))), Plan(seed=46)]
    planted = [write_group_run(tmp_path / f"run-{plan.seed}", plan) for plan in groups]
    planted += [write_run(tmp_path / f"run-{plan.seed}", plan) for plan in others]
    runs = [
        load_run(tmp_path / f"run-{seed}") for seed in [*(p.seed for p in groups), *(p.seed for p in others)]
    ]
    engine = SparkEngine(spark, bucketed=bucketed)
    try:
        results = check_pass(engine, runs, ALL_CHECKS, 2)
    finally:
        engine.close()
    for run, expected, from_spark in zip(runs, planted, results, strict=True):
        assert {name: a["count"] for name, a in from_spark["anomalies"].items()} == expected
        assert canonical(from_spark) == canonical(check_pass(PandasEngine(), [run], ALL_CHECKS, 2)[0])


def test_a_pass_without_group_ops_starts_no_group_job(tmp_path: Path, spark: Any) -> None:
    """The row counts (which the drain status computed) say there are no group ops: the group
    question and the order question's chains cost no Spark job."""
    plans = [Plan(seed=51, plant=(("poll-skip", 1),)), Plan(seed=52)]
    for plan in plans:
        write_run(tmp_path / f"run-{plan.seed}", plan)
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in plans]
    engine = SparkEngine(spark)
    tracker = spark.sparkContext.statusTracker()
    try:
        engine.drain_status(runs)
        before = max(tracker.getJobIdsForGroup(), default=-1)  # job ids only grow
        assert engine.group_anomalies(runs, frozenset(GROUP_CHECKS), 5).empty
        assert max(tracker.getJobIdsForGroup(), default=-1) == before
        assert not engine._has_group_ops(runs)
    finally:
        engine.close()


@pytest.mark.parametrize(
    "payload",
    [
        '{"generation": 3, "takeover": 5, "offsets": {"0": 23, "1": 7}, "polled_by": 6, "consumer": 2}',
        '{"generation": "3", "consumer": true, "polled_by": 6.0, "takeover": 1e2}',
        '{"generation": 99999999999999999999, "offsets": {"0": null, "00": 1, "x": 2, "-1": 3, "7": 4}}',
        '{"offsets": {"0": 1, "1": "2"}}',
        '{"offsets": {"0": 1, "1": 2.5}}',
        '{"offsets": {"0": 1, "1": 99999999999999999999}}',
        '{"offsets": {"0": 1, "1": true}}',
        '{"offsets": {"0": 1, "0": 2}}',
        '{"offsets": {"0": 1}, "offsets": 5}',
        '{"offsets": {"0": 1}, "offsets": null}',
        '{"offsets": {"0": {"a": 1}}}',
        '{"generation": 1, "generation": "x"}',
        '{"generation": 1, "generation": null}',
        '{"generation": 1, "x": {"generation": 7}}',
        '{"generation": -9223372036854775808, "consumer": 9223372036854775808}',
        '{"offsets": [1, 2]}',
        '{"offsets": {}}',
        "[1, 2]",
        "7",
        "null",
    ],
)
def test_from_json_reads_a_group_value_as_the_pandas_decoder(spark: Any, payload: str) -> None:
    from checker.definitions import PARTITION_KEY_PATTERN

    frame = spark.createDataFrame([(payload,)], "payload string").select(
        F.from_json("payload", VALUE_SCHEMA).alias("v")
    )
    (row,) = frame.select(
        "v.generation",
        "v.takeover",
        "v.consumer",
        "v.polled_by",
        F.filter(
            F.map_entries("v.offsets"),
            lambda e: e["key"].rlike(PARTITION_KEY_PATTERN) & e["value"].isNotNull(),
        ).alias("offsets"),
    ).collect()
    offsets = sorted((int(entry["key"]), entry["value"]) for entry in row["offsets"] or [])
    decoded = decode_payload(payload)
    assert {**row.asDict(), "offsets": offsets} == {**decoded, "offsets": sorted(decoded["offsets"])}
