"""``index.html``: every run of a campaign (or a whole store) in one sortable table.

:func:`render_index` finds every run directory at any depth below the directory given
(a directory holding ``test.json``; symbolic links such as the store's ``latest`` are not
followed, so no run is listed twice) and writes ``DIRECTORY/index.html`` with one row per
run: its settings (truncation mode, acks, min.insync.replicas, unclean election, flush
policy, nemesis faults, scenario), its colour-coded verdict (valid green, invalid red,
invalid-but-every-anomaly-expected amber, unknown grey, not checked light grey), one
column per anomaly kind found in any run (``*`` when the run's configuration permits it;
``n/a`` with the reason on hover when the check does not apply to the run's target -- one
replica in PostgreSQL, an external cluster, no event logs --, ``not run`` when a partial check
skipped it, blank when it ran and found nothing), a ``not applicable`` column counting the run's
inapplicable checks (hover: each with its reason) and a link to the run's ``report.html``, flagged
``(unreadable)`` when one of the run's Parquet tables is cut short or corrupt
(:mod:`harness.report.readable`; hover: which file).  A click on a column header sorts by that
column (a small inline script: numbers as numbers, verdicts by urgency); a second click
reverses the order.

Like the run report the page is self-contained and fetches nothing.  Each run costs two
small JSON reads, a 64 KiB tail read of its history and 8 bytes of each Parquet table, so an index of thousands of runs
is written in seconds.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from pathlib import Path
from typing import Any, Final

from checker.anomaly_order import causes_first
from harness.report.expectation import expectation_sentence
from harness.report.html_page import badge, esc, href, page, run_settings, utc_text, write_atomically
from harness.report.readable import UNREADABLE, unreadable_tables
from testbed.record.rundir import REPORT_FILE, find_run_directories
from testbed.record.stored_run import (
    CHECK_STATUS_LABELS,
    VERDICT_LABELS,
    VERDICT_ORDER,
    StoredRun,
    check_status,
    history_span_seconds,
    load_stored_run,
    not_applicable_checks,
    started_at,
)

INDEX_FILE: Final = "index.html"
SETTING_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("truncation.mode", "truncation.mode"),
    ("acks", "acks"),
    ("min.insync.replicas", "min ISR"),
    ("unclean.leader.election.enable", "unclean election"),
    ("flush", "flush"),
    ("faults", "nemesis faults"),
    ("scenario", "scenario"),
)

INDEX_CSS: Final = (
    "body{max-width:none}#runs{font-size:12px}#runs th,#runs td{padding:3px 5px}#runs td.num{white-space:nowrap}"
    "#runs .badge{white-space:normal}#runs .mark{display:block}#runs th.turned{vertical-align:bottom;padding:6px 3px}"
    "#runs th.turned span{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}"
    "#runs td.not-applicable{color:#8250df}#runs td.not-run{color:#6e7781;font-style:italic}"
)
"""The index must fit a 1400 px window with a demo's dozen anomaly columns (issue 36): the anomaly
columns' headers are turned upright (a column as wide as its count, not its name), whether a run
met its expectation stands under its verdict badge, and text wraps where the window is too
narrow for it on one line -- a run path after each ``/``, a setting's name after each ``.``, a
list of faults after each ``,``, a verdict badge between its words."""

SORT_SCRIPT: Final = """
(function () {
  "use strict";
  function sortKey(cell) {
    var text = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    var number = Number(text);
    return text !== "" && !isNaN(number) ? {number: true, value: number} : {number: false, value: text.toLowerCase()};
  }
  function compare(a, b) {
    if (a.number !== b.number) { return a.number ? -1 : 1; }
    return a.value < b.value ? -1 : (a.value > b.value ? 1 : 0);
  }
  function sortBy(table, column, header) {
    var body = table.tBodies[0];
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.map.call(body.rows, function (row, position) {
      return {row: row, key: sortKey(row.cells[column]), position: position};
    });
    rows.sort(function (a, b) {
      var order = compare(a.key, b.key);
      return (ascending ? order : -order) || a.position - b.position;
    });
    rows.forEach(function (entry) { body.appendChild(entry.row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
      header.addEventListener("click", function () { sortBy(table, column, header); });
    });
  });
})();
"""


def _anomaly_columns(runs: list[StoredRun]) -> list[str]:
    """Anomaly kinds found in any run, causes first (:func:`checker.anomaly_order.causes_first`):
    a kind some other found kind implies stands right after it; warnings (in every run) last."""
    severity: dict[str, bool] = {}
    for run in runs:
        for name, anomaly in (run.results or {}).get("anomalies", {}).items():
            severity[name] = severity.get(name, False) or anomaly.get("severity") != "warning"
    return [
        placed.name
        for placed in causes_first(severity, [name for name, error in severity.items() if not error])
    ]


def _verdict_cell(run: StoredRun) -> str:
    verdict = run.verdict
    reasons = list(run.problems) + [str(r) for r in (run.results or {}).get("incomplete", [])]
    title = f' title="{esc("; ".join(reasons))}"' if reasons else ""
    expectation = expectation_sentence(run.spec, run.results)
    mark = ""
    if expectation is not None:  # a scenario run: whether it met its scenario's expectation
        met = expectation.startswith("as expected")
        mark = (
            f' <span class="mark {"note" if met else "problem"}" title="{esc(expectation)}">'
            f"{'as expected' if met else 'NOT as expected'}</span>"
        )
    return f'<td class="verdict" data-sort="{VERDICT_ORDER[verdict]}"{title}>{badge(verdict)}{mark}</td>'


_NOT_APPLICABLE_TEXT: Final = "n/a"
NOT_APPLICABLE_HEADER: Final = CHECK_STATUS_LABELS["not-applicable"]


def _no_anomaly_cell(run: StoredRun, name: str) -> str:
    """The cell of an anomaly column the run did not report: blank when the check ran and found
    nothing (or the run was not checked), ``n/a`` with the reason when it does not apply, ``not
    run`` when it was skipped.  Sorted below every count, so real zeros and gaps stay apart."""
    status, why = check_status(run.results, name)
    if status == "not-applicable":
        return (
            f'<td class="num not-applicable" data-sort="-1" title="{esc(f"{NOT_APPLICABLE_HEADER}: {why}")}">'
            f"{_NOT_APPLICABLE_TEXT}</td>"
        )
    if status == "not-run":
        label = CHECK_STATUS_LABELS["not-run"]
        return f'<td class="num not-run" data-sort="-2" title="{esc(label)}">{esc(label)}</td>'
    return '<td class="num" data-sort="0"></td>'


def _not_applicable_cell(run: StoredRun) -> str:
    """How many checks do not apply to the run's target; the hover lists each with its reason."""
    inapplicable = not_applicable_checks(run.results)
    if not inapplicable:
        return '<td class="num" data-sort="0"></td>'
    title = "; ".join(f"{name}: {why}" for name, why in inapplicable.items())
    return (
        f'<td class="num not-applicable" data-sort="{len(inapplicable)}" title="{esc(title)}">'
        f"{len(inapplicable)} {_NOT_APPLICABLE_TEXT}</td>"
    )


