"""The packed store read by the Spark engine: Spark's own bucketed table, the same ``results.json``.

The packed files are registered as a table ``CLUSTERED BY (run_id)`` as they stand, which is only
right if every run is in the file Spark would have put it in: :func:`testbed.record.packed.spark_hash_long`
is checked against Spark's ``hash()`` here, and the plan of a grouped aggregation must be a
bucketed scan with no exchange.  Then the results, with the small runs' questions answered on the
driver (the default) and in Spark jobs, must be the bytes of a check of the run directories.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from checker.api import check_runs, load_runs
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.pack import pack_runs
from checker.packed_runs import load_packed
from checker.spark.engine import SparkEngine
from testbed.record.packed import bucket_of, spark_hash_long
from testbed.record.rundir import RunDir
from tests.checker.synthetic import PLANTABLE, Plan, write_run
from tests.checker.test_pack import checked_bytes, packed_store

pytestmark = pytest.mark.spark


def test_the_hash_is_sparks(spark: Any) -> None:
    rng = random.Random(19)
    values = [0, 1, -1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, *(rng.getrandbits(63) for _ in range(200))]
    frame = spark.createDataFrame(pa.table({"v": pa.array(values, pa.int64())}))
    rows = frame.selectExpr("v", "hash(v) AS h", "pmod(hash(v), 13) AS b").collect()
    assert [(row["h"], row["b"]) for row in rows] == [(spark_hash_long(v), bucket_of(v, 13)) for v in values]


@pytest.mark.parametrize("in_spark", [False, True], ids=["driver", "jobs"])
def test_a_packed_store_checks_as_its_run_directories(tmp_path: Path, spark: Any, in_spark: bool) -> None:
    dirs, out = packed_store(tmp_path)
    engines = []
    for _ in range(2):
        engine = SparkEngine(spark)
        engine.small_runs_in_spark = in_spark
        engines.append(engine)
    try:
        direct = checked_bytes(dirs, engines[0])
        assert checked_bytes(dirs, engines[1], out) == direct
        runs = load_packed(out)
        plan = engines[1]._history(runs).groupBy("run_id").count()._jdf.queryExecution().executedPlan()
        text = str(plan.toString())
    finally:
        for engine in engines:
            engine.close()
    assert "Bucketed: true" in text and "Exchange" not in text


def test_some_runs_of_a_store_and_a_run_directory_check_as_their_directories(
    tmp_path: Path, spark: Any
) -> None:
    """A pass of part of a store (its table filtered to the pass's runs) and a run directory beside
    (the packed files and the run's own read plainly, filtered likewise)."""
    dirs = [tmp_path / "runs" / f"run-{number}" for number in range(5)]
    for number, run_dir in enumerate(dirs):
        write_run(run_dir, Plan(seed=40 + number, plant=((PLANTABLE[number], 1),)))
    pack_runs(load_runs(dirs[:4]), tmp_path / "packed", cores=2)
    chosen = [
        run for run in load_packed(tmp_path / "packed") if run.run_dir in {d.absolute() for d in dirs[1:3]}
    ]
    for runs in (chosen, [*chosen, *load_runs(dirs[4:])]):
        checked = [run.run_dir for run in runs]
        engine = SparkEngine(spark)
        try:
            direct = checked_bytes(checked, engine)
            for run_dir in checked:
                RunDir(run_dir).results.unlink()
            check_runs(runs, engine, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        finally:
            engine.close()
        assert {run_dir: RunDir(run_dir).results.read_bytes() for run_dir in checked} == direct
