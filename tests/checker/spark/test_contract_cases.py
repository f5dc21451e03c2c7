"""The cases of :mod:`tests.checker.contract_cases` on Spark, in one pass: pandas' results.json, byte for byte."""

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
from tests.checker.contract_cases import CASES, assert_case, write_case

pytestmark = pytest.mark.spark


def canonical(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
def test_every_case_as_pandas_answers_it(tmp_path: Path, spark: Any, bucketed: bool) -> None:
    for number, case in enumerate(CASES):
        write_case(tmp_path / f"case-{number}", case)
    runs = [
        load_run(tmp_path / f"case-{number}", skip_bad_lines=case.skip_bad_lines)
        for number, case in enumerate(CASES)
    ]
    engine = SparkEngine(spark, bucketed=bucketed)
    engine.small_runs_in_spark = True  # the Spark jobs under test, not the driver's pandas path
    try:
        results = check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
    for case, run, from_spark in zip(CASES, runs, results, strict=True):
        assert_case(case, from_spark)
        from_pandas = check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
        assert canonical(from_spark) == canonical(from_pandas), case.name
