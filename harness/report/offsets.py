"""The run report's offset figure: Jepsen's per-partition offset order plot and unpolled-over-time.

One PNG (matplotlib's object API on the Agg canvas, as :mod:`harness.report.plots`):

1. **offsets** -- one panel per partition (the first :data:`MAX_PARTITIONS`): the offset of
   every acknowledged send at its completion time and of every record a consumer poll returned
   at the poll's time, so a consumer that falls behind, a skip or a rewind is a visible shape.
   The polls are drawn faint and under the sends, so a consumer that keeps up hides no send.
   *Every* record the checker found lost is a red cross (lost-write: the acknowledged send of
   the value; lost-read: each poll that returned it) and every divergent offset
   (replica-divergence) an orange band across the panel, each kind in the legend with its
   number: the checker decides which records those are (:mod:`harness.report.offset_marks`
   reads them), the report only shows them.  Fault windows are shaded as in the timeline figure.
2. **lost records over time** (only when some are) -- lost-write and lost-read marks per time
   bin, every partition's, stacked: where a thousand crosses cover each other, how many and when.
3. **unpolled over time** -- per partition, how many acknowledged values no poll had returned
   yet: a value counts from its acknowledgement until the first poll that returned it (never,
   when none did).  Jepsen's "unseen" plot; the final drain is not a poll and does not count.

Input: ``history.parquet`` (the checker writes it; a run never checked has none and the figure
says so), read for the few columns it needs.  Sends and polls beyond :data:`MAX_MARKS` per
partition are thinned evenly, and the page says so; lost and divergent marks never are.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from harness.report.offset_marks import Marks, marked_rows, offset_ranges
from testbed.record.faults import FaultWindow
from testbed.record.history import POLL_CODES, SEND_CODES
from testbed.record.ops import OP_TYPES
from testbed.record.rundir import RunDir

MAX_PARTITIONS: Final = 6
MAX_MARKS: Final = 20_000
DENSITY_BINS: Final = 60
LOST_WRITE, LOST_READ, DIVERGENCE = "lost-write", "lost-read", "replica-divergence"
SEND_COLOUR, POLL_COLOUR, LOST_COLOUR, DIVERGENT_COLOUR = "#2a9d3f", "#1f6fc5", "#d1242f", "#e8890c"
_OK = OP_TYPES.index("ok")
_COLUMNS = ["f", "type", "time", "partition", "offset", "value", "item"]


@dataclasses.dataclass(frozen=True)
class OffsetSeries:
    """What the figure plots, per partition (all times in seconds since the test started)."""

    sends: pd.DataFrame
    """``partition, time_s, offset, value``: acknowledged sends with an offset >= 0."""
    polls: pd.DataFrame
    """``partition, time_s, offset, value``: every record an ``ok`` poll returned."""
    partitions: tuple[int, ...]
    thinned: bool


def load_series(run_dir: Path) -> OffsetSeries | None:
    """The sends and poll records of the run's ``history.parquet``; None when it has none."""
    path = RunDir(run_dir).history_parquet
    if not path.is_file():
        return None
    table = pq.read_table(path, columns=_COLUMNS)
    ok = pc.equal(table["type"], _OK)
    # A committed transaction's sends and every transactional read count as the plain ones do.
    is_send = pc.is_in(table["f"], value_set=pa.array(SEND_CODES, pa.int8()))
    is_poll = pc.is_in(table["f"], value_set=pa.array(POLL_CODES, pa.int8()))
    sends = table.filter(pc.and_(pc.and_(ok, is_send), pc.greater_equal(table["offset"], 0)))
    polls = table.filter(pc.and_(pc.and_(ok, is_poll), pc.is_valid(table["item"])))

    def frame(part: Any) -> pd.DataFrame:
        data = part.select(["partition", "time", "offset", "value"]).to_pandas()
        data = data.dropna(subset=["partition", "offset"])
        return pd.DataFrame(
            {
                "partition": data["partition"].astype("int64"),
                "time_s": data["time"].to_numpy(dtype=np.float64) / 1e9,
                "offset": data["offset"].astype("int64"),
                "value": data["value"],
            }
        )

    sent, polled = frame(sends), frame(polls)
    partitions = tuple(sorted({*sent["partition"].tolist(), *polled["partition"].tolist()}))
    return OffsetSeries(sent, polled, partitions, _too_many(sent) or _too_many(polled))


