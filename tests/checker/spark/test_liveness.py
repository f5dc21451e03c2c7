"""The liveness figures on Spark: the definitions' examples and planted gaps, as pandas answers them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.definitions import ALL_CHECKS, LIVENESS_STRICT, STALLED, Liveness
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from tests.checker.liveness_cases import CASES, assert_case, write_case
from tests.checker.spark.one_pass import canonical, check_cases_in_one_pass
from tests.checker.synthetic import Plan, write_run

pytestmark = pytest.mark.spark


def test_the_definitions_tiny_examples_in_one_pass(tmp_path: Path, spark: Any) -> None:
    check_cases_in_one_pass(spark, tmp_path, CASES, write_case, assert_case, ALL_CHECKS)


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
def test_planted_and_announced_gaps_as_pandas_reports_them(
    tmp_path: Path, spark: Any, bucketed: bool
) -> None:
    """A planted gap stalls every partition in both engines; an announced pause stalls none."""
    batch = [
        Plan(seed=41, partitions=3, plant=((STALLED, 1), ("lost-write", 1))),
        Plan(seed=42, partitions=2, jump="announced"),
        Plan(seed=43, partitions=1, plant=((STALLED, 1),)),
        Plan(seed=44, partitions=2),
    ]
    planted = [write_run(tmp_path / f"run-{plan.seed}", plan) for plan in batch]
    runs = [load_run(tmp_path / f"run-{plan.seed}") for plan in batch]
    strict = Liveness(mode=LIVENESS_STRICT)
    engine = SparkEngine(spark, bucketed=bucketed)
    engine.small_runs_in_spark = True  # the Spark jobs under test, not the driver's pandas path
    try:
        results = check_pass(engine, runs, ALL_CHECKS, 2, strict)
    finally:
        engine.close()
    assert [r["anomalies"].get(STALLED, {}).get("count", 0) for r in results] == [3, 0, 1, 0]
    for run, expected, from_spark in zip(runs, planted, results, strict=True):
        assert {name: a["count"] for name, a in from_spark["anomalies"].items()} == expected
        assert canonical(from_spark) == canonical(check_pass(PandasEngine(), [run], ALL_CHECKS, 2, strict)[0])
