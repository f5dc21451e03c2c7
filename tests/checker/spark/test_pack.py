"""The packed store read by the Spark engine: Spark's own bucketed table, the same ``results.json``.

The packed files are registered as a table ``CLUSTERED BY (run_id)`` as they stand, which is only
right if every run is in the file Spark would have put it in: :func:`harness.record.packed.spark_hash_long`
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

from checker.packed_runs import load_packed
from checker.spark.engine import SparkEngine
from harness.record.packed import bucket_of, spark_hash_long
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
