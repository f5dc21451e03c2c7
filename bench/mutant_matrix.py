"""The detection matrix of ``bench/mutants.py``: one row per hunt, read from its ``hunt.json``.

Kept apart from the bench's mechanics (patches, scratch copies, child hunts) because it is pure:
a hunt's record in, a row out, rows to a table or JSON -- and tested without Docker.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

BASELINE = "baseline"
"""The row of the unmutated broker."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the detection matrix: what one hunt found.

    ``detected`` is None when the hunt gave no answer (its process failed; ``problem`` says how).
    ``anomalies`` are those of the first invalid run, e.g. ``"lost-write x3"``; ``run_dir`` is that
    run's directory, or the hunt's own directory when no run was invalid.
    """

    mutant: str
    title: str
    detected: bool | None
    seconds_to_detection: float | None
    runs: int
    unknown_runs: int
    anomalies: tuple[str, ...]
    run_dir: str | None
    problem: str | None = None
    client_detected: bool | None = None
    """Whether a client-side check (no event logs) found it within the budget (None: unknown)."""
    client_seconds: float | None = None
    """Time to the first run a client-side check flagged."""
    hunt: str = ""
    """The profile's ``[[hunt]]`` it was hunted with (a baseline row is that hunt's baseline)."""

    @property
    def is_baseline(self) -> bool:
        return self.mutant == BASELINE

    @property
    def false_positive(self) -> bool:
        """The unmutated broker was found faulty: every mutant's detection is then suspect."""
        return self.is_baseline and self.detected is True


def read_results(run_dir: Path) -> Mapping[str, Any] | None:
    """A run's ``results.json`` (the checker's verdict), or None when it cannot be read."""
    try:
        results: Mapping[str, Any] = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results


def describe_anomalies(counts: Mapping[str, int], results: Mapping[str, Any] | None) -> tuple[str, ...]:
    """``"NAME xCOUNT"`` per anomaly, with ``(expected: RULE)`` when the run's ``results.json``
    says its configuration permits it -- a permitted anomaly in the baseline means the profile,
    not the harness, allows loss."""
    annotated = (results or {}).get("anomalies", {})
    described = []
    for name, count in counts.items():
        entry = annotated.get(name, {})
        expected = isinstance(entry, Mapping) and entry.get("expected") is True
        note = f" (expected: {entry.get('rule')})" if expected else ""
        described.append(f"{name} x{count}{note}")
    return tuple(described)


def row_from_record(
    mutant: str,
    title: str,
    record: Mapping[str, Any] | None,
    results: Callable[[Path], Mapping[str, Any] | None] = read_results,
    *,
    hunt: str = "",
) -> Row:
    """The matrix row of one hunt from its record (``hunt.json`` plus ``directory``; None: the
    hunt process failed).  Detection is the hunt's first invalid run, whichever check flagged it;
    client-side detection is the run that ended the hunt (its ``first_invalid``: a run a
    client-side check flagged, see :data:`CLIENT_SIDE_CHECKS`).  The time to a first invalid run
    that did not end the hunt is the sum of the run times before and including it."""
    if record is None:
        return Row(
            mutant, title, None, None, 0, 0, (), None, "the hunt process failed (output above)", hunt=hunt
        )
    runs: list[Mapping[str, Any]] = list(record.get("runs", []))
    client_dir = record.get("first_invalid")
    client_seconds = record.get("seconds_to_first_anomaly")
    unknown = sum(1 for run in runs if run.get("verdict") not in (True, False))
    problem = None if record.get("finished", True) else "the hunt was interrupted"
    position = next((number for number, run in enumerate(runs) if run.get("verdict") is False), None)
    seconds_to_client = float(client_seconds) if client_seconds is not None else None
    client = (client_dir is not None, seconds_to_client)
    if position is None:
        directory = record.get("directory")
        return Row(mutant, title, False, None, len(runs), unknown, (), directory, problem, *client, hunt=hunt)
    first = runs[position]
    first_dir = str(first.get("run_dir"))
    if first_dir == client_dir:
        seconds = seconds_to_client
    else:
        seconds = round(sum(float(run.get("seconds") or 0.0) for run in runs[: position + 1]), 1)
    anomalies = describe_anomalies(dict(first.get("anomalies", {})), results(Path(first_dir)))
    return Row(
        mutant, title, True, seconds, len(runs), unknown, anomalies, first_dir, problem, *client, hunt=hunt
    )


