"""The offset figure's series and the liveness part of report.html, on checked runs."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from harness.report.offsets import LOST_COLOUR, load_series, marked, unpolled_series
from harness.report.run_page import render_run_report
from tests.harness.report.report_runs import RunShape, make_checked_run

IMAGE = re.compile(r'alt="offset of every[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def frame(rows: list[tuple[float, int]]) -> pd.DataFrame:
    """``time_s, value`` rows of partition 0 (offsets do not matter to the unpolled count)."""
    return pd.DataFrame(
        {"partition": 0, "time_s": [t for t, _ in rows], "offset": 0, "value": [v for _, v in rows]}
    )


def test_a_value_counts_as_unpolled_from_its_ack_to_its_first_poll() -> None:
    sends = frame([(1.0, 7), (2.0, 8), (3.0, 9)])
    polls = frame([(4.0, 7), (5.0, 7), (2.5, 8)])  # 9 never polled; 7 read twice
    times, counts = unpolled_series(sends, polls)
    assert times.tolist() == [1.0, 2.0, 2.5, 3.0, 4.0]
    assert counts.tolist() == [1, 2, 1, 2, 1]


def test_a_poll_before_the_ack_completes_counts_nothing() -> None:
    times, counts = unpolled_series(frame([(3.0, 7)]), frame([(2.0, 7)]))
    assert counts.tolist() == [1, 0] and times.tolist() == [3.0, 3.0]


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lossy") / "run"
    make_checked_run(run_dir, RunShape(lost_writes=3, divergent_offsets=2))
    render_run_report(run_dir)
    return run_dir


def test_the_series_hold_every_ack_and_polled_record(lossy: Path) -> None:
    series = load_series(lossy)
    assert series is not None and series.partitions == (0, 1) and not series.thinned
    assert len(series.sends) > 100 and len(series.polls) > 100
    assert (series.sends["offset"] >= 0).all()


def test_the_lost_records_the_checker_names_are_drawn_red(lossy: Path) -> None:
    results = json.loads((lossy / "results.json").read_text())
    assert sum(len(v) for v in marked(results, "lost-write", "value").values()) == 3
    text = (lossy / "report.html").read_text(encoding="utf-8")
    (image,) = IMAGE.findall(text)
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB")).reshape(-1, 3)
    red = tuple(int(LOST_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    assert (np.abs(pixels.astype(int) - red).sum(axis=1) < 30).sum() > 20, "the lost crosses are drawn"


def test_the_fault_table_carries_the_recovery_after_the_last_heal_and_the_liveness_figures(
    lossy: Path,
) -> None:
    text = (lossy / "report.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td>(partition halves|kill n2|pause n1)</td>.*?<td>([^<]*)</td></tr>", text)
    recovery = dict(rows)
    assert recovery["kill n2"] == "-" and recovery["pause n1"] == "-"
    assert re.fullmatch(
        r"p0: ack \d+\.\d{3} s, (poll \d+\.\d{3} s|no poll of new records); p1: ack .*",
        recovery["partition halves"],
    )
    assert "<h3>liveness (stall threshold 10 s, warn)</h3>" in text
    assert " - s" not in recovery["partition halves"], "a recovery that never came is said, not '- s'"


def test_a_run_without_history_parquet_says_why_there_is_no_offset_plot(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_checked_run(run_dir, RunShape())
    (run_dir / "history.parquet").unlink()
    render_run_report(run_dir)
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "No offset plot: history.parquet is written when the run is checked." in text
    assert not IMAGE.findall(text)
