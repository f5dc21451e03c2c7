"""``report.html``: one self-contained page that says what happened in a run and why the verdict.

:func:`render_run_report` writes ``RUN_DIR/report.html``.  The page has no external assets
and makes no network request (a Content-Security-Policy forbids it; the figures are
embedded PNGs), so it can be archived by CI, mailed, or opened from a file share years later.
Links to node logs and run files are relative, so the run directory can move.

Sections, in reading order: the header (test, scenario, colour-coded verdict and the
sentence that explains it); the timeline figure (:mod:`harness.report.plots`) with the
fault table (recovery times after the last heal), the liveness figures and the offset figure --
Jepsen's offset order plot and unpolled records over time (:mod:`harness.report.liveness_section`)
-- and the nemesis events under it; the anomaly table with examples, causes first and each
consequence indented under its cause with its examples folded (:mod:`checker.anomaly_order`; for replica divergence the two
replicas' logs around the first divergent offset, side by side, from ``replicas.parquet``);
the transactional anomalies' transactions, micro-op by micro-op, and each cycle drawn
(:mod:`harness.report.txn_section`);
the evidence (what was incomplete, and the counts the checker saw); the configuration
(settings, workload, nemesis, versions); the node logs.

Bad or missing input never stops the page: a run with no ``results.json`` is "not
checked", a run with no history says so where the figure would be, a garbage line is
skipped and counted.  Only a path that is not a directory raises
(:class:`testbed.record.stored_run.RunDirectoryError`).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from checker.anomaly_order import anomaly_phrases, ordered
from harness.report.clock_section import clock_section
from harness.report.evidence_section import evidence_section
from harness.report.expectation import expectation_sentence
from harness.report.files_section import files_section
from harness.report.html_page import (
    badge,
    cell,
    compact,
    esc,
    kv_table,
    page,
    records_table,
    run_settings,
    utc_text,
    write_atomically,
)
from harness.report.liveness_section import fault_table, liveness_table, offsets_figure
from harness.report.plots import fault_colour, render_figure, summarise_latency, time_range
from harness.report.readable import UNREADABLE, unreadable_tables
from harness.report.rebalances import CHURN, rebalance_section
from harness.report.timeline import HistoryUnavailable, Timeline, build_timeline
from harness.report.txn_section import txn_section
from harness.report.white_box import event_html, is_event
from harness.report.window_effect import window_figures
from testbed.record.faults import NemesisEvent
from testbed.record.rundir import REPORT_FILE, RunDir
from testbed.record.stored_run import (
    VERDICT_LABELS,
    StoredRun,
    load_stored_run,
    not_applicable_checks,
    started_at,
)

DIVERGENCE_CONTEXT_BEFORE, DIVERGENCE_CONTEXT_AFTER = 2, 5

# ----------------------------------------------------------------------------- sections


def _verdict_sentence(run: StoredRun) -> str:
    results = run.results
    if results is None:
        return "No results.json: the run was not checked. <code>tidemark analyze RUN_DIR</code> checks it."
    phrases = ", ".join(anomaly_phrases(results))
    verdict = run.verdict
    rules = {
        str(a.get("rule")) for a in results.get("anomalies", {}).values() if a.get("severity") != "warning"
    }
    if verdict == "expected" and len(rules) == 1:
        counts = ", ".join(
            f"{placed.name} x{results['anomalies'][placed.name]['count']}"
            for placed in ordered(results["anomalies"])
            if results["anomalies"][placed.name].get("severity") != "warning"
        )
        return f"Anomalies found, all permitted by this configuration ({esc(rules.pop())}): {esc(counts)}."
    if verdict == "valid":
        inapplicable = not_applicable_checks(results)
        return (
            ("Every applicable check" if inapplicable else "Every check")
            + " ran on complete evidence and found nothing."
            + (f" Warnings: {esc(phrases)}." if phrases else "")
            + (
                f' Not applicable to this target: {esc(", ".join(inapplicable))} (<a href="#checks">why</a>).'
                if inapplicable
                else ""
            )
        )
    if verdict == "invalid":
        return f"Anomalies this configuration does not permit: {esc(phrases)}."
    if verdict == "expected":
        return f"Anomalies found, each permitted by this configuration: {esc(phrases)}."
    return "Nothing proven wrong, but the evidence is incomplete (see Evidence)." + (
        f" {esc(phrases)}." if phrases else ""
    )


def _header(run: StoredRun, timeline: Timeline | None) -> str:
    spec = run.spec or {}
    meta = {
        "scenario": run.scenario or "-",
        "run directory": str(run.run_dir.resolve()),
        "started": utc_text(started_at(run.run_dir)),
        "history": (
            f"{timeline.op_count} ops over {timeline.duration_s:.1f} s (from {timeline.source})"
            if timeline
            else "none"
        ),
        "settings": " ".join(f"{k}={v}" for k, v in run_settings(spec).items() if k != "scenario"),
        "report written": utc_text(datetime.datetime.now(datetime.UTC)),
    }
    expectation = expectation_sentence(run.spec, run.results)
    met = expectation is not None and expectation.startswith("as expected")
    return (
        f'<h1>{esc(run.name)} {badge(run.verdict)}</h1>\n<p class="verdict-sentence">{_verdict_sentence(run)}</p>\n'
        + (
            f'<p class="{"note" if met else "problem"}"><b>{esc(expectation)}</b></p>\n'
            if expectation
            else ""
        )
        + kv_table(meta, "meta")
    )


def _op_html(op: Mapping[str, Any]) -> str:
    kind = str(op.get("type"))
    time = op.get("time")
    when = f" t={time / 1e9:.3f}s" if isinstance(time, int) else ""
    parts = [
        f'<span class="op-{esc(kind)}">#{esc(op.get("index"))} process {esc(op.get("process"))} '
        f"{esc(op.get('f'))} {esc(kind)}{esc(when)}</span>"
    ]
    if op.get("value") is not None:
        parts.append(f"<code>{esc(compact(op['value']))}</code>")
    for name in ("error", "node"):
        if op.get(name):
            parts.append(f"{name}: <code>{esc(op[name])}</code>")
    return " ".join(parts)


def _is_op(value: Any) -> bool:
    return isinstance(value, dict) and {"index", "type", "f"} <= set(value)


def _value_html(value: Any) -> str:
    if _is_op(value):
        return _op_html(value)
    if is_event(value):  # a white-box example's event: a table, not a line of JSON
        return event_html(value)
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return records_table(value)
    return cell(value)


def _replica_context(
    run: StoredRun, partition: int, offset: int, nodes: list[str]
) -> dict[str, dict[int, dict[str, Any]]]:
    """node -> offset -> record around ``offset`` from ``replicas.parquet`` (empty if unreadable)."""
    path = RunDir(run.run_dir).replicas
    topic = (run.spec or {}).get("topic")
    try:
        table = pq.read_table(
            path,
            columns=["node", "topic", "partition", "offset", "leader_epoch", "key", "value"],
            filters=[
                ("partition", "=", partition),
                ("offset", ">=", offset - DIVERGENCE_CONTEXT_BEFORE),
                ("offset", "<=", offset + DIVERGENCE_CONTEXT_AFTER),
            ],
        )
    except Exception:  # missing or damaged file: the example's own records are still shown
        return {}
    context: dict[str, dict[int, dict[str, Any]]] = {node: {} for node in nodes}
    for row in table.to_pylist():
        if row["node"] in context and (topic is None or row["topic"] == topic):
            context[row["node"]][row["offset"]] = row
    return context


def _divergence_html(run: StoredRun, example: Mapping[str, Any]) -> str:
    replicas = example.get("replicas") if isinstance(example.get("replicas"), dict) else {}
    assert isinstance(replicas, dict)
    nodes = [str(node) for node in replicas]
    partition, offset = example.get("partition"), example.get("offset")
    if not isinstance(partition, int) or not isinstance(offset, int) or not nodes:
        return f"<code>{esc(compact(dict(example)))}</code>"
    context = _replica_context(run, partition, offset, nodes)
    for node, record in replicas.items():
        if isinstance(record, dict):
            context.setdefault(str(node), {}).setdefault(offset, record)
    offsets = sorted({o for records in context.values() for o in records})
    head = (
        "<tr><th rowspan=2>offset</th>"
        + "".join(f"<th colspan=3>replica {esc(n)}</th>" for n in nodes)
        + "</tr>"
    )
    head += "<tr>" + "<th>epoch</th><th>key</th><th>value</th>" * len(nodes) + "</tr>"
    rows = []
    for at in offsets:
        records = [context.get(n, {}).get(at) for n in nodes]
        shown = [(r or {}).get("leader_epoch", "-") for r in records], [(r or {}).get("key") for r in records]
        values = [(r or {}).get("value", "(absent)") for r in records]
        differs = len({(k, v) for k, v in zip(shown[1], values, strict=True)}) > 1
        mark = " ◀ first divergent offset" if at == offset else ""
        cells = "".join(
            f"<td>{cell(e)}</td><td>{cell(k)}</td><td>{cell(v)}</td>"
            for e, k, v in zip(shown[0], shown[1], values, strict=True)
        )
        rows.append(
            f'<tr class="{"diff" if differs else ""}"><td class="num">{at}{esc(mark)}</td>{cells}</tr>'
        )
    positions = example.get("positions")
    title = f"partition {partition}: replicas {esc(' and '.join(nodes))} first differ at offset {offset}" + (
        f"; {esc(positions)} divergent positions in all" if positions is not None else ""
    )
    return f"<p>{title}</p><table>{head}{''.join(rows)}</table>"


def _anomalies(run: StoredRun) -> str:
    results = run.results
    if results is None:
        return '<p class="note">Not checked: no anomaly table.</p>'
    anomalies = results.get("anomalies", {})
    if not anomalies:
        return "<p>No anomalies.</p>"
    # Causes first (checker.anomaly_order): each consequence indented under the anomaly that
    # brings it about, and its examples folded -- the cause's examples are the ones to read first.
    placed = ordered(anomalies)
    rows = []
    for at in placed:
        name, anomaly = at.name, anomalies[at.name]
        expected = f"yes: {esc(anomaly.get('rule'))}" if anomaly.get("expected") else "<b>no</b>"
        indent = f' style="padding-left: {0.4 + 1.2 * at.depth:.1f}em"' if at.depth else ""
        arrow = "&#8627; " if at.depth else ""
        rows.append(
            f'<tr><td{indent}>{arrow}<a href="#anomaly-{esc(name)}">{esc(name)}</a></td>'
            f'<td class="num">{anomaly["count"]}</td>'
            f"<td>{expected}</td><td>{esc(anomaly.get('severity', 'error'))}</td></tr>"
        )
    table = (
        "<table><tr><th>anomaly (causes first)</th><th>count</th><th>expected under this configuration</th>"
        "<th>severity</th></tr>" + "".join(rows) + "</table>"
    )
    details = []
    for at in placed:
        name = at.name
        examples = anomalies[name].get("examples", [])
        if name == "replica-divergence":
            shown = "".join(_divergence_html(run, e) if isinstance(e, dict) else cell(e) for e in examples)
            shown += _replica_states(run)
        else:
            shown = _examples_table(examples)
        count = anomalies[name]["count"]
        note = f"{len(examples)} of {count} shown" if examples else "no examples recorded"
        folded = f" (follows from {esc(at.parent)})" if at.parent else ""
        details.append(
            f'<details{"" if at.depth else " open"} id="anomaly-{esc(name)}"><summary>{esc(name)} x{count} '
            f'<span class="note">({note}){folded}</span></summary>{shown}</details>'
        )
    return table + "".join(details)


def _examples_table(examples: list[Any]) -> str:
    """One row per example, one column per field; ops and record lists rendered readably.  In a
    box of its own that scrolls sideways when the examples are wider than the page (a
    transaction's JSON), so the page itself never does (issue 36: nothing off-screen at 1400 px)."""
    columns: list[str] = []
    for example in examples:
        if isinstance(example, dict):
            columns += [key for key in example if key not in columns]
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    rows = []
    for example in examples:
        if isinstance(example, dict):
            rows.append(
                "<tr>" + "".join(f"<td>{_value_html(example.get(c))}</td>" for c in columns) + "</tr>"
            )
        else:
            rows.append(f'<tr><td colspan="{max(len(columns), 1)}">{cell(example)}</td></tr>')
    table = f'<table class="examples"><tr>{head}</tr>{"".join(rows)}</table>'
    return f'<div class="wide">{table}</div>' if rows else ""  # a wide example scrolls, not the page


def _replica_states(run: StoredRun) -> str:
    """Each replica's high watermark, log end offset and leader-epoch cache (the KIP-101 story)."""
    try:
        rows = pq.read_table(RunDir(run.run_dir).replica_partitions).to_pylist()
    except Exception:  # missing or damaged: the records above still tell the story
        return ""
    shown = [
        {
            k: row.get(k)
            for k in (
                "node",
                "topic",
                "partition",
                "high_watermark",
                "log_end_offset",
                "log_start_offset",
                "epochs",
            )
        }
        for row in rows
    ]
    return "<h3>replica state at the end (from the dumps)</h3>" + records_table(shown) if shown else ""


def _events_table(events: Iterable[NemesisEvent]) -> str:
    rows = []
    for event in events:
        done = f"{event.completed_s:.3f}" if event.completed_s is not None else "-"
        detail = (
            event.value.get("grudge")
            if isinstance(event.value, dict) and "grudge" in event.value
            else event.value
        )
        rows.append(
            f'<tr><td class="num">{event.invoked_s:.3f}</td><td class="num">{done}</td>'
            f'<td><span class="swatch" style="background:{fault_colour(event.f)}"></span>{esc(event.f)}</td>'
            f'<td class="op-{esc(event.outcome)}">{esc(event.outcome)}</td><td><code>{esc(compact(detail))}</code></td>'
            f"<td>{cell(event.error)}</td></tr>"
        )
    if not rows:
        return '<p class="note">No nemesis operations in the history.</p>'
    return (
        "<details><summary>nemesis operations</summary><table><tr><th>invoked (s)</th><th>completed (s)</th>"
        "<th>f</th><th>outcome</th><th>value</th><th>error</th></tr>" + "".join(rows) + "</table></details>"
    )


def _timeline_section(run: StoredRun, timeline: Timeline | None, unavailable: str | None) -> str:
    if timeline is None:
        return f'<p class="problem">No history to plot: {esc(unavailable)}</p>'
    image = base64.b64encode(render_figure(timeline)).decode("ascii")
    latency = summarise_latency(timeline.latencies)
    rows = "".join(
        f'<tr><td class="op-{esc(k)}">{esc(k)}</td><td class="num">{int(v["count"])}</td>'
        f'<td class="num">{v["p50"]:.1f}</td><td class="num">{v["p99"]:.1f}</td><td class="num">{v["max"]:.1f}</td></tr>'
        for k, v in latency.items()
    )
    notes = []
    if timeline.pending:
        notes.append(f"{timeline.pending} client invoke(s) never completed (not plotted).")
    if timeline.skipped:
        first = timeline.skipped[0]
        notes.append(
            f"{len(timeline.skipped)} bad history line(s) skipped; first: line {first.line}: {first.reason}"
        )
    churns = [event.invoked_s for event in timeline.events if event.f == CHURN]
    return (
        f'<img class="plot" alt="nemesis windows, send throughput and latency over time" '
        f'src="data:image/png;base64,{image}">'
        + rebalance_section(list(timeline.assignments), time_range(timeline), churns)
        + "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
        + fault_table(
            timeline.windows,
            run.results,
            window_figures(timeline.latencies, timeline.windows, timeline.duration_s),
        )
        + liveness_table(run.results)
        + offsets_figure(run.run_dir, timeline.windows, run.results, time_range(timeline)[1])
        + clock_section(run.run_dir, timeline.events)
        + (
            "<h3>send latency (ms)</h3><table><tr><th>outcome</th><th>sends</th><th>p50</th><th>p99</th><th>max</th></tr>"
            + rows
            + "</table>"
            if rows
            else ""
        )
        + _events_table(timeline.events)
    )


def _configuration(run: StoredRun) -> str:
    spec = run.spec
    if spec is None:
        return '<p class="problem">No readable test.json.</p>'
    sections = [("key settings", run_settings(spec))]
    sections += [
        (title, spec[key])
        for title, key in (
            ("broker settings", "settings"),
            ("workload", "workload"),
            ("nemesis", "nemesis"),
            ("versions", "versions"),
        )
        if isinstance(spec.get(key), dict)
    ]
    rules = (run.results or {}).get("config", {}).get("rules")
    test = {k: v for k, v in spec.items() if not isinstance(v, dict)}
    parts = [f"<div><h3>{esc(title)}</h3>{kv_table(values)}</div>" for title, values in sections]
    parts.append("<div><h3>test</h3>" + kv_table(test) + "</div>")
    parts = ['<div class="grid">' + "".join(parts) + "</div>"]
    if isinstance(rules, list):
        parts.append(
            "<h3>expectation rules in force</h3><p>"
            + (esc(", ".join(map(str, rules))) or "none: any anomaly is a bug")
            + "</p>"
        )
    return "".join(parts)


# ----------------------------------------------------------------------------- entry point


def run_report_html(run_dir: Path | str) -> str:
    """The report page of ``run_dir`` as text (see the module docstring)."""
    return checked_report_html(run_dir)[0]


def checked_report_html(run_dir: Path | str) -> tuple[str, str | None]:
    """The report page of ``run_dir`` and, when one of its files cannot be read, the first such
    problem (one line naming the file).  A table that cannot be read makes the page mark the run
    unreadable and show what needs no table -- verdict, configuration, files; an unreadable
    ``test.json`` or ``results.json`` is shown on the full page, which says what it lacks."""
    run = load_stored_run(run_dir)
    problems = unreadable_tables(run.run_dir)
    if not problems:
        try:
            text = _full_report_html(run)
        except pa.ArrowException as error:
            problems = [f"{run.run_dir}: {' '.join(str(error).split())}"]
        else:  # the page shows a test.json or results.json it could not read; the caller hears of it
            return text, _named(run, run.problems[0]) if run.problems else None
    body = "\n".join(
        [
            _header(run, None),
            f'<p class="problem"><b>{UNREADABLE}</b>: '
            + "; ".join(esc(problem) for problem in problems)
            + ". Nothing here was read from it.</p>",
            "<h2>Configuration</h2>",
            _configuration(run),
            "<h2>Logs and files</h2>",
            files_section(run.run_dir),
        ]
    )
    return page(f"Tidemark: {run.name} - {UNREADABLE}", body), problems[0]


def _named(run: StoredRun, problem: str) -> str:
    """``problem`` of ``run`` as one line that names the run directory."""
    return problem if problem.startswith(str(run.run_dir)) else f"{run.run_dir}/{problem}"


def _full_report_html(run: StoredRun) -> str:
    timeline: Timeline | None = None
    unavailable: str | None = None
    notes: list[str] = []
    try:
        timeline, notes = build_timeline(run.run_dir)
    except HistoryUnavailable as error:
        unavailable = str(error)
    body = "\n".join(
        [
            _header(run, timeline),
            "<h2>Timeline</h2>",
            _timeline_section(run, timeline, unavailable),
            "<h2>Anomalies</h2>",
            _anomalies(run),
            txn_section(run.results),
            "<h2>Evidence</h2>",
            evidence_section(run, notes),
            "<h2>Configuration</h2>",
            _configuration(run),
            "<h2>Logs and files</h2>",
            files_section(run.run_dir),
        ]
    )
    return page(f"Tidemark: {run.name} - {VERDICT_LABELS[run.verdict]}", body)


def render_run_report(run_dir: Path | str) -> Path:
    """Write ``run_dir/report.html`` (atomically) and return its path."""
    return render_checked_report(run_dir)[0]


def render_checked_report(run_dir: Path | str) -> tuple[Path, str | None]:
    """Write ``run_dir/report.html`` (atomically); its path and the unreadable-table problem the
    page marks, if any (:func:`checked_report_html`)."""
    text, problem = checked_report_html(run_dir)
    return write_atomically(Path(run_dir) / REPORT_FILE, text), problem