def _breakable(text: str, separator: str) -> str:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after each ``separator``."""
    return f"{esc(separator)}<wbr>".join(esc(part) for part in text.split(separator))


def _row(run: StoredRun, directory: Path, anomaly_columns: list[str]) -> str:
    relative = Path(os.path.relpath(run.run_dir, directory))
    report = run.run_dir / REPORT_FILE
    link = (
        f'<a href="{href(relative / REPORT_FILE)}">{_breakable(relative.as_posix(), "/")}</a>'
        if report.is_file()
        else f'{_breakable(relative.as_posix(), "/")} <span class="note">(no report)</span>'
    )
    unreadable = unreadable_tables(run.run_dir)
    if unreadable:  # flagged here, named on hover: the verdict beside it was not read from these
        link += f' <span class="problem" title="{esc("; ".join(unreadable))}">({UNREADABLE})</span>'
    settings = run_settings(run.spec)
    cells = [f"<td>{link}</td>", f"<td>{esc(run.name)}</td>"]
    cells += [f"<td>{_breakable(settings[key], ',')}</td>" for key, _ in SETTING_COLUMNS]
    cells.append(_verdict_cell(run))
    anomalies: dict[str, Any] = (run.results or {}).get("anomalies", {})
    for name in anomaly_columns:
        anomaly = anomalies.get(name)
        if anomaly is None:
            cells.append(_no_anomaly_cell(run, name))
            continue
        mark = "*" if anomaly.get("expected") else ""
        title = f' title="expected: {esc(anomaly.get("rule"))}"' if anomaly.get("expected") else ""
        cells.append(
            f'<td class="num" data-sort="{int(anomaly["count"])}"{title}>{int(anomaly["count"])}{mark}</td>'
        )
    cells.append(_not_applicable_cell(run))
    started = started_at(run.run_dir)
    cells.append(
        f'<td data-sort="{esc(started.isoformat() if started else "")}">{esc(utc_text(started))}</td>'
    )
    span = history_span_seconds(run.run_dir)
    cells.append(
        f'<td class="num" data-sort="{span if span is not None else -1}">'
        f"{f'{span:.1f}' if span is not None else '-'}</td>"
    )
    return f'<tr class="verdict-{run.verdict}">{"".join(cells)}</tr>'


def index_html(directory: Path | str) -> str:
    """The index page for every run at or below ``directory`` (see the module docstring)."""
    root = Path(directory)
    runs = [load_stored_run(path) for path in find_run_directories(root)]
    columns = _anomaly_columns(runs)
    headers = [
        "run",
        "test",
        *(title for _, title in SETTING_COLUMNS),
        "verdict",
        *columns,
        NOT_APPLICABLE_HEADER,
        "started",
        "history (s)",
    ]
    turned = {*columns, NOT_APPLICABLE_HEADER}
    head = "".join(
        f'<th scope="col" class="turned"><span>{esc(title)}</span></th>'
        if title in turned
        else f'<th scope="col">{_breakable(title, ".")}</th>'
        for title in headers
    )
    rows = "\n".join(_row(run, root, columns) for run in runs)
    tally = Counter(run.verdict for run in runs)
    summary = ", ".join(
        f"{tally[v]} {badge(v)}"
        for v in ("invalid", "expected", "unknown", "not-checked", "valid")
        if tally[v]
    )
    body = (
        f"<h1>Tidemark runs in {esc(root.resolve())}</h1>\n"
        f"<p>{len(runs)} run(s){': ' + summary if summary else ''}. Written "
        f"{esc(utc_text(datetime.datetime.now(datetime.UTC)))}.</p>\n"
        '<p class="note">Click a column header to sort; again to reverse. <b>*</b>: permitted by the run\'s '
        "configuration (hover for the rule). <b>n/a</b>: the check does not apply to the run's target, "
        "which leaves the verdict as it is (hover for why); <b>not run</b>: skipped, so the verdict is "
        "unknown. Hover a verdict for why evidence was incomplete.</p>\n"
    )
    if runs:
        body += f'<table class="sortable" id="runs"><thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody></table>'
    else:
        body += '<p class="note">No run directories (holding test.json) here yet.</p>'
    verdicts = ", ".join(f"{VERDICT_LABELS[v]}" for v in VERDICT_ORDER)
    body += f'\n<p class="note">Verdicts, most urgent first when sorted: {esc(verdicts)}.</p>'
    return page(f"Tidemark: {len(runs)} run(s) in {root.name}", body, script=SORT_SCRIPT, extra_css=INDEX_CSS)


def render_index(directory: Path | str) -> Path:
    """Write ``directory/index.html`` (atomically) and return its path."""
    return write_atomically(Path(directory) / INDEX_FILE, index_html(directory))
