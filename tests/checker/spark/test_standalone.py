"""Cluster mode: the checker over a real standalone master and worker, as users submit it.

The master and the worker are the PySpark package's own daemons on 127.0.0.1
(:mod:`checker.spark.standalone`).  Both ways into a cluster are exercised as subprocesses --
``tidemark check --master spark://...`` and ``spark-submit harness/cli/spark_submit.py`` --
since one test process can hold only one SparkContext (the module-wide local session of the
other Spark tests).  Each must write, for every run, exactly the ``results.json`` that the
pandas engine writes: executors read the Parquet files themselves there, with no bucketed
table (:mod:`checker.spark.inputs` uses one only on a local master).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.standalone import StandaloneCluster, spark_home, standalone_cluster
from testbed.record.rundir import RESULTS_FILE
from tests.checker.synthetic import PLANTABLE, Plan, write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
CLI = Path(sys.executable).with_name("tidemark")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(workers=1, cores=1, memory="1g", work_dir=tmp_path_factory.mktemp("spark")) as up:
        yield up


def _runs(root: Path) -> tuple[list[Path], dict[str, dict[str, Any]]]:
    """Three runs (two with every plantable anomaly spread over them, one clean) and pandas' results."""
    kinds = list(PLANTABLE)
    plans = [
        Plan(seed=11, partitions=3, plant=tuple((kind, 1) for kind in kinds[::2])),
        Plan(seed=12, partitions=3, plant=tuple((kind, 1) for kind in kinds[1::2])),
        Plan(seed=13, partitions=2),
    ]
    dirs = []
    for plan in plans:
        run_dir = root / f"run-{plan.seed}"
        write_run(run_dir, plan)
        dirs.append(run_dir)
    expected = {}
    for run_dir in dirs:
        (result,) = check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        expected[str(run_dir)] = result
    return dirs, expected


def _results_of(dirs: list[Path]) -> dict[str, dict[str, Any]]:
    found = {}
    for run_dir in dirs:
        found[str(run_dir)] = json.loads((run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
        (run_dir / RESULTS_FILE).unlink()
    return found


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(ROOT),
    )
    return env


def test_tidemark_check_on_a_standalone_master_writes_what_pandas_writes(
    tmp_path: Path, cluster: StandaloneCluster
) -> None:
    dirs, expected = _runs(tmp_path)
    done = subprocess.run(
        [str(CLI), "check", "--master", cluster.master_url, "--driver-memory", "1g", *map(str, dirs)],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # two runs are invalid
    found = _results_of(dirs)
    assert found == expected
    assert any(result["anomalies"] for result in found.values())


def test_spark_submit_to_a_standalone_master_writes_what_pandas_writes(
    tmp_path: Path, cluster: StandaloneCluster
) -> None:
    dirs, expected = _runs(tmp_path)
    submit = spark_home() / "bin" / "spark-submit"
    assert shutil.which(str(submit)), submit
    done = subprocess.run(
        [
            str(submit),
            "--master",
            cluster.master_url,
            "--driver-memory",
            "1g",
            str(ROOT / "harness" / "cli" / "spark_submit.py"),
            *map(str, dirs),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    printed = {result["run"]: result for result in json.loads(done.stdout)}
    found = _results_of(dirs)
    assert found == expected
    assert printed == expected
