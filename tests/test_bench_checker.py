"""The checker bench's reference rows: DuckDB's queries and the same text run by Spark SQL find the
planted anomalies, on run directories and on their packed store (each in the bench's own worker
process, as the bench runs them)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "checker.py"


@pytest.fixture(scope="module")
def bench_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_checker", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_checker"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(bench_checker: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """Four runs of 2 k rows (two per core: the bucketed path) and their packed store."""
    runs: list[Path] = bench_checker.dataset(tmp_path_factory.mktemp("bench"), 8_000, 2_000)
    store, _ = bench_checker.packed_dataset(runs)
    return runs, store


def _planted(runs: list[Path]) -> dict[str, int]:
    planted = [json.loads((run / "planted.json").read_text()) for run in runs]
    return {kind: sum(p[kind] for p in planted) for kind in ("lost-write", "duplicate", "replica-divergence")}


def _worker(engine: str, sources: list[Path]) -> dict[str, int]:
    command = [sys.executable, str(BENCH), "--worker", engine, *map(str, sources)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    counts: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])["counts"]
    return counts


def test_the_duckdb_reference_finds_every_planted_anomaly(generated: tuple[list[Path], Path]) -> None:
    runs, store = generated
    expected = _planted(runs)
    assert all(expected.values())  # each count is a finding, never a vacuous zero
    assert _worker("duckdb", runs) == expected
    assert _worker("duckdb@packed", [store]) == expected


@pytest.mark.spark
@pytest.mark.slow
def test_the_reference_queries_run_by_spark_sql_find_the_same(generated: tuple[list[Path], Path]) -> None:
    runs, store = generated
    expected = _planted(runs)
    assert _worker("spark-sql", runs) == expected
    assert _worker("spark-sql@packed", [store]) == expected
