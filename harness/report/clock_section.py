"""The report's broker clocks: how far each broker's own wall clock read off real time, over the run.

Under ``clock-skew`` and ``clock-drift`` a broker's ``time.time()`` is libfaketime's, while its
event log stamps every event with the kernel's clock (``ts``, :mod:`broker_impl.real_clock`).  Two
kinds of event also carry the broker's own clock (``docs/events.md``): ``start`` (``wall_ms``, read
as the process starts) and ``txn-state`` (``last_update_ms``, the stamp a transaction coordinator
persisted).  Each is one reading of that broker's clock offset -- what the fault did, as the broker
saw it, where the fault windows above only say when the nemesis acted: a jump is a step, a drift
a slope, a restarted broker a point on its node's line (or not), a heal a return to zero.

A reading from ``txn-state`` is taken before the state is replicated and its event written, so it
is behind by that write's latency times the clock's rate: milliseconds, invisible at this scale.
Shown only for a run that injected a clock fault (its nemesis ops say so); a broker that wrote no
such event (no coordinator there) has only its starts.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import pandas as pd
from matplotlib.figure import Figure

from testbed.record.faults import CLOCK_FAULTS, NemesisEvent

CLOCK_FIELDS: Final = {"start": "wall_ms", "txn-state": "last_update_ms"}
"""Event kind -> its field holding the broker's own wall clock, in ms."""
COLUMNS: Final = ["node", "kind", "real_s", "offset_s"]


def clock_readings(events_file: Path) -> pd.DataFrame:
    """Every reading of a broker's clock in the run's event table: node, kind, real time (s since
    the epoch) and how far the broker's clock read off it (s), in real-time order.  Empty when
    the table is missing or has no such event (a run of another target, or before the fields)."""
    try:
        table = pd.read_parquet(events_file, columns=["node_name", "kind", "ts", "line"])
    except (OSError, ValueError, KeyError):
        return pd.DataFrame(columns=COLUMNS)
    table = table[table["kind"].isin(list(CLOCK_FIELDS))]
    rows = []
    for node, kind, ts, line in zip(
        table["node_name"], table["kind"], table["ts"], table["line"], strict=True
    ):
        try:
            wall_ms = json.loads(line).get(CLOCK_FIELDS[kind])
        except (TypeError, ValueError, AttributeError):
            continue  # the event table's reader accepted the line; a damaged one is its business
        if isinstance(wall_ms, int) and not isinstance(wall_ms, bool):
            rows.append((str(node), str(kind), ts / 1e9, wall_ms / 1e3 - ts / 1e9))
    return pd.DataFrame(rows, columns=COLUMNS).sort_values("real_s", kind="stable").reset_index(drop=True)


def clock_section(run_dir: Path, events: Iterable[NemesisEvent]) -> str:
    """The section as HTML: a table per broker and a plot of its readings; empty for a run that
    moved no clock, a note when it did but no broker event says what its clock read."""
    if not any(event.f in CLOCK_FAULTS for event in events):
        return ""
    readings = clock_readings(run_dir / "events.parquet")
    if readings.empty:
        return (
            "<h3>broker clocks</h3><p class='note'>No reading of a broker's own clock: the event table has"
            " no <code>start</code> with <code>wall_ms</code> nor <code>txn-state</code> with"
            " <code>last_update_ms</code> (checked before they were recorded, or another target).</p>"
        )
    origin = float(readings["real_s"].min())
    image = base64.b64encode(_render(readings, origin)).decode("ascii")
    return (
        "<h3>broker clocks</h3>"
        "<p class='note'>How far each broker's wall clock read off real time, from its event log"
        " (<code>start</code>'s <code>wall_ms</code>, <code>txn-state</code>'s <code>last_update_ms</code>),"
        f" against seconds since the first reading ({_utc(origin)}).</p>"
        + _table(readings, origin)
        + f'<img class="plot" alt="each broker\'s clock offset over real time" src="data:image/png;base64,{image}">'
    )


def _utc(epoch_s: float) -> str:
    stamp = datetime.datetime.fromtimestamp(epoch_s, datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _table(readings: pd.DataFrame, origin: float) -> str:
    rows = []
    for node, mine in readings.groupby("node", sort=True):
        starts = mine[mine["kind"] == "start"]
        at_starts = ", ".join(
            f"{offset:+.1f} at {real - origin:.1f}"
            for real, offset in zip(starts["real_s"], starts["offset_s"], strict=True)
        )
        rows.append(
            f"<tr><td>{html.escape(str(node))}</td><td class='num'>{len(mine)}</td>"
            f"<td class='num'>{mine['offset_s'].min():+.1f}</td><td class='num'>{mine['offset_s'].max():+.1f}</td>"
            f"<td class='num'>{mine['offset_s'].iloc[-1]:+.1f}</td><td>{html.escape(at_starts) or '-'}</td></tr>"
        )
    return (
        "<table><tr><th>broker</th><th>readings</th><th>most behind (s)</th><th>most ahead (s)</th>"
        "<th>last (s)</th><th>at each start: offset (s) at time (s)</th></tr>" + "".join(rows) + "</table>"
    )


def _render(readings: pd.DataFrame, origin: float) -> bytes:
    figure = Figure(figsize=(12.0, 3.2), dpi=100)
    axis = figure.add_subplot(1, 1, 1)
    for node, mine in readings.groupby("node", sort=True):
        states = mine[mine["kind"] != "start"]
        line = axis.plot(states["real_s"] - origin, states["offset_s"], ".", markersize=3, label=str(node))
        starts = mine[mine["kind"] == "start"]
        axis.plot(starts["real_s"] - origin, starts["offset_s"], "o", color=line[0].get_color(), markersize=7)
    axis.axhline(0.0, color="#999999", linewidth=0.8)
    axis.set_xlabel("s since the first reading (real time); large dots: a broker's start")
    axis.set_ylabel("clock offset (s)")
    axis.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
