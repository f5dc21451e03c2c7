"""The offset figure's series and the liveness part of report.html, on checked runs."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from PIL import Image

from checker.definitions import LOST_WRITE
from checker.definitions import REPLICA_DIVERGENCE as DIVERGENCE
from harness.report.offset_marks import Marks, load_marks, marked, offset_ranges
from harness.report.offsets import LOST_COLOUR, load_series, offsets_figure, unpolled_series
from harness.report.run_page import render_checked_report, render_run_report
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


LOST, DIVERGENT = 12, 7
"""More of each than the checker's examples (5): every one must be marked, not the examples."""


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lossy") / "run"
    make_checked_run(run_dir, RunShape(lost_writes=LOST, divergent_offsets=DIVERGENT))
    render_run_report(run_dir)
    return run_dir


def test_the_series_hold_every_ack_and_polled_record(lossy: Path) -> None:
    series = load_series(lossy)
    assert series is not None and series.partitions == (0, 1) and not series.thinned
    assert len(series.sends) > 100 and len(series.polls) > 100
    assert (series.sends["offset"] >= 0).all()


def legend(axis: Any) -> list[str]:
    found = axis.get_legend()
    return [text.get_text() for text in found.get_texts()] if found is not None else []


def figure_of(run_dir: Path) -> tuple[Any, Marks]:
    series = load_series(run_dir)
    assert series is not None
    results = json.loads((run_dir / "results.json").read_text())
    marks = load_marks(run_dir, results)
    return offsets_figure(series, (), marks, 25.0), marks


def test_every_lost_and_divergent_record_the_checker_found_is_marked_not_only_its_examples(
    lossy: Path,
) -> None:
    results = json.loads((lossy / "results.json").read_text())
    assert (
        len(results["anomalies"][LOST_WRITE]["examples"]) < LOST == results["anomalies"][LOST_WRITE]["count"]
    )
    figure, marks = figure_of(lossy)
    assert marks.complete and marks.count(LOST_WRITE) == LOST and marks.count(DIVERGENCE) == DIVERGENT
    p0, p1, density, unpolled = figure.axes
    entries = legend(p0) + legend(p1)
    lost = sum(int(entry.split("(")[1].rstrip(")")) for entry in entries if entry.startswith("lost write"))
    assert lost == LOST, entries
    assert f"divergent offset ({DIVERGENT})" in legend(p0), "the divergence marks have a legend entry"
    bands = [c for c in p0.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and len(bands[0].get_paths()) == 1, "7 consecutive offsets: one band"
    assert density.get_ylabel().startswith("lost /")
    assert sum(bar.get_height() for bar in density.patches) == LOST, "the histogram counts every lost record"
    assert unpolled.get_ylabel() == "unpolled"


def test_the_sends_are_drawn_over_the_polls(lossy: Path) -> None:
    figure, _ = figure_of(lossy)
    by_label = {c.get_label(): c for c in figure.axes[0].collections}
    sends, polls = by_label["acknowledged send"], by_label["polled"]
    assert sends.get_zorder() > polls.get_zorder() and (polls.get_alpha() or 1.0) < 1.0
    lost = [c for label, c in by_label.items() if label.startswith("lost write")]
    assert lost and all(c.get_zorder() > sends.get_zorder() for c in lost), "lost crosses on top of all"


def test_the_lost_records_are_drawn_red_on_the_page(lossy: Path) -> None:
    text = (lossy / "report.html").read_text(encoding="utf-8")
    (image,) = IMAGE.findall(text)
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB")).reshape(-1, 3)
    red = tuple(int(LOST_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    assert (np.abs(pixels.astype(int) - red).sum(axis=1) < 30).sum() > 20, "the lost crosses are drawn"
    assert f"Every lost and divergent record the checker found is marked (lost-write {LOST}" in text


def test_a_run_checked_before_the_records_file_marks_its_examples_and_says_so(
    lossy: Path, tmp_path: Path
) -> None:
    older = tmp_path / "run"
    shutil.copytree(lossy, older)
    (older / "anomaly_records.parquet").unlink()
    results = json.loads((older / "results.json").read_text())
    _, marks = figure_of(older)
    assert not marks.complete
    assert marks.by_kind[LOST_WRITE] == marked(results, LOST_WRITE, "value")
    assert marks.count(LOST_WRITE) == len(results["anomalies"][LOST_WRITE]["examples"]) < LOST
    render_run_report(older)
    assert "Only the checker&#x27;s examples are marked" in (older / "report.html").read_text(
        encoding="utf-8"
    )


def test_consecutive_offsets_are_one_band() -> None:
    assert offset_ranges([9, 2, 3, 4, 7, 3]) == [(2, 4), (7, 7), (9, 9)]
    assert offset_ranges([]) == []


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


def test_a_cut_records_file_marks_the_run_unreadable_and_is_named(lossy: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "run"
    shutil.copytree(lossy, damaged)
    records = damaged / "anomaly_records.parquet"
    records.write_bytes(records.read_bytes()[:40])
    _, problem = render_checked_report(damaged)
    assert problem is not None and problem.startswith(f"{records}: not a whole Parquet file"), problem
    assert "<b>unreadable</b>" in (damaged / "report.html").read_text(encoding="utf-8")


def test_records_from_another_check_than_the_verdict_are_said_to_disagree(
    lossy: Path, tmp_path: Path
) -> None:
    other = tmp_path / "run"
    shutil.copytree(lossy, other)
    results = json.loads((other / "results.json").read_text())
    results["anomalies"][LOST_WRITE]["count"] = LOST + 1
    (other / "results.json").write_text(json.dumps(results))
    render_run_report(other)
    text = (other / "report.html").read_text(encoding="utf-8")
    assert f"The marks (lost-write {LOST}) disagree with results.json (lost-write {LOST + 1}" in text
    assert "Every lost and divergent record" not in text
