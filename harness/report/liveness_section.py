"""The run report's liveness part: the fault table with recovery times, the per-partition liveness
figures and the offset figure (:mod:`harness.report.offsets`).

Every figure shown here comes from ``results.json``'s ``liveness`` section (the checker owns
their definitions, ``checker.definitions``): the report draws and tabulates, it does not measure.
The fault windows are the timeline's (:mod:`testbed.record.faults`); the window whose heal is the
run's last heal gets the recovery times, which the checker measures from that heal.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.report.offset_marks import MARKED_KINDS, Marks, load_marks
from harness.report.offsets import MAX_PARTITIONS, load_series, render_offsets
from harness.report.window_effect import SendFigures, figure_cells
from testbed.record.faults import FaultWindow


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _after(seconds: Any, what: str, never: str) -> str:
    """``ack 1.300 s``, or ``never`` when it did not happen (not ``ack - s``)."""
    return never if seconds is None else f"{what} {seconds:.3f} s"


def _recovery(liveness: Mapping[str, Any]) -> str:
    """``p0: ack 1.300 s, poll 2.800 s; p1: ack 0.900 s, no poll of new records`` for the last heal's row."""
    parts = [
        f"p{_esc(p)}: {_after(f['recovery_send_s'], 'ack', 'no ack')},"
        f" {_after(f['recovery_poll_s'], 'poll', 'no poll of new records')}"
        for p, f in sorted(liveness.get("partitions", {}).items(), key=lambda item: int(item[0]))
    ]
    return "; ".join(parts) or "-"


def fault_table(
    windows: tuple[FaultWindow, ...],
    results: Mapping[str, Any] | None,
    figures: tuple[list[SendFigures], SendFigures] | None = None,
) -> str:
    """The fault windows, one row each with what it did to the sends (``figures``,
    :mod:`harness.report.window_effect`), the last heal's with the recovery times after it; last,
    the sends outside every window, to compare with."""
    if not windows:
        return ""
    inside, outside = figures or ([SendFigures(None, None)] * len(windows), SendFigures(None, None))
    liveness = (results or {}).get("liveness") or {}
    last_heal = liveness.get("last_heal_s")
    rows = []
    for window, effect in zip(windows, inside, strict=True):
        end = f"{window.end_s:.3f}" if window.end_s is not None else "never healed"
        is_last = last_heal is not None and window.end_s is not None and round(window.end_s, 3) == last_heal
        note = "" if window.announced else " (unannounced: no window for the liveness checks)"
        rows.append(
            f"<tr><td>{_esc(window.label)}{_esc(note)}</td><td class='num'>{window.start_s:.3f}</td>"
            f"<td class='num'>{end}</td><td>{_esc(window.healed_by or '-')}</td>{figure_cells(effect)}"
            f"<td>{_esc(_recovery(liveness)) if is_last and window.announced else '-'}</td></tr>"
        )
    rows.append(
        f"<tr><td>outside every window</td><td>-</td><td>-</td><td>-</td>{figure_cells(outside)}<td>-</td></tr>"
    )
    return (
        "<h3>fault windows</h3><table class='faults'><tr><th>fault</th><th>from (s)</th><th>to (s)</th>"
        "<th>healed by</th><th>acked sends/s</th><th>p99 send latency (ms)</th>"
        "<th>recovery after the last heal (first ack, first poll of new records)</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def liveness_table(results: Mapping[str, Any] | None) -> str:
    """Per partition: longest gap without progress or fault, and the records no poll returned."""
    liveness = (results or {}).get("liveness")
    if not liveness:
        return ""
    rows = []
    for partition, figures in sorted(liveness["partitions"].items(), key=lambda item: int(item[0])):
        unpolled = figures["unpolled"]
        ages = ", ".join(f"{_esc(age)} s: {count}" for age, count in unpolled["by_age_s"].items() if count)
        rows.append(
            f"<tr><td>{_esc(partition)}</td><td class='num'>{_seconds(figures['longest_gap_s'])}</td>"
            f"<td class='num'>{_seconds(figures['longest_gap_from_s'])}</td>"
            f"<td class='num'>{unpolled['count']}</td><td>{ages or '-'}</td></tr>"
        )
    return (
        f"<h3>liveness (stall threshold {liveness['stall_threshold_s']:g} s, {_esc(liveness['mode'])})</h3>"
        "<table class='liveness'><tr><th>partition</th><th>longest gap (s)</th><th>from (s)</th>"
        "<th>unpolled at the end</th><th>by age</th></tr>" + "".join(rows) + "</table>"
    )


def offsets_figure(
    run_dir: Path, windows: tuple[FaultWindow, ...], results: Mapping[str, Any] | None, end_s: float
) -> str:
    """The offset figure as an embedded PNG, or a note saying why there is none; under it, what
    its marks are: every lost and divergent record, or only the examples of an older check."""
    series = load_series(run_dir)
    if series is None:
        return "<p class='note'>No offset plot: history.parquet is written when the run is checked.</p>"
    if not series.partitions:
        return "<p class='note'>No offset plot: no acknowledged send and no poll in the history.</p>"
    marks = load_marks(run_dir, results)
    image = base64.b64encode(render_offsets(series, windows, marks, end_s)).decode("ascii")
    notes = [_marks_note(marks, results)]
    if series.thinned:
        notes.append("Some partitions have more sends or polls than the plot draws: they are thinned evenly.")
    if len(series.partitions) > MAX_PARTITIONS:
        notes.append(f"The first {MAX_PARTITIONS} of {len(series.partitions)} partitions are shown.")
    return (
        "<h3>offsets over time</h3>"
        '<img class="plot" alt="offset of every acknowledged send and polled record per partition, '
        f'and unpolled records over time" src="data:image/png;base64,{image}">'
        + "".join(f"<p class='note'>{_esc(n)}</p>" for n in notes if n)
    )


def _marks_note(marks: Marks, results: Mapping[str, Any] | None) -> str:
    """What the red and orange marks are: the checker's every record, or only its examples."""
    found = {
        kind: int(anomaly.get("count", 0))
        for kind, anomaly in ((results or {}).get("anomalies") or {}).items()
        if kind in MARKED_KINDS and isinstance(anomaly, Mapping)
    }
    if not found:
        return ""
    counts = ", ".join(f"{kind} {count}" for kind, count in found.items())
    if not marks.complete:
        return (
            f"Only the checker's examples are marked ({counts} found): the run was checked before "
            "anomaly_records.parquet existed; tidemark check RUN_DIR marks every one."
        )
    differ = [kind for kind, count in found.items() if marks.count(kind) != count]
    if differ:  # a records file from another check than results.json's: say so, never guess
        return (
            f"The marks ({', '.join(f'{kind} {marks.count(kind)}' for kind in differ)}) disagree with "
            f"results.json ({counts}): anomaly_records.parquet is from another check; tidemark check RUN_DIR again."
        )
    return f"Every lost and divergent record the checker found is marked ({counts})."
