"""The run report's offset figure: Jepsen's per-partition offset order plot and unpolled-over-time.

One PNG (matplotlib's object API on the Agg canvas, as :mod:`harness.report.plots`):

1. **offsets** -- one panel per partition (the first :data:`MAX_PARTITIONS`): the offset of
   every acknowledged send at its completion time and of every record a consumer poll returned
   at the poll's time, so a consumer that falls behind, a skip or a rewind is a visible shape.
   The records ``results.json``'s examples name as lost are red crosses (lost-write: the
   acknowledged send of the value; lost-read: the poll that returned it) and the divergent
   offsets (replica-divergence) orange bars across the panel: the checker decides which records
   those are (its examples: at most ``--examples`` of each), the report only shows them.  Fault windows are
   shaded as in the timeline figure.
2. **unpolled over time** -- per partition, how many acknowledged values no poll had returned
   yet: a value counts from its acknowledgement until the first poll that returned it (never,
   when none did).  Jepsen's "unseen" plot; the final drain is not a poll and does not count.

Input: ``history.parquet`` (the checker writes it; a run never checked has none and the figure
says so), read for the few columns it needs.  Marks beyond :data:`MAX_MARKS` per kind and
partition are thinned evenly, and the page says so.
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
from matplotlib.figure import Figure

from testbed.record.faults import FaultWindow
from testbed.record.history import POLL_CODES, SEND_CODES
from testbed.record.ops import OP_TYPES
from testbed.record.rundir import RunDir

MAX_PARTITIONS: Final = 6
MAX_MARKS: Final = 20_000
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


def marked(results: dict[str, Any] | None, kind: str, field: str) -> dict[int, list[int]]:
    """partition -> the ``field`` (``value`` or ``offset``) of each example of ``kind`` in ``results.json``."""
    marks: dict[int, list[int]] = {}
    for example in ((results or {}).get("anomalies", {}).get(kind) or {}).get("examples", []):
        partition, mark = example.get("partition"), example.get(field)
        if isinstance(partition, int) and isinstance(mark, int):
            marks.setdefault(partition, []).append(mark)
    return marks


def render_offsets(
    series: OffsetSeries, windows: tuple[FaultWindow, ...], results: dict[str, Any] | None, end_s: float
) -> bytes:
    """The PNG (see the module docstring)."""
    shown = series.partitions[:MAX_PARTITIONS]
    rows = len(shown) + 1
    height = 2.2 * len(shown) + 2.4
    figure = Figure(figsize=(12.0, height), dpi=100)
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    figure.subplots_adjust(left=0.085, right=0.985, top=1 - 0.15 / height, bottom=0.6 / height, hspace=0.25)
    lost_sends, lost_reads = marked(results, LOST_WRITE, "value"), marked(results, LOST_READ, "value")
    divergent = marked(results, DIVERGENCE, "offset")
    for axis, partition in zip(axes, shown, strict=False):
        sends = series.sends[series.sends["partition"] == partition]
        polls = series.polls[series.polls["partition"] == partition]
        for frame, colour, label in (
            (sends, SEND_COLOUR, "acknowledged send"),
            (polls, POLL_COLOUR, "polled"),
        ):
            thinned = _thin(frame)
            axis.scatter(thinned["time_s"], thinned["offset"], s=3, color=colour, label=label, linewidths=0)
        for offset in divergent.get(partition, []):
            axis.axhline(offset, color=DIVERGENT_COLOUR, linewidth=1.2, alpha=0.8)
        lost_here = pd.concat(
            [
                sends[sends["value"].isin(lost_sends.get(partition, []))],
                polls[polls["value"].isin(lost_reads.get(partition, []))],
            ]
        )
        if len(lost_here):
            axis.scatter(
                lost_here["time_s"], lost_here["offset"], s=40, marker="x", color=LOST_COLOUR, label="lost"
            )
        axis.set_ylabel(f"p{partition} offset")
        axis.legend(loc="upper left", fontsize=7, markerscale=2)
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
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
