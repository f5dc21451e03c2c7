"""The run page's Evidence section: what was incomplete, what the checker saw, which checks ran.

:func:`evidence_section` lists the run's problems and notes, the incomplete evidence (each reason
makes the verdict at best unknown), the checker's counts, and the checks: those that ran, and
those *not applicable* to the run's target -- ``results.json``'s ``not_applicable``, each with its
reason (:func:`testbed.record.stored_run.not_applicable_checks`) under a badge of its own, apart
from checks not run, which are incomplete evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report.html_page import esc, kv_table, records_table
from testbed.record.stored_run import CHECK_STATUS_LABELS, StoredRun, not_applicable_checks


def evidence_section(run: StoredRun, notes: list[str]) -> str:
    parts = [f'<p class="problem">{esc(p)}</p>' for p in run.problems]
    parts += [f'<p class="note">{esc(n)}</p>' for n in notes]
    results = run.results
    if results is None:
        return "".join(parts) or '<p class="note">Not checked.</p>'
    incomplete = results.get("incomplete", [])
    parts.append(
        "<h3>incomplete evidence</h3>"
        + (
            "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in incomplete) + "</ul>"
            if incomplete
            else "<p>None: every check saw complete evidence.</p>"
        )
    )
    stats = results.get("stats") if isinstance(results.get("stats"), dict) else {}
    assert isinstance(stats, dict)
    if stats:
        flat = {k: v for k, v in stats.items() if k not in ("partitions", "replicas")}
        parts.append("<h3>what the checker saw</h3>" + kv_table(flat))
        partitions = stats.get("partitions")
        if isinstance(partitions, dict) and partitions:
            parts.append(
                "<h3>final drain per partition</h3>"
                + records_table([{"partition": p, **s} for p, s in partitions.items() if isinstance(s, dict)])
            )
        if isinstance(stats.get("replicas"), dict):
            parts.append("<h3>replica dumps</h3>" + kv_table(stats["replicas"]))
    parts.append(_checks(results))
    return "".join(parts)


def _checks(results: Mapping[str, Any]) -> str:
    """Which checks ran, and which do not apply to the run's target and why (a badge apart from
    "not run", which :func:`evidence_section` lists among the incomplete evidence)."""
    inapplicable = not_applicable_checks(results)
    ran = [str(c) for c in results.get("checks", []) if str(c) not in inapplicable]
    text = f'<h3 id="checks">checks</h3><p>checks run: {esc(", ".join(ran)) or "none"}</p>'
    if not inapplicable:
        return text
    label = f'<span class="badge not-applicable">{esc(CHECK_STATUS_LABELS["not-applicable"])}</span>'
    rows = "".join(
        f'<tr class="not-applicable"><td>{esc(name)}</td><td>{label}</td><td>{esc(why)}</td></tr>'
        for name, why in inapplicable.items()
    )
    return (
        text
        + '<p class="note">Not applicable: the target cannot hold this evidence, so these checks have no '
        "bearing on the verdict (unlike a check not run, which leaves it unknown).</p>"
        + f'<table class="not-applicable"><tr><th>check</th><th>status</th><th>why</th></tr>{rows}</table>'
    )