def _too_many(frame: pd.DataFrame) -> bool:
    return bool(len(frame)) and int(frame.groupby("partition").size().max()) > MAX_MARKS


def _thin(frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) <= MAX_MARKS:
        return frame
    return frame.iloc[np.linspace(0, len(frame) - 1, MAX_MARKS).astype(np.int64)]


def unpolled_series(
    sends: pd.DataFrame, polls: pd.DataFrame
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(times, counts)`` of one partition: after ``times[i]``, ``counts[i]`` acknowledged values
    had not been returned by any poll (a value counts from its ack to its first poll, if any)."""
    acked = sends.dropna(subset=["value"]).groupby("value")["time_s"].min()
    first_poll = polls.dropna(subset=["value"]).groupby("value")["time_s"].min()
    polled = first_poll.reindex(acked.index)
    starts = acked.to_numpy(dtype=np.float64)
    ends = np.maximum(polled.to_numpy(dtype=np.float64), starts)  # NaN: never polled
    seen = ~np.isnan(ends)
    times = np.concatenate([starts, ends[seen]])
    steps = np.concatenate([np.ones(len(starts)), -np.ones(int(seen.sum()))])
    order = np.argsort(times, kind="stable")
    return times[order], np.cumsum(steps[order]).astype(np.int64)


def _lost_size(count: int) -> float:
    """Marker area for ``count`` lost marks in one panel: large while few, small when thousands
    would cover each other (the histogram row then tells how many, when)."""
    return 40.0 if count <= 50 else 18.0 if count <= 500 else 6.0


def _draw_divergence(axis: Any, offsets: list[int]) -> None:
    """Every divergent offset as a band across the panel (one shape per run of consecutive
    offsets, at least a line thick), with its legend entry."""
    if not offsets:
        return
    ranges = offset_ranges(offsets)
    bands = [
        [(0.0, low - 0.5), (1.0, low - 0.5), (1.0, high + 0.5), (0.0, high + 0.5)] for low, high in ranges
    ]
    colour = to_rgba(DIVERGENT_COLOUR)
    axis.add_collection(
        PolyCollection(
            bands,
            transform=axis.get_yaxis_transform(),
            facecolors=[(*colour[:3], 0.35)],
            edgecolors=[(*colour[:3], 0.9)],
            linewidths=1.2,
            zorder=1.5,
        ),
        autolim=False,
    )
    low, high = axis.get_ylim()
    axis.set_ylim(min(low, ranges[0][0] - 1), max(high, ranges[-1][1] + 1))
    axis.plot(
        [], [], color=DIVERGENT_COLOUR, linewidth=4, alpha=0.7, label=f"divergent offset ({len(offsets)})"
    )


def _draw_partition(
    axis: Any, sends: pd.DataFrame, polls: pd.DataFrame, marks: Marks, partition: int
) -> None:
    """One partition's panel: polls under sends (a consumer that keeps up hides no send), every
    divergent offset as a band, every lost record as a cross on top, each in the legend."""
    for frame, size, colour, alpha, zorder, label in (
        (polls, 7, POLL_COLOUR, 0.35, 1, "polled"),
        (sends, 3, SEND_COLOUR, 1.0, 2, "acknowledged send"),
    ):
        thinned = _thin(frame)
        axis.scatter(
            thinned["time_s"],
            thinned["offset"],
            s=size,
            color=colour,
            alpha=alpha,
            linewidths=0,
            zorder=zorder,
            label=label,
        )
    _draw_divergence(axis, marks.of(DIVERGENCE, partition))
    for kind, frame, marker, label in (
        (LOST_WRITE, sends, "x", "lost write"),
        (LOST_READ, polls, "+", "lost read (its poll)"),
    ):
        lost = marked_rows(frame, marks.of(kind, partition))
        if len(lost):
            axis.scatter(
                lost["time_s"],
                lost["offset"],
                s=_lost_size(len(lost)),
                marker=marker,
                color=LOST_COLOUR,
                linewidths=1.2,
                zorder=3,
                label=f"{label} ({len(lost)})",
            )
    axis.set_ylabel(f"p{partition} offset")
    axis.legend(loc="upper left", fontsize=7, markerscale=1.5)


def _lost_times(series: OffsetSeries, marks: Marks, kind: str) -> np.ndarray[Any, Any]:
    """The times of every lost mark of ``kind`` in every partition (the histogram row's input)."""
    frame = series.sends if kind == LOST_WRITE else series.polls
    times = [
        marked_rows(frame[frame["partition"] == p], marks.of(kind, p))["time_s"].to_numpy(np.float64)
        for p in series.partitions
    ]
    return np.concatenate(times) if times else np.zeros(0)


def _draw_density(axis: Any, series: OffsetSeries, marks: Marks, end_s: float) -> None:
    """Lost records per time bin, every partition's, stacked by kind: how many and when, where
    crosses would be thousands on top of each other."""
    times = [(_lost_times(series, marks, kind), kind) for kind in (LOST_WRITE, LOST_READ)]
    edges = np.linspace(0.0, max(end_s, 1e-9), DENSITY_BINS + 1)
    bottom = np.zeros(DENSITY_BINS)
    for (found, kind), colour in zip(times, (LOST_COLOUR, "#8c1a20"), strict=True):
        if len(found):
            counts, _ = np.histogram(found, bins=edges)
            axis.bar(
                edges[:-1],
                counts,
                width=np.diff(edges),
                bottom=bottom,
                align="edge",
                color=colour,
                label=f"{kind} ({len(found)})",
                linewidth=0,
            )
            bottom += counts
    axis.set_ylabel(f"lost / {edges[1] - edges[0]:.2g} s")
    axis.legend(loc="upper left", fontsize=7)


def render_offsets(
    series: OffsetSeries, windows: tuple[FaultWindow, ...], marks: Marks, end_s: float
) -> bytes:
    """The PNG (see the module docstring)."""
    buffer = io.BytesIO()
    offsets_figure(series, windows, marks, end_s).savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def offsets_figure(
    series: OffsetSeries, windows: tuple[FaultWindow, ...], marks: Marks, end_s: float
) -> Figure:
    """The figure :func:`render_offsets` draws: one axis per partition shown, the lost-records
    histogram when some are lost, and the unpolled axis, in that order."""
    shown = series.partitions[:MAX_PARTITIONS]
    density = any(len(_lost_times(series, marks, kind)) for kind in (LOST_WRITE, LOST_READ))
    rows = len(shown) + 1 + int(density)
    height = 2.2 * len(shown) + 2.4 + 1.4 * int(density)
    ratios = [2.2] * len(shown) + ([1.2] if density else []) + [2.2]
    figure = Figure(figsize=(12.0, height), dpi=100)
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios})[:, 0]
    figure.subplots_adjust(left=0.085, right=0.985, top=1 - 0.15 / height, bottom=0.6 / height, hspace=0.25)
    for axis, partition in zip(axes, shown, strict=False):
        sends = series.sends[series.sends["partition"] == partition]
        polls = series.polls[series.polls["partition"] == partition]
        _draw_partition(axis, sends, polls, marks, partition)
    if density:
        _draw_density(axes[len(shown)], series, marks, end_s)
    unpolled_axis = axes[-1]
    for partition in shown:
        times, counts = unpolled_series(
            series.sends[series.sends["partition"] == partition],
            series.polls[series.polls["partition"] == partition],
        )
        if len(times):
            unpolled_axis.step(times, counts, where="post", linewidth=1, label=f"p{partition}")
    unpolled_axis.set_ylabel("unpolled")
    if shown:
        unpolled_axis.legend(loc="upper left", fontsize=7)
    for axis in axes:
        for window in windows:
            stop = window.end_s if window.end_s is not None else end_s
            axis.axvspan(window.start_s, stop, color="#6e7781", alpha=0.12, linewidth=0)
        axis.grid(True, alpha=0.25, linewidth=0.6)
    axes[-1].set_xlabel("seconds since the test started")
    return figure
