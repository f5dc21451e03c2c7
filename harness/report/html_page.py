"""The HTML every Tidemark page shares: the page shell, its CSS, escaping and small tables.

:func:`page` wraps a body in a self-contained document -- inline CSS (:data:`PAGE_CSS`), an
optional inline script and a Content-Security-Policy that forbids every fetch -- so a run report
or an index can be archived or mailed and still render.  The helpers escape everything they are
given (:func:`esc`); :func:`cell` shows any JSON value readably (``-`` for null, compact JSON
for objects, cut at :data:`MAX_TEXT` characters).  :func:`write_atomically` replaces a page in
one rename, so a reader never sees half of one.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from testbed.record.stored_run import VERDICT_LABELS, key_settings

MAX_TEXT: Final = 400
MAX_TABLE_ROWS: Final = 20

PAGE_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;margin:0 auto;max-width:1240px;padding:0 16px 48px}
h1{font-size:22px;margin:18px 0 6px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}table{border-collapse:collapse;margin:6px 0 12px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
code,pre{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.badge{display:inline-block;white-space:nowrap;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;font-size:13px}
.valid{background:#1a7f37}.invalid{background:#cf222e}.expected{background:#bf8700}
.unknown{background:#6e7781}.not-checked{background:#8c959f}.badge.not-applicable{background:#8250df}
tr.verdict-valid td.verdict{background:#dafbe1}tr.verdict-invalid td.verdict{background:#ffebe9}
tr.verdict-expected td.verdict{background:#fff8c5}tr.verdict-unknown td.verdict,tr.verdict-not-checked td.verdict{background:#eaeef2}
.note{color:#57606a}.problem{color:#cf222e}.meta th{width:150px}.num{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#ffebe9}.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.op-ok{color:#1a7f37}.op-fail{color:#cf222e}.op-info{color:#9a6700}img.plot{max-width:100%;border:1px solid #d0d7de}
.wide{overflow-x:auto;max-width:100%}details{margin:6px 0 14px}.grid{display:flex;flex-wrap:wrap;gap:0 28px;align-items:flex-start}summary{cursor:pointer;font-weight:600}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
"""
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def href(relative: Path | str) -> str:
    return esc(urllib.parse.quote(Path(relative).as_posix()))


def compact(value: Any, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def badge(verdict: str) -> str:
    return f'<span class="badge {esc(verdict)}">{esc(VERDICT_LABELS.get(verdict, verdict))}</span>'


def page(title: str, body: str, script: str | None = None, extra_css: str = "") -> str:
    """A complete HTML document: inline CSS, optional inline script, a CSP that forbids any fetch."""
    tail = f"<script>\n{script}\n</script>\n" if script else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CONTENT_SECURITY_POLICY)}">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{esc(title)}</title>\n'
        f"<style>{PAGE_CSS}{extra_css}</style>\n</head>\n<body>\n{body}\n{tail}</body>\n</html>\n"
    )


def kv_table(mapping: Mapping[str, Any], css: str = "") -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{cell(v)}</td></tr>" for k, v in mapping.items())
    return f'<table class="{css}">{rows}</table>' if rows else '<p class="note">(none)</p>'


def cell(value: Any) -> str:
    """``value`` as table-cell HTML: ``-`` for null, compact JSON for objects and lists, escaped text."""
    if value is None:
        return '<span class="note">-</span>'
    if isinstance(value, dict | list):
        return f"<code>{esc(compact(value))}</code>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return esc(value)


def write_atomically(path: Path, text: str) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path


def utc_text(moment: datetime.datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "unknown"


def records_table(records: list[dict[str, Any]]) -> str:
    """One row per record, one column per key any record has; at most :data:`MAX_TABLE_ROWS` rows."""
    columns: list[str] = []
    for record in records:
        columns += [key for key in record if key not in columns]
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in columns) + "</tr>"
        for r in records[:MAX_TABLE_ROWS]
    )
    more = (
        f'<p class="note">… {len(records) - MAX_TABLE_ROWS} more</p>' if len(records) > MAX_TABLE_ROWS else ""
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def run_settings(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """:func:`testbed.record.stored_run.key_settings`, with a scenario run's faults: a scenario
    injects its faults through its steps, not the nemesis mix, so ``faults`` would read ``-`` for a
    run that killed and partitioned nodes; ``test.json``'s ``scenario_faults`` names them."""
    settings = key_settings(spec)
    scripted = (spec or {}).get("scenario_faults")
    if settings["faults"] == "-" and isinstance(scripted, list) and scripted:
        settings["faults"] = ",".join(str(fault) for fault in scripted)
    return settings
