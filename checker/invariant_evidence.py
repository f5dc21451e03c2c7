"""The evidence of the white-box checks: a run's event logs, and what their state means for a verdict.

The white-box checks (:data:`checker.definitions.INVARIANT_CHECKS`) read ``events.parquet``, the
table :mod:`testbed.record.event_table` makes of the run's collected event logs (the record makes
it, :func:`testbed.record.finish.finish_events`, when absent or older than a log; the rule of
which runs keep event logs is the record's too, :func:`testbed.record.finish.event_logs_absent`).
The rules, the same as for the replica dumps (:mod:`checker.evidence`):

* **Not applicable** -- named in ``results.json``'s ``not_applicable``, no reason for an unknown
  verdict -- when the target keeps no event log: a target whose replicas are not the bundled
  broker's (``test.json``'s ``replica_evidence`` is ``single-store``, tansu on PostgreSQL, or
  ``none``, an external cluster), a bundled run with ``event.log.enable=false``, or a run that
  recorded no ``event.log.enable`` at all (stored before the brokers kept event logs, or a
  hand-made record).  What a user chose not to record cannot be missing.
* **Incomplete** -- the verdict is then at best ``unknown`` -- when the target should have kept
  event logs and one is missing, unreadable or damaged (a line no crash explains: the node's
  whole log is then left out, as a damaged dump makes its node missing), or a log that was read
  lost events: a torn line (a crash cut an event in half) or a gap in ``seq`` (a failed write).
  The checks still run on the events present: each check can only find fewer violations with
  fewer events (a lower exposed HW, fewer truncations), so what they find stays proven.

isr-divergence also reads the replica dumps, whose absence :mod:`checker.evidence` already
reports.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from checker.definitions import INVARIANT_CHECKS
from testbed.record.finish import event_logs_absent, finish_events
from testbed.record.history import read_metadata


@dataclasses.dataclass(frozen=True, slots=True)
class EventEvidence:
    """What the white-box checks have to go on for one run."""

    path: Path | None
    """``events.parquet``, or None when the checks do not apply."""
    run_id: int | None
    incomplete: list[str]
    not_applicable: dict[str, str]


def event_evidence(run_dir: Path, spec: dict[str, Any]) -> EventEvidence:
    """The run's event table (finished by the record when stale) and what is incomplete or not
    applicable."""
    reason = event_logs_absent(spec)
    if reason is not None:
        return EventEvidence(None, None, [], dict.fromkeys(INVARIANT_CHECKS, reason))
    path = finish_events(run_dir)
    meta = read_metadata(path, "events")
    incomplete: list[str] = []
    for node, why in sorted(json.loads(meta.get("missing_logs", "{}")).items()):
        incomplete.append(f"event log of node {node} missing: {why}")
    for node, lines in sorted(json.loads(meta.get("torn_lines", "{}")).items()):
        shown = ", ".join(str(line) for line in lines)
        incomplete.append(f"event log of node {node}: torn line(s) {shown} (events cut by a crash)")
    for node, gaps in sorted(json.loads(meta.get("seq_gaps", "{}")).items()):
        lost = sum(found - expected for expected, found in gaps)
        incomplete.append(f"event log of node {node}: {lost} event(s) lost (seq gaps {gaps})")
    return EventEvidence(path, int(meta["run_id"]), incomplete, {})
