"""What each fault window did to the clients: acknowledged sends per second and their p99 latency
inside it, against the same figures outside every window.

The timeline's plot shows it over time; the fault table says it per window in two numbers, so a
reader (or a note) compares a fault's effect without reading a curve: a slow link halves the rate,
a drifting clock changes nothing, a leader kill stalls it.  Sends count where they *completed*
(as the throughput plot bins them); a transaction counts as one send (its outcome is the op's).
A window still open at the end runs to the end of the history.  Computed from the timeline's
latency table (:mod:`harness.report.timeline`), not from the checker: a figure of the report.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from testbed.record.faults import FaultWindow


@dataclasses.dataclass(frozen=True, slots=True)
class SendFigures:
    """Acknowledged sends per second over a span of the run, and their p99 latency (ms); ``None``
    where the span is empty or no send was acknowledged in it."""

    ok_per_s: float | None
    p99_ms: float | None


def window_figures(
    latencies: pd.DataFrame, windows: tuple[FaultWindow, ...], duration_s: float
) -> tuple[list[SendFigures], SendFigures]:
    """The figures inside each window (in ``windows``' order) and outside all of them."""
    ok = latencies[latencies["type"] == "ok"]
    completed = ok["completed_s"].to_numpy(dtype=np.float64)
    latency = ok["latency_ms"].to_numpy(dtype=np.float64)
    spans = [(w.start_s, duration_s if w.end_s is None else w.end_s) for w in windows]
    inside = [_figures(latency[(completed >= a) & (completed < b)], b - a) for a, b in spans]
    covered = np.zeros(len(completed), dtype=bool)
    for a, b in spans:
        covered |= (completed >= a) & (completed < b)
    outside = _figures(latency[~covered], duration_s - _union_length(spans))
    return inside, outside


def _figures(latency_ms: np.ndarray, seconds: float) -> SendFigures:
    rate = len(latency_ms) / seconds if seconds > 0 else None
    p99 = float(np.percentile(latency_ms, 99)) if len(latency_ms) else None
    return SendFigures(rate, p99)


def _union_length(spans: list[tuple[float, float]]) -> float:
    """How long the spans cover together (overlapping windows counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def figure_cells(figures: SendFigures) -> str:
    """The two table cells of ``figures`` (``-`` for a figure that does not exist)."""
    rate = "-" if figures.ok_per_s is None else f"{figures.ok_per_s:.1f}"
    p99 = "-" if figures.p99_ms is None else f"{figures.p99_ms:.1f}"
    return f"<td class='num'>{rate}</td><td class='num'>{p99}</td>"
