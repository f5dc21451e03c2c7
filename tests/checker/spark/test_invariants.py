"""Parity of the white-box checks: Spark writes exactly pandas' results.json, in one pass of many runs.

Each batch mixes runs with planted violations, clean runs full of Kafka's legitimate behaviour, and
runs whose evidence is odd (no event logs at all, a missing log, a log whose clock stepped back),
so the windows and joins of :mod:`checker.spark.invariants` meet every path of the pandas oracle.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    HANGING_TRANSACTION,
    INCOMPLETE_LEADER,
    INVARIANT_CHECKS,
    LSO_PAST_OPEN_TRANSACTION,
    TRUNCATED_COMMITTED,
    UNMARKED_TRANSACTION,
)
from checker.driver import check_pass
from checker.evidence import load_run, split_passes
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from testbed.record.rundir import RunDir
from tests.checker.invariant_runs import LEGIT, PLANTABLE, InvariantPlan, write_invariant_run
from tests.checker.test_kip101_white_box import kip101_run
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture

pytestmark = pytest.mark.spark


def canonical(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


def _both(
    spark: Any, run_dirs: list[Path], bucketed: bool | None = None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Spark's result, pandas' result) per run, Spark checking all runs in one pass."""
    runs = [load_run(run_dir) for run_dir in run_dirs]
    (group,) = split_passes(runs)
    engine = SparkEngine(spark, bucketed=bucketed)
    try:
        from_spark = check_pass(engine, group, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
    from_pandas = [check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0] for run in runs]
    return list(zip(from_spark, from_pandas, strict=True))


@st.composite
def batches(draw: st.DrawFn) -> list[InvariantPlan]:
    plans = []
    for seed in draw(st.lists(st.integers(0, 2**32), min_size=2, max_size=4, unique=True)):
        plant = tuple((kind, draw(st.integers(0, 2))) for kind in PLANTABLE)
        legit = tuple((episode, draw(st.integers(0, 1))) for episode in LEGIT)
        plans.append(InvariantPlan(seed=seed, plant=plant, legit=legit))
    return plans


@pytest.mark.parametrize("bucketed", [False, True], ids=["plain-files", "bucketed-table"])
@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=batches())
def test_spark_reports_pandas_answers_and_the_planted_violations(
    tmp_path: Path, spark: Any, bucketed: bool, batch: list[InvariantPlan]
) -> None:
    root = tmp_path / "batch"
    shutil.rmtree(root, ignore_errors=True)
    planted = [write_invariant_run(root / f"run-{plan.seed}", plan) for plan in batch]
    pairs = _both(spark, [root / f"run-{plan.seed}" for plan in batch], bucketed)
    for expected, (from_spark, from_pandas) in zip(planted, pairs, strict=True):
        assert canonical(from_spark) == canonical(from_pandas)
        assert {name: a["count"] for name, a in from_spark["anomalies"].items()} == expected


def _step_clock_back(run_dir: Path, node: str, after_seq: int, by_ns: int) -> None:
    path = RunDir(run_dir).broker_events(node)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    shifted = [{**e, "ts": e["ts"] - by_ns} if e["seq"] > after_seq else e for e in events]
    path.write_text("".join(json.dumps(e) + "\n" for e in shifted))


def test_odd_evidence_in_one_pass(tmp_path: Path, spark: Any) -> None:
    every = tuple((kind, 1) for kind in PLANTABLE)
    legit = tuple((episode, 1) for episode in LEGIT)
    write_invariant_run(tmp_path / "planted", InvariantPlan(seed=31, plant=every, legit=legit))
    write_invariant_run(tmp_path / "stepped", InvariantPlan(seed=32, plant=every, legit=legit))
    _step_clock_back(tmp_path / "stepped", "n2", after_seq=20, by_ns=3_500)  # a few events' worth
    write_invariant_run(tmp_path / "missing", InvariantPlan(seed=33, plant=((TRUNCATED_COMMITTED, 2),)))
    (RunDir(tmp_path / "missing").broker_events("n1")).unlink()
    write_invariant_run(tmp_path / "none", InvariantPlan(seed=34, plant=every, broker_config=()))
    write_invariant_run(tmp_path / "bare", InvariantPlan(seed=35, plant=every))
    for node in ("n1", "n2", "n3"):  # every broker log holds its first start alone
        path = RunDir(tmp_path / "bare").broker_events(node)
        path.write_text(path.read_text().splitlines()[0] + "\n")
    names = ["planted", "stepped", "missing", "none", "bare"]
    pairs = _both(spark, [tmp_path / name for name in names])
    for name, (from_spark, from_pandas) in zip(names, pairs, strict=True):
        assert canonical(from_spark) == canonical(from_pandas), name
    results = dict(zip(names, (spark_result for spark_result, _ in pairs), strict=True))
    # hanging-transaction, unmarked-transaction and lso-past-open-transaction need transactions,
    # which these runs have none of: planted in tests/checker/txn/test_white_box.py, test_markers.py,
    # test_lso.py and tests/checker/spark/test_txn_white_box.py, test_txn_lso.py.
    transactional = {HANGING_TRANSACTION, UNMARKED_TRANSACTION, LSO_PAST_OPEN_TRANSACTION}
    assert set(INVARIANT_CHECKS) - transactional <= set(results["planted"]["anomalies"])
    assert (
        results["missing"]["valid"] == "unknown"
        and TRUNCATED_COMMITTED not in results["missing"]["anomalies"]
    )
    assert set(results["none"]["not_applicable"]) == set(INVARIANT_CHECKS)
    # Without the brokers' partition events, only the controller's checks are left: the dumps'
    # divergence under its final ISR, the epochs and the metadata versions it published.
    controller_checks = {"isr-divergence", "epoch-reuse", "metadata-rollback"}
    assert set(results["bare"]["anomalies"]) & set(INVARIANT_CHECKS) == controller_checks


def test_the_kip101_loss_of_real_brokers_reads_the_same_in_both_engines(
    tmp_path: Path,
    spark: Any,
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture
) -> None:
    """Real event logs (``tests/checker/test_kip101_white_box.py``), not synthetic ones."""
    kip101_run(start_cluster, tmp_path / "run", "high-watermark")
    ((from_spark, from_pandas),) = _both(spark, [tmp_path / "run"])
    assert canonical(from_spark) == canonical(from_pandas)
    assert {TRUNCATED_COMMITTED, INCOMPLETE_LEADER} <= set(from_spark["anomalies"])
