"""Row counts and drain status of many small runs, read on the driver (:mod:`checker.spark.small_counts`).

They are counted chunk by chunk with the pandas engine's own functions; cut into chunks of
any size, the answers must be exactly the pandas engine's for the whole pass.  (Whole
``results.json`` files are compared with pandas by ``test_parity.py``, both ways of counting.)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark import small_counts
from checker.synthetic_runs import generate_run


@pytest.mark.parametrize("chunk_rows", [1, 2_500, 1_000_000], ids=["run-per-chunk", "some-runs", "one-chunk"])
def test_chunked_counts_are_the_pandas_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_rows: int
) -> None:
    for seed in range(5):
        generate_run(tmp_path / f"run-{seed}", 1_000 + 300 * seed, seed=seed)
    runs = [load_run(tmp_path / f"run-{seed}") for seed in range(5)]
    assert small_counts.applies(runs)
    monkeypatch.setattr(small_counts, "CHUNK_ROWS", chunk_rows)
    rows, drains = small_counts.row_counts_and_drains(runs)
    engine = PandasEngine()
    pd.testing.assert_frame_equal(rows, engine.row_counts(runs))
    pd.testing.assert_frame_equal(drains, engine.drain_status(runs))


def test_big_runs_are_left_to_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generate_run(tmp_path / "run", 2_000, seed=1)
    runs = [load_run(tmp_path / "run")]
    assert small_counts.applies(runs)
    monkeypatch.setattr(small_counts, "SMALL_RUN_ROWS", 1_000)
    assert not small_counts.applies(runs)
    assert not small_counts.applies([])