# ---- the matrix -------------------------------------------------------------------------------

COLUMNS = (
    "mutant",
    "hunt",
    "detected",
    "time to detection",
    "client-side only",
    "runs",
    "anomaly",
    "run dir",
)


def _cells(row: Row) -> tuple[str, ...]:
    if row.detected is None:
        detected = "ERROR"
    elif row.is_baseline:
        detected = "YES: FALSE POSITIVE" if row.detected else "no (clean)"
    else:
        detected = "yes" if row.detected else "no"
    seconds = row.seconds_to_detection
    if row.client_detected is None or row.detected is None:
        client = "-"
    elif row.client_detected:
        client = f"{row.client_seconds / 60:.1f} min" if row.client_seconds is not None else "yes"
    else:
        client = "not found"
    return (
        row.mutant,
        row.hunt or "-",
        detected,
        f"{seconds / 60:.1f} min" if seconds is not None else "-",
        client,
        f"{row.runs} ({row.unknown_runs} unknown)" if row.unknown_runs else str(row.runs),
        ", ".join(row.anomalies) or "-",
        row.run_dir or "-",
    )


def format_matrix(rows: Iterable[Row]) -> str:
    """The detection matrix as a fixed-width text table, grouped by hunt (in the order the rows
    name them), each hunt's baseline first, then a summary line, the rows' problems, and -- when a
    baseline found an anomaly -- a banner saying the matrix cannot be trusted."""
    rows = list(rows)
    hunt_order = {hunt: index for index, hunt in enumerate(dict.fromkeys(row.hunt for row in rows))}
    ordered = sorted(rows, key=lambda row: (hunt_order[row.hunt], not row.is_baseline))
    table = [COLUMNS, *(_cells(row) for row in ordered)]
    widths = [max(len(line[column]) for line in table) for column in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    mutants = [row for row in ordered if not row.is_baseline]
    if mutants:
        found = sum(1 for row in mutants if row.detected is True)
        by_clients = sum(1 for row in mutants if row.client_detected is True)
        errors = sum(1 for row in mutants if row.detected is None)
        lines.append("")
        lines.append(
            f"detected {found} of {len(mutants)} mutants ({by_clients} by the client-side checks alone)"
            + (f"; {errors} hunt(s) failed" if errors else "")
        )
    for row in ordered:
        if row.problem:
            lines.append(f"{row.mutant}: {row.problem}")
    if any(row.false_positive for row in ordered):
        banner = "!" * 78
        lines += [
            "",
            banner,
            "!!! FALSE POSITIVE: the UNMUTATED broker gave an anomaly under this profile, hunt and budget.",
            "!!! Every detection above is suspect until the baseline is clean: read its run directory.",
            banner,
        ]
    return "\n".join(lines)


def matrix_json(rows: Iterable[Row], profile: Path, budget_seconds: float, store: Path) -> dict[str, Any]:
    """The matrix as written by ``--json``: the set-up (with the hunts the rows name, in order),
    then one object per row."""
    rows = list(rows)
    return {
        "profile": str(profile),
        "hunts": list(dict.fromkeys(row.hunt for row in rows)),
        "budget_seconds": budget_seconds,
        "store": str(store),
        "rows": [
            {
                **dataclasses.asdict(row),
                "false_positive": row.false_positive,
                "anomalies": list(row.anomalies),
            }
            for row in rows
        ],
    }
