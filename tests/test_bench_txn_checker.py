"""The transactional checker bench at a tiny size: the DuckDB/networkx reference, the embedded engine
and Spark each find exactly the planted anomalies (G1a, G1c, lost commits) run by run, and a
missed one is a disagreement that fails the bench.  The reference is held to the embedded engine
beyond what the bench plants, too: on the hand-written cases and on simulated Kafka executions
whose open transactions interleave (G0, int-send-skip, precommitted-read and more, found alike)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.txn_checker import dataset, disagreements, expected_counts
from bench.txn_reference import reference_counts
from checker.definitions import TXN_CHECKS
from checker.pandas.engine import PandasEngine
from tests.checker.txn.runs import CASES, answers, totals, write_cases, write_run
from tests.checker.txn.test_event_graph import simulate

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "txn_checker.py"
AGREED = "ok: the planted anomalies, exactly"


def _bench(data: Path, sizes: str, only: str) -> list[str]:
    """The bench's rows (one per engine and size) after it exited 0."""
    command = [sys.executable, str(BENCH), "--sizes", sizes, "--only", only, "--data", str(data)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "planted anomalies" in line or "MISMATCH" in line]


def test_the_reference_and_the_embedded_engine_find_exactly_the_planted_anomalies(tmp_path: Path) -> None:
    rows = _bench(tmp_path, "3x1500,1x600t", "pandas")
    assert len(rows) == 4  # two sizes, the reference and the embedded engine
    assert all(AGREED in row for row in rows), rows
    assert sum("as the reference" in row for row in rows) == 2


@pytest.mark.spark
def test_spark_finds_exactly_the_planted_anomalies(tmp_path: Path) -> None:
    rows = _bench(tmp_path, "4x1500", "spark")
    assert len(rows) == 2
    assert all(AGREED in row for row in rows), rows
    assert "as the reference" in rows[1]


def test_every_run_plants_each_kind_and_the_expectation_names_them(tmp_path: Path) -> None:
    runs, planted = dataset(tmp_path, "2x1500", 1e-3)
    expected = expected_counts(planted)
    assert [run.name for run in runs] == ["run-0000", "run-0001"]
    kinds = {"G1a", "G1c", "lost-write", "torn-transaction"}
    assert set(expected) == {"1", "2"}
    assert all(set(counts) == kinds and min(counts.values()) >= 1 for counts in expected.values())


def test_a_missed_or_an_extra_anomaly_is_a_disagreement() -> None:
    expected = {"1": {"G1a": 2, "G1c": 1}, "2": {"G1c": 1}}
    assert disagreements(expected, expected) == []
    missed = {"1": {"G1a": 2}, "2": {"G1c": 1}}
    assert disagreements(missed, expected) == ["run 1 G1c: 0, planted 1"]
    extra = {"1": {"G1a": 2, "G1c": 1}, "2": {"G1c": 1, "G0": 3}}
    assert disagreements(extra, expected) == ["run 2 G0: 3, planted 0"]
    assert disagreements({}, expected) != []


def test_the_reference_answers_as_the_embedded_engine_beyond_the_planted(tmp_path: Path) -> None:
    simulated = [
        write_run(tmp_path / f"sim-{seed}", simulate(seed, processes=4, txns_each=10)) for seed in range(12)
    ]
    runs = write_cases(tmp_path / "cases") + simulated
    engine = answers(PandasEngine(), runs)
    found, _, _ = reference_counts([run.run_dir for run in runs])
    reference = {
        run.history_run_id: {k: n for k, n in found.get(run.history_run_id, {}).items() if k in TXN_CHECKS}
        for run in runs
    }
    assert {run.history_run_id: totals(engine, run) for run in runs} == reference
    kinds = {kind for counts in reference.values() for kind in counts}
    assert kinds >= {"G0", "G1c", "int-send-skip", "precommitted-read", "torn-transaction"}
    assert [reference[run.history_run_id] for run in runs[: len(CASES)]] == [e for _, e in CASES.values()]
