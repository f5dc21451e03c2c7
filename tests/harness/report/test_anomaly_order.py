"""Reports and JUnit lead with the causes: the demo's twelve anomaly kinds, lost-write first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.report.index import render_index
from harness.report.junit import case_outcome
from harness.report.run_page import render_run_report
from testbed.record.stored_run import load_stored_run
from tests.checker.test_anomalies import DEMO
from tests.harness.report.report_runs import RunShape, make_checked_run

RULE = "truncation.mode=high-watermark"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checked run whose ``results.json`` then reports the demo's kinds, alphabetically as stored."""
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    make_checked_run(run_dir, RunShape(truncation="high-watermark", lost_writes=2))
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    counts = {name: 350 if name == "lost-write" else 4 for name in DEMO}
    results["anomalies"] = {
        name: {"count": counts[name], "expected": True, "rule": RULE, "severity": "error", "examples": []}
        for name in sorted(DEMO)
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    render_run_report(run_dir)
    return run_dir


def _positions(text: str, names: list[str], marker: str) -> dict[str, int]:
    return {name: text.index(marker.format(name=name)) for name in names}


def test_the_run_page_table_and_examples_put_lost_write_first(demo_run: Path) -> None:
    text = (demo_run / "report.html").read_text(encoding="utf-8")
    rows = _positions(text, list(DEMO), '<a href="#anomaly-{name}">')
    assert min(rows, key=rows.__getitem__) == "lost-write"
    for consequence in ("lost-read", "hw-regression", "inconsistent-offsets"):
        assert rows["lost-write"] < rows[consequence]
    assert '<details open id="anomaly-lost-write">' in text  # the cause's examples open
    assert '<details id="anomaly-lost-read">' in text  # its consequences folded
    assert "(follows from nonmonotonic-poll)" in text.split('id="anomaly-stale-read"', 1)[1]
    sentence = text.split('class="verdict-sentence">', 1)[1].split("</p>", 1)[0]
    assert sentence.index("lost-write x350") < sentence.index("hw-regression x4")


def test_junit_message_and_details_lead_with_the_cause(demo_run: Path) -> None:
    case = case_outcome(load_stored_run(demo_run))
    assert case.message.startswith(
        "invalid (every anomaly expected under its configuration): lost-write x350 "
        f"(expected: {RULE}) (-> inconsistent-offsets x4"
    )
    assert f"truncated-committed x4 (expected: {RULE}) (-> incomplete-leader x4" in case.message
    lines = case.details.splitlines()
    first = next(number for number, line in enumerate(lines) if "x350" in line)
    assert lines[first].startswith("lost-write x350")
    # lost-write > lost-read > nonmonotonic-poll > stale-read: two spaces a step
    assert any(line.startswith("      -> stale-read x4") for line in lines)


def test_the_index_columns_lead_with_the_cause(demo_run: Path) -> None:
    text = render_index(demo_run.parent).read_text(encoding="utf-8")
    header = text.split("<thead>", 1)[1].split("</thead>", 1)[0] if "<thead>" in text else text
    columns = _positions(header, list(DEMO), ">{name}<")
    assert min(columns, key=columns.__getitem__) == "lost-write"
    assert columns["truncated-committed"] < columns["incomplete-leader"] < columns["hw-regression"]
