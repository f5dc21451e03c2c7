"""The registry as ``docs/anomalies.md`` shows it: its names table, generated, never hand-kept.

Apart from :mod:`checker.anomalies` because only the documentation (and its test,
``tests/checker/test_docs.py``) reads it.
"""

from __future__ import annotations

from checker.anomalies import ANOMALIES, WARNING


def names_table() -> list[str]:
    """The rows of ``docs/anomalies.md``'s names table (``| anomaly | family | implies | in one line |``)."""
    rows = []
    for anomaly in ANOMALIES:
        family = anomaly.family.label
        if anomaly.error_when_strict:
            family += " (warning; error with `--liveness strict`)"
        elif anomaly.severity == WARNING:
            family += " (warning)"
        implies = ", ".join(anomaly.implies) or "-"
        rows.append(f"| {anomaly.name} | {family} | {implies} | {anomaly.doc} |")
    return rows
