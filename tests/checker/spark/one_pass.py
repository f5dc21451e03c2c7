"""What the Spark tests of the definitions' tiny examples share: every case in one Spark pass, each
answered exactly as pandas answers it alone (``results.json`` compared as canonical JSON)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from checker.definitions import DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine

CaseT = TypeVar("CaseT")


def canonical(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


def check_cases_in_one_pass(
    spark: Any,
    root: Path,
    cases: Sequence[CaseT],
    write_case: Callable[[Path, CaseT], None],
    assert_case: Callable[[CaseT, dict[str, Any]], None],
    checks: Sequence[str],
) -> None:
    """Write every case under ``root``, check them in one Spark pass, and require each case's
    assertions and pandas' ``results.json`` for that run alone."""
    for number, case in enumerate(cases):
        write_case(root / f"case-{number}", case)
    runs = [load_run(root / f"case-{number}") for number in range(len(cases))]
    engine = SparkEngine(spark)
    engine.small_runs_in_spark = True  # the Spark jobs under test, not the driver's pandas path
    try:
        results = check_pass(engine, runs, checks, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
    for case, run, result in zip(cases, runs, results, strict=True):
        assert_case(case, result)
        alone = check_pass(PandasEngine(), [run], checks, DEFAULT_EXAMPLE_LIMIT)[0]
        assert canonical(result) == canonical(alone), case
