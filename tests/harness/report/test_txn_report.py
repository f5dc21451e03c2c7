"""A transactional run's pages: its transactions are the timeline's ops (a consumer's read-only
txn op is not: it is recorded after its poll returned), and the offsets plot shows committed
transactional sends and every transactional read, as it shows plain ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.report.offsets import load_series
from harness.report.timeline import build_timeline
from testbed.record.history import HistoryWriter, convert_history
from testbed.record.ops import Op

SEND = {"f": "send", "partition": 0, "key": "k0", "value": 7}


def write_run(run_dir: Path, parquet: bool) -> None:
    run_dir.mkdir()
    ops = [
        Op(0, 1_000_000_000, 0, "invoke", "txn", [SEND]),
        Op(1, 1_050_000_000, 0, "ok", "txn", [{**SEND, "offset": 0}, {"f": "commit", "time": 1_040_000_000}]),
        Op(2, 1_100_000_000, 1, "invoke", "txn", [{"f": "poll"}]),
        Op(3, 1_100_000_001, 1, "ok", "txn", [{"f": "poll", "records": [{"partition": 0, "offset": 0, "key": "k0", "value": 7}]}]),
        Op(4, 1_200_000_000, 0, "invoke", "txn", [{**SEND, "value": 8}]),
        Op(5, 1_300_000_000, 0, "fail", "txn", [{**SEND, "value": 8, "offset": 1}, {"f": "abort", "time": 1_290_000_000}], "abort"),
    ]  # fmt: skip
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for op in ops:
            writer.append(op)
    if parquet:
        convert_history(run_dir / "history.jsonl", run_dir / "history.parquet")


@pytest.mark.parametrize("parquet", [False, True], ids=["jsonl", "parquet"])
def test_the_timeline_shows_the_transactions_not_the_reads(tmp_path: Path, parquet: bool) -> None:
    write_run(tmp_path / "run", parquet)
    timeline, _ = build_timeline(tmp_path / "run")
    shown = timeline.latencies
    assert shown["type"].tolist() == ["ok", "fail"]
    assert shown["latency_ms"].round().tolist() == [50.0, 100.0]


def test_the_offsets_plot_shows_committed_sends_and_transactional_reads(tmp_path: Path) -> None:
    write_run(tmp_path / "run", parquet=True)
    series = load_series(tmp_path / "run")
    assert series is not None
    assert series.sends[["offset", "value"]].values.tolist() == [
        [0, 7]
    ]  # the aborted one is not acknowledged
    assert series.polls[["offset", "value"]].values.tolist() == [[0, 7]]
