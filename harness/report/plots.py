"""The run report's figure: nemesis lanes, throughput and latency over one shared time axis.

One PNG (matplotlib's object API with the Agg canvas: no pyplot global state, no display
needed, safe to call from any thread), returned as bytes for embedding in the page.  The
three panels share the x axis (seconds since the test started) so that a dip in throughput
or a latency spike lines up with the fault that caused it:

1. **nemesis** -- one bar per fault window, labelled ("kill n2", "partition halves"),
   stacked in lanes when windows overlap; hatched when the fault was never healed;
2. **throughput** -- ``send`` completions per second, ``ok`` / ``fail`` / ``info`` apart;
3. **latency** -- every completed send at its invoke time (log scale), coloured by outcome,
   with the ``ok`` p50 and p99 per bin.

Fault windows are shaded across panels 2 and 3 in the colour of their fault.
"""

from __future__ import annotations

import io
from typing import Any, Final

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.report.timeline import Timeline
from nemesis.fault_declaration import OTHER_COLOUR
from nemesis.fault_kinds import REGISTRY as FAULT_REGISTRY
from testbed.record.faults import FaultWindow

OUTCOME_COLOURS: Final[dict[str, str]] = {"ok": "#2a9d3f", "fail": "#d1242f", "info": "#e8890c"}
FAULT_COLOURS: Final[dict[str, str]] = {kind.name: kind.colour for kind in FAULT_REGISTRY.values()}
"""Each fault kind's colour, as its declaration in :mod:`nemesis.fault_kinds` gives it."""
OTHER_FAULT_COLOUR: Final = OTHER_COLOUR
DPI: Final = 100
WIDTH_INCHES: Final = 12.0


def fault_colour(kind: str) -> str:
    return FAULT_COLOURS.get(kind, OTHER_FAULT_COLOUR)


LABEL_CHARACTER_WIDTH: Final = 0.0068
"""Width of one 8-pt label character as a fraction of the lanes' x span (12 in figure, 100 dpi)."""


def _label(window: FaultWindow) -> str:
    return window.label + ("  (not healed)" if window.end_s is None else "")


def _lanes(windows: tuple[FaultWindow, ...], x_range: tuple[float, float]) -> list[int]:
    """Greedy lane per window (sorted by start): neither bars nor their labels overlap in a lane."""
    span = x_range[1] - x_range[0]
    lane_free_at: list[float] = []
    lanes = []
    for window in windows:
        stop = window.end_s if window.end_s is not None else x_range[1]
        occupied = max(stop, window.start_s + (len(_label(window)) * LABEL_CHARACTER_WIDTH + 0.01) * span)
        for lane, free_at in enumerate(lane_free_at):
            if free_at <= window.start_s:
                lane_free_at[lane] = occupied
                lanes.append(lane)
                break
        else:
            lane_free_at.append(occupied)
            lanes.append(len(lane_free_at) - 1)
    return lanes


def _draw_lanes(axis: Any, timeline: Timeline, x_range: tuple[float, float]) -> None:
    lanes = _lanes(timeline.windows, x_range)
    lane_count = max(lanes, default=-1) + 1
    span = x_range[1] - x_range[0]
    for window, lane in zip(timeline.windows, lanes, strict=True):
        stop = window.end_s if window.end_s is not None else x_range[1]
        colour = fault_colour(window.kind)
        axis.broken_barh(
            [(window.start_s, max(stop - window.start_s, span * 0.002))],
            (lane + 0.1, 0.8),
            facecolors=colour,
            alpha=0.85,
            hatch="//" if window.end_s is None else None,
            edgecolor="white",
        )
        label = _label(window)
        width = (len(label) * LABEL_CHARACTER_WIDTH + 0.006) * span
        if stop - window.start_s >= width:  # inside the bar
            x, align, colour_text = window.start_s + span * 0.003, "left", "white"
        elif stop + width <= x_range[1]:  # just after it
            x, align, colour_text = stop + span * 0.003, "left", "#24292f"
        else:  # no room on the right: end the label at the edge
            x, align, colour_text = x_range[1] - span * 0.003, "right", "#24292f"
        axis.text(
            x,
            lane + 0.5,
            label,
            va="center",
            ha=align,
            fontsize=8,
            color=colour_text,
            clip_on=True,
            bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0, "pad": 1}
            if colour_text != "white"
            else None,
        )
    axis.set_ylim(lane_count if lane_count else 1, 0)
    axis.set_yticks([])
    axis.set_ylabel("nemesis", rotation=0, ha="right", va="center")
    if not timeline.windows:
        axis.text(
            0.5,
            0.5,
            "no faults recorded",
            transform=axis.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="#57606a",
        )


def _shade(axis: Any, timeline: Timeline, end_s: float) -> None:
    for window in timeline.windows:
        stop = window.end_s if window.end_s is not None else end_s
        axis.axvspan(window.start_s, stop, color=fault_colour(window.kind), alpha=0.13, linewidth=0)


