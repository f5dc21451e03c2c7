"""A broker or controller event inside an anomaly example, shown as a small table, not raw JSON.

The white-box checks (hw-regression, incomplete-leader, truncated-committed, ...) give the events
that prove them as examples: ``{"exposure": {"kind": "become-leader", "node": 2, "epoch": 1,
"hw": 4, "isr": [2], ...}, "previous": {...}}``.  Printed as one line of JSON each, a reader has
to hunt for the two numbers that matter; as a table headed by what happened, where and when
(``become-leader`` on broker 2, seq 18, 07:41:03.000054 UTC), the fields line up for comparison.  An
event is recognised by the header every event log line carries (``docs/events.md``: ``ts``,
``node``, ``seq``, ``kind``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

from harness.report.html_page import esc, kv_table

HEADER: Final = ("ts", "node", "seq", "kind")
LEFT_OUT: Final = frozenset({*HEADER, "topic"})
"""Fields the heading says (or, for ``topic``, the run's one workload topic)."""


def is_event(value: Any) -> bool:
    """Whether ``value`` is an event of a broker's or the controller's event log."""
    return (
        isinstance(value, dict) and all(field in value for field in HEADER) and isinstance(value["kind"], str)
    )


def event_html(event: Mapping[str, Any]) -> str:
    """``event`` as a heading (kind, node, seq, its wall-clock time to the microsecond) over a
    table of its other fields, each value as a table cell shows it."""
    ts = event.get("ts")
    stamp = datetime.datetime.fromtimestamp(ts / 1e9, datetime.UTC) if isinstance(ts, int) else None
    when = f", {stamp:%H:%M:%S.%f} UTC" if stamp is not None else ""
    heading = (
        f'<div class="event"><b>{esc(event["kind"])}</b> '
        f'<span class="note">(node {esc(event.get("node"))}, seq {esc(event.get("seq"))}{esc(when)})</span>'
    )
    return (
        heading
        + kv_table({key: value for key, value in event.items() if key not in LEFT_OUT}, "event")
        + "</div>"
    )
