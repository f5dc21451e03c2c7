"""What each fault window did to the sends: acknowledged sends per second and p99 latency inside
it, and outside every window (overlaps counted once), as the fault table shows them."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.window_effect import SendFigures, figure_cells, window_figures
from testbed.record.faults import FaultWindow


def window(start_s: float, end_s: float | None) -> FaultWindow:
    return FaultWindow(
        "kill", "kill n1", ("n1",), int(start_s * 1e9), None if end_s is None else int(end_s * 1e9), "start"
    )


def sends(rows: list[tuple[float, float, str]]) -> pd.DataFrame:
    """(completed_s, latency_ms, type) per send."""
    return pd.DataFrame(
        {
            "invoked_s": [done - latency / 1e3 for done, latency, _ in rows],
            "completed_s": [done for done, _, _ in rows],
            "latency_ms": [latency for _, latency, _ in rows],
            "type": [outcome for _, _, outcome in rows],
        }
    )


def test_each_window_and_the_rest_of_the_run_get_their_rate_and_p99() -> None:
    # 0-10 s: one ok send a second at 10 ms; 10-20 s (a kill): two slow ones and a failure.
    rows = [(t + 0.5, 10.0, "ok") for t in range(10)]
    rows += [(12.0, 900.0, "ok"), (15.0, 1000.0, "ok"), (16.0, 5.0, "fail")]
    inside, outside = window_figures(sends(rows), (window(10, 20),), 20.0)
    assert inside[0].ok_per_s == pytest.approx(0.2) and inside[0].p99_ms == pytest.approx(999.0)
    assert outside == SendFigures(pytest.approx(1.0), pytest.approx(10.0))


def test_overlapping_windows_count_once_outside_and_an_open_one_runs_to_the_end() -> None:
    rows = [(t + 0.5, 10.0, "ok") for t in range(30)]
    inside, outside = window_figures(sends(rows), (window(10, 20), window(15, 25), window(28, None)), 30.0)
    assert [figures.ok_per_s for figures in inside] == pytest.approx([1.0, 1.0, 1.0])
    assert outside.ok_per_s == pytest.approx(13 / 13), "30 s less 10-25 and 28-30: 13 s, 13 sends"


def test_a_window_without_an_acknowledged_send_says_so() -> None:
    inside, outside = window_figures(sends([(1.0, 10.0, "info")]), (window(0, 2), window(5, 5)), 10.0)
    assert outside == SendFigures(0.0, None)
    assert inside == [SendFigures(0.0, None), SendFigures(None, None)]
    assert figure_cells(inside[1]) == "<td class='num'>-</td><td class='num'>-</td>"
    assert figure_cells(SendFigures(2.25, 13.04)) == "<td class='num'>2.2</td><td class='num'>13.0</td>"
