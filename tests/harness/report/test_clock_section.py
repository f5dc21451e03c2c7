"""The report's broker clocks: readings from the event table's ``start`` and ``txn-state`` events,
a table per broker, a plot, and nothing for a run that moved no clock."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.report.clock_section import clock_readings, clock_section
from testbed.record.faults import NemesisEvent

T0 = 1_796_000_000.0


def event(node: str, kind: str, real_s: float, wall_s: float | None, **more: object) -> dict[str, object]:
    field = {"start": "wall_ms", "txn-state": "last_update_ms"}.get(kind)
    body = {"ts": int(real_s * 1e9), "kind": kind, **more}
    if field and wall_s is not None:
        body[field] = int(wall_s * 1000)
    return {"node_name": node, "kind": kind, "ts": body["ts"], "line": json.dumps(body)}


def write_events(run: Path, rows: list[dict[str, object]]) -> None:
    pd.DataFrame(rows).to_parquet(run / "events.parquet")


def drift(f: str = "clock-drift") -> NemesisEvent:
    return NemesisEvent(f, ("n1",), {"nodes": ["n1"], "rate_pct": 1000}, 10**9, 2 * 10**9, "ok", None)


def test_each_broker_s_readings_are_its_clock_against_the_kernel_s(tmp_path: Path) -> None:
    write_events(
        tmp_path,
        [
            event("n1", "start", T0, T0),
            event("n1", "txn-state", T0 + 2, T0 + 2 + 9),  # nine seconds ahead
            event("n2", "start", T0 + 1, None),  # an event table from before the field: no reading
            event("n2", "hw", T0 + 1.5, None),
            event("n1", "start", T0 + 3, T0 + 3 + 18.5),  # restarted on its node's clock
            event("controller", "start", T0 + 0.5, None, role="controller"),
        ],
    )
    readings = clock_readings(tmp_path / "events.parquet")
    assert readings[["node", "kind"]].values.tolist() == [
        ["n1", "start"],
        ["n1", "txn-state"],
        ["n1", "start"],
    ]
    assert readings["offset_s"].round(3).tolist() == [0.0, 9.0, 18.5]

    html = clock_section(tmp_path, [drift()])
    assert "broker clocks" in html and "<img" in html
    assert "<td>n1</td><td class='num'>3</td><td class='num'>+0.0</td><td class='num'>+18.5</td>" in html
    assert "+0.0 at 0.0, +18.5 at 3.0" in html


def test_a_run_that_moved_no_clock_has_no_section_and_one_without_readings_says_why(tmp_path: Path) -> None:
    write_events(tmp_path, [event("n1", "hw", T0, None)])
    assert clock_section(tmp_path, [drift("kill")]) == ""
    assert "No reading of a broker's own clock" in clock_section(tmp_path, [drift("clock-skew")])
    assert "No reading" in clock_section(tmp_path / "missing", [drift()])
    assert clock_readings(tmp_path / "missing" / "events.parquet").empty
