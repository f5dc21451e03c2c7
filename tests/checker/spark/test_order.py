"""The order checks on Spark: the definitions' tiny examples and every planted kind, as pandas answers them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.definitions import ALL_CHECKS, ORDER_CHECKS
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from tests.checker.order_cases import CASES, assert_case, write_case
from tests.checker.spark.one_pass import canonical, check_cases_in_one_pass
from tests.checker.synthetic import Plan, write_run

pytestmark = pytest.mark.spark


def test_the_definitions_tiny_examples_in_one_pass(tmp_path: Path, spark: Any) -> None:
    check_cases_in_one_pass(spark, tmp_path, CASES, write_case, assert_case, ORDER_CHECKS)


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
def test_every_planted_order_anomaly_as_pandas_reports_it(tmp_path: Path, spark: Any, bucketed: bool) -> None:
    """Several of each kind in one run (examples beyond the limit are cut alike), and a run alone."""
    batch = [
        Plan(seed=31, partitions=3, plant=tuple((kind, 3) for kind in ORDER_CHECKS)),
        Plan(seed=32, partitions=1, plant=tuple((kind, 1) for kind in ORDER_CHECKS)),
        Plan(seed=33, partitions=2),
        Plan(
            seed=34, partitions=2, plant=(("stale-read", 2), ("lost-write", 1), ("inconsistent-offsets", 2))
        ),
    ]
    planted = [write_run(tmp_path / f"run-{plan.seed}", plan) for plan in batch]
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in batch]
    engine = SparkEngine(spark, bucketed=bucketed)
    engine.small_runs_in_spark = True  # the Spark jobs under test, not the driver's pandas path
    try:
        results = check_pass(engine, runs, ALL_CHECKS, 2)
    finally:
        engine.close()
    for run, expected, from_spark in zip(runs, planted, results, strict=True):
        assert {name: a["count"] for name, a in from_spark["anomalies"].items()} == expected
        assert canonical(from_spark) == canonical(check_pass(PandasEngine(), [run], ALL_CHECKS, 2)[0])
