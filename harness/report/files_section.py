"""The run page's "Logs and files" section: every file of the run directory, linked, with its size.

Node logs (``nodes/<node>/``: logs, replica dumps, event logs) are listed as collected; the run's
own files are listed by name from :mod:`testbed.record.rundir` -- the spec, the verdict and its
anomaly records, the history in both forms, the replica and event tables, ``run.json`` -- so a file the run wrote is
never left off the page because the list was written before it existed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from harness.report.html_page import esc, href
from testbed.record.rundir import (
    ANOMALY_RECORDS_FILE,
    EVENTS_FILE,
    HISTORY_JSONL,
    HISTORY_PARQUET,
    REPLICA_PARTITIONS_FILE,
    REPLICAS_FILE,
    RESULTS_FILE,
    RUN_FILE,
    SPEC_FILE,
    RunDir,
)

RUN_FILES: Final = (
    SPEC_FILE,
    RUN_FILE,
    RESULTS_FILE,
    ANOMALY_RECORDS_FILE,
    HISTORY_JSONL,
    HISTORY_PARQUET,
    REPLICAS_FILE,
    REPLICA_PARTITIONS_FILE,
    EVENTS_FILE,
)


def files_section(run_dir: Path) -> str:
    """The node logs and the run files of ``run_dir`` (those present), each linked, with its size."""
    links = [
        f'<li><a href="{href(name)}">{esc(name)}</a> ({size_text(run_dir / name)})</li>'
        for name in RUN_FILES
        if (run_dir / name).is_file()
    ]
    nodes_dir = RunDir(run_dir).nodes
    node_items = []
    if nodes_dir.is_dir():
        for node in sorted(p for p in nodes_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            files = sorted(p for p in node.iterdir() if p.is_file() and not p.name.startswith("."))
            entries = ", ".join(
                f'<a href="{href(f.relative_to(run_dir))}">{esc(f.name)}</a> ({size_text(f)})' for f in files
            )
            node_items.append(
                f"<li><b>{esc(node.name)}</b>: {entries or '<span class=note>no files</span>'}</li>"
            )
    logs = f"<ul>{''.join(node_items)}</ul>" if node_items else '<p class="note">No node logs collected.</p>'
    return f"<h3>node logs</h3>{logs}<h3>run files</h3><ul>{''.join(links)}</ul>"


def size_text(path: Path) -> str:
    """``path``'s size in B, KiB, MiB or GiB; ``?`` when it cannot be read."""
    try:
        size = float(path.stat().st_size)
    except OSError:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "?"