def _draw_throughput(axis: Any, timeline: Timeline) -> None:
    series = timeline.throughput
    x = series.index.to_numpy(dtype=np.float64)
    drawn = False
    for outcome in ("ok", "fail", "info"):
        values = series[outcome].to_numpy()
        if outcome != "ok" and not values.any():
            continue
        axis.step(
            np.append(x, x[-1] + timeline.bin_seconds),
            np.append(values, values[-1]),
            where="post",
            color=OUTCOME_COLOURS[outcome],
            label=outcome,
            linewidth=1.4,
        )
        drawn = True
    width = f"{timeline.bin_seconds:g} s bins"
    axis.set_ylabel(f"sends/s\n({width})")
    axis.set_ylim(bottom=0)
    if drawn:
        axis.legend(loc="upper right", fontsize=8, title="send completions", title_fontsize=8)


def _draw_latency(axis: Any, timeline: Timeline) -> None:
    frame = timeline.latencies
    if frame.empty:
        axis.text(
            0.5,
            0.5,
            "no completed sends",
            transform=axis.transAxes,
            ha="center",
            va="center",
            color="#57606a",
        )
        axis.set_yticks([])
        return
    floor = max(float(frame["latency_ms"].min()), 1e-3)
    for outcome in ("ok", "fail", "info"):
        rows = frame[frame["type"] == outcome]
        if rows.empty:
            continue
        axis.scatter(
            rows["invoked_s"],
            rows["latency_ms"].clip(lower=floor),
            s=4,
            alpha=0.45,
            linewidths=0,
            color=OUTCOME_COLOURS[outcome],
            label=f"{outcome} ({len(rows)})",
            rasterized=True,
        )
    ok = frame[frame["type"] == "ok"]
    if len(ok) >= 2:
        width = timeline.bin_seconds
        bins = (ok["invoked_s"] // width).astype("int64")
        quantiles = ok.groupby(bins.to_numpy())["latency_ms"].quantile([0.5, 0.99]).unstack()
        # every bin present, empty ones as NaN: the lines break over a stall instead of bridging it
        quantiles = quantiles.reindex(range(int(bins.min()), int(bins.max()) + 1))
        quantiles.index = quantiles.index * width + width / 2
        for quantile, style in ((0.5, "-"), (0.99, "--")):
            axis.plot(
                quantiles.index,
                quantiles[quantile].clip(lower=floor),
                style,
                color="#24292f",
                linewidth=1,
                marker=".",
                markersize=3,
                label=f"ok p{int(quantile * 100)}",
            )
    axis.set_yscale("log")
    axis.set_ylabel("send latency (ms)")
    axis.legend(loc="upper right", fontsize=8, markerscale=3)


def time_range(timeline: Timeline) -> tuple[float, float]:
    """The figure's x range (seconds): from the first send or fault to the end, padded 1 %.
    The rebalance timeline (:mod:`harness.report.rebalances`) uses it too, so the axes line up."""
    starts = [timeline.latencies["invoked_s"].min()] if not timeline.latencies.empty else []
    starts += [w.start_s for w in timeline.windows]
    starts += [a.start_s for a in timeline.assignments]
    first = float(min(starts)) if starts else 0.0
    end = max(timeline.duration_s, first + 1.0)
    pad = (end - first) * 0.01
    return (max(0.0, first - pad), end + pad)


def render_figure(timeline: Timeline) -> bytes:
    """The report's PNG for ``timeline`` (see the module docstring)."""
    x_range = time_range(timeline)
    lane_count = max(_lanes(timeline.windows, x_range), default=0) + 1
    lane_inches = 0.3 * lane_count + 0.3
    height = lane_inches + 2.6 + 3.2 + 0.9
    figure = Figure(figsize=(WIDTH_INCHES, height), dpi=DPI)
    # Fixed margins instead of constrained layout: the labels are known, and layout solving
    # was a third of the render time (text extents measured over and over).
    lanes_axis, throughput_axis, latency_axis = figure.subplots(
        3,
        1,
        sharex=True,
        gridspec_kw={
            "height_ratios": [lane_inches, 2.6, 3.2],
            "hspace": 0.12,
            "left": 0.085,
            "right": 0.985,
            "top": 1 - 0.12 / height,
            "bottom": 0.6 / height,
        },
    )
    _draw_lanes(lanes_axis, timeline, x_range)
    _draw_throughput(throughput_axis, timeline)
    _draw_latency(latency_axis, timeline)
    for axis in (throughput_axis, latency_axis):
        _shade(axis, timeline, x_range[1])
        axis.grid(True, alpha=0.25, linewidth=0.6)
    latency_axis.set_xlim(*x_range)
    latency_axis.set_xlabel("seconds since the test started")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def summarise_latency(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per outcome: count and p50/p99/max latency in ms (for the table under the figure)."""
    summary: dict[str, dict[str, float]] = {}
    for outcome in ("ok", "fail", "info"):
        latency = frame.loc[frame["type"] == outcome, "latency_ms"]
        if len(latency):
            summary[outcome] = {
                "count": float(len(latency)),
                "p50": float(latency.quantile(0.5)),
                "p99": float(latency.quantile(0.99)),
                "max": float(latency.max()),
            }
    return summary
