"""report.html: what it shows for real checked runs, how it survives bad input, and how Chromium renders it."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from checker.definitions import ALL_CHECKS, INVARIANT_CHECKS
from harness.report.run_page import render_run_report
from testbed.record.rundir import RunDirectoryError
from tests.harness.report.browser import Browser, require_chromium
from tests.harness.report.report_runs import RunShape, make_checked_run, write_run

IMAGE = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
LINK_OR_SOURCE = re.compile(r'(?:href|src)="([^"]*)"')


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checked runs (real pandas checker) of every verdict, each with its report rendered."""
    root = tmp_path_factory.mktemp("runs")
    shapes = {
        "invalid": RunShape(lost_writes=3, divergent_offsets=4),
        "expected": RunShape(truncation="high-watermark", lost_writes=2),
        "unknown": RunShape(drain_complete=False, unhealed_kill=True),
        "valid": RunShape(),
    }
    for name, shape in shapes.items():
        make_checked_run(root / name, shape)
        render_run_report(root / name)
    return {name: root / name for name in shapes}


def page(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text(encoding="utf-8")


def results(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    return data


def test_the_verdict_is_colour_coded_and_explained(runs: dict[str, Path]) -> None:
    assert '<span class="badge invalid">INVALID</span>' in page(runs["invalid"])
    assert "Anomalies this configuration does not permit: lost-write x3, replica-divergence x4" in page(
        runs["invalid"]
    )
    assert '<span class="badge expected">' in page(runs["expected"])
    assert "all permitted by this configuration (truncation.mode=high-watermark): lost-write x2" in page(
        runs["expected"]
    )
    assert '<span class="badge unknown">' in page(runs["unknown"])
    assert "partition(s) 1 of topic tidemark have no complete final drain" in page(runs["unknown"])
    assert '<span class="badge valid">' in page(runs["valid"])


def test_the_anomaly_table_has_counts_rules_and_the_checkers_example_ops(runs: dict[str, Path]) -> None:
    text = page(runs["invalid"])
    assert re.search(
        r'href="#anomaly-lost-write">lost-write</a></td><td class="num">3</td><td><b>no</b></td><td>error</td>',
        text,
    )
    for example in results(runs["invalid"])["anomalies"]["lost-write"]["examples"]:
        send = example["send"]
        assert f"#{send['index']} process {send['process']} send ok" in text
    expected = page(runs["expected"])
    assert re.search(
        r"lost-write</a></td><td class=\"num\">2</td><td>yes: truncation.mode=high-watermark</td>", expected
    )


def test_an_example_table_scrolls_in_its_own_box_not_the_page(runs: dict[str, Path]) -> None:
    """A transaction's example JSON made a real run's page 1405 px wide at a 1400 px window; the
    examples now sit in a box that scrolls sideways by itself."""
    text = page(runs["invalid"])
    assert re.search(r'<div class="wide"><table class="examples">', text)
    assert ".wide{overflow-x:auto;max-width:100%}" in text
    assert '<table class="examples">' not in text.replace('<div class="wide"><table class="examples">', "")


def test_divergence_shows_both_replicas_logs_side_by_side_around_the_first_divergent_offset(
    runs: dict[str, Path],
) -> None:
    text = page(runs["invalid"])
    example = results(runs["invalid"])["anomalies"]["replica-divergence"]["examples"][0]
    assert (example["partition"], example["offset"]) == (0, 2)
    section = text[text.index('id="anomaly-replica-divergence"') :]
    assert "replicas n1 and n2 first differ at offset 2; 4 divergent positions in all" in section
    rows = re.findall(r'<tr class="(diff|)"><td class="num">(\d+)[^<]*</td>(.*?)</tr>', section)
    by_offset = {int(offset): (mark, cells) for mark, offset, cells in rows}
    assert sorted(by_offset) == [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
    ]  # context read from replicas.parquet, not just the example
    assert [offset for offset, (mark, _) in by_offset.items() if mark == "diff"] == [2, 3, 4, 5]
    assert "diverged-2" in by_offset[2][1] and "diverged-5" in by_offset[5][1]
    assert "replica state at the end" in section


def test_the_figure_is_an_embedded_png_and_the_fault_windows_are_listed(runs: dict[str, Path]) -> None:
    text = page(runs["unknown"])
    images = IMAGE.findall(text)
    assert len(images) == 2, "the timeline and the offset figure"
    for image in images:
        picture = Image.open(io.BytesIO(base64.b64decode(image)))
        assert picture.format == "PNG" and picture.width == 1200 and picture.height > 500
    for window in (
        "<td>kill n2</td><td class='num'>5.000</td><td class='num'>9.200</td><td>start</td>",
        "<td>pause n1</td><td class='num'>11.000</td><td class='num'>13.200</td><td>resume</td>",
        "<td>partition halves</td><td class='num'>15.000</td><td class='num'>18.200</td><td>heal</td>",
        "<td>kill n3</td><td class='num'>19.000</td><td class='num'>never healed</td><td>-</td>",
    ):
        assert window in text


def test_every_link_is_relative_and_points_at_a_file_of_the_run(runs: dict[str, Path]) -> None:
    run_dir = runs["invalid"]
    targets = [t for t in LINK_OR_SOURCE.findall(page(run_dir)) if not t.startswith(("#", "data:image/png"))]
    assert {
        "nodes/n1/broker.log",
        "nodes/n2/dump.jsonl",
        "nodes/controller/controller.log",
        "results.json",
        "test.json",
        "history.jsonl",
    } <= set(targets)
    for target in targets:
        assert "://" not in target and not target.startswith("/")
        assert (run_dir / target).is_file(), target


def test_the_configuration_and_versions_are_shown(runs: dict[str, Path]) -> None:
    text = page(runs["expected"])
    for fragment in (
        "<th>truncation.mode</th><td>high-watermark</td>",
        "<th>min.insync.replicas</th><td>2</td>",
        "<th>producers</th><td>3</td>",
        "<th>faults</th><td>kill,pause,partition</td>",
        "<th>tidemark</th><td>0.1.0</td>",
        "truncation.mode=high-watermark</p>",
    ):
        assert fragment in text


def test_a_run_never_checked_says_so(tmp_path: Path) -> None:
    write_run(tmp_path)
    text = page(tmp_path) if render_run_report(tmp_path) else ""
    assert '<span class="badge not-checked">not checked</span>' in text
    assert "Not checked: no anomaly table." in text
    assert len(IMAGE.findall(text)) == 1  # the history is still plotted


def test_checks_not_applicable_to_the_target_are_shown_with_their_reason_apart_from_checks_run(
    tmp_path: Path,
) -> None:
    result = make_checked_run(tmp_path, RunShape(single_store=True))
    assert result["valid"] is True
    inapplicable = result["not_applicable"]
    assert {"replica-divergence", "divergent-tail", *INVARIANT_CHECKS} == set(inapplicable)
    render_run_report(tmp_path)
    text = page(tmp_path)
    assert '<span class="badge valid">' in text, "not applicable is no gap in the evidence"
    assert "Every applicable check ran on complete evidence and found nothing." in text
    (named,) = re.findall(r"Not applicable to this target: ([^(]+) \(<a href=\"#checks\">why</a>\)", text)
    assert set(named.split(", ")) == set(inapplicable)
    rows = re.findall(
        r'<tr class="not-applicable"><td>([^<]+)</td><td><span class="badge not-applicable">'
        r"not applicable</span></td><td>([^<]+)</td></tr>",
        text,
    )
    assert dict(rows) == {name: html.escape(why, quote=True) for name, why in inapplicable.items()}
    assert "one replica only: the log lives in one PostgreSQL" in dict(rows)["replica-divergence"]
    (ran,) = re.findall(r"<p>checks run: ([^<]*)</p>", text)
    assert "lost-write" in ran.split(", ")
    assert not set(ran.split(", ")) & set(inapplicable), "an inapplicable check is not listed as run"
    assert "checks not run" not in text


def test_a_check_not_run_is_incomplete_evidence_not_a_check_that_does_not_apply(tmp_path: Path) -> None:
    skipped = {"replica-divergence", "divergent-tail"}
    make_checked_run(tmp_path, RunShape(), [c for c in ALL_CHECKS if c not in skipped])
    render_run_report(tmp_path)
    text = page(tmp_path)
    assert '<span class="badge unknown">' in text
    assert "checks not run: replica-divergence, divergent-tail" in text
    assert "badge not-applicable" not in text and "Not applicable to this target" not in text
    assert "Every check ran" not in text and "Every applicable check ran" not in text
    plain = make_checked_run(tmp_path / "bundled", RunShape())  # the bundled broker: everything applies
    render_run_report(tmp_path / "bundled")
    assert plain["not_applicable"] == {} and "badge not-applicable" not in page(tmp_path / "bundled")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{ not json", "results.json: not valid JSON"),
        ('["a", "list"]', "results.json: not a JSON object"),
        (
            '{"valid": "maybe", "anomalies": {}}',
            "&#x27;valid&#x27; must be true, false or &quot;unknown&quot;",
        ),
        (
            '{"valid": false, "anomalies": {"lost-write": {"count": "many"}}}',
            "must be an object with an integer",
        ),
        (
            '{"valid": true, "anomalies": {}, "not_applicable": ["replica-divergence"]}',
            "&#x27;not_applicable&#x27; must be an object of check name -&gt; reason",
        ),
    ],
)
def test_a_damaged_results_file_is_named_and_the_run_shown_as_not_checked(
    tmp_path: Path, content: str, problem: str
) -> None:
    write_run(tmp_path)
    (tmp_path / "results.json").write_text(content)
    text = page(tmp_path) if render_run_report(tmp_path) else ""
    assert problem in text
    assert "badge not-checked" in text


def test_a_damaged_test_json_still_gives_a_page(tmp_path: Path) -> None:
    write_run(tmp_path / "run-7")
    (tmp_path / "run-7" / "test.json").write_text("garbage")
    text = page(tmp_path / "run-7") if render_run_report(tmp_path / "run-7") else ""
    assert "<h1>run-7 " in text and "test.json: not valid JSON" in text and "No readable test.json." in text


def test_a_run_without_history_says_so_where_the_figure_would_be(tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / "history.jsonl").unlink()
    text = page(tmp_path) if render_run_report(tmp_path) else ""
    assert "No history to plot: no history.jsonl or history.parquet in the run directory" in text
    assert not IMAGE.findall(text)


def test_text_from_the_run_is_escaped(tmp_path: Path) -> None:
    write_run(tmp_path, RunShape(name="<script>alert(1)</script>"))
    text = page(tmp_path) if render_run_report(tmp_path) else ""
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_the_page_is_replaced_atomically(tmp_path: Path) -> None:
    write_run(tmp_path)
    render_run_report(tmp_path)
    render_run_report(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if "report" in p.name) == ["report.html"]


def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunDirectoryError, match="not a directory"):
        render_run_report(tmp_path / "missing")


# ----------------------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


@pytest.mark.parametrize("verdict", ["invalid", "unknown"])
def test_chromium_renders_the_report_without_errors_or_requests(
    chromium: str, runs: dict[str, Path], verdict: str, tmp_path: Path
) -> None:
    with Browser(chromium) as browser:
        browser.open(runs[verdict] / "report.html")
        assert browser.errors() == []
        schemes = {url.split(":", 1)[0] for url in browser.requested_urls()}
        assert schemes <= {"file", "data"}, "the page fetched something from outside"
        assert browser.evaluate("document.images.length") == 2, "the timeline and the offset figure"
        widths = "Array.from(document.images).map(i => i.complete && i.naturalWidth)"
        assert browser.evaluate(widths) == [1200, 1200]
        sections = browser.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        assert sections == ["Timeline", "Anomalies", "Evidence", "Configuration", "Logs and files"]
        shot = browser.screenshot(tmp_path / f"report-{verdict}.png")
    picture = Image.open(shot)
    assert picture.width >= 1200 and picture.height > 2000  # the whole page, not a blank viewport
    assert shot.stat().st_size > 100_000
    assert len(np.unique(np.asarray(picture.convert("L")))) > 20  # not a blank or uniform image


def test_the_browser_check_catches_script_errors_and_blocked_fetches(
    chromium: str, runs: dict[str, Path], tmp_path: Path
) -> None:
    """The detector itself: the same page with an injected fault must not pass."""
    broken = tmp_path / "broken.html"
    shutil.copy(runs["valid"] / "report.html", broken)
    text = broken.read_text().replace(
        "</body>", '<img src="http://192.0.2.1/x.png"><script>notDefined();</script></body>'
    )
    broken.write_text(text)
    with Browser(chromium) as browser:
        browser.open(broken)
        errors = browser.errors()
    assert any("notDefined is not defined" in error for error in errors)
    assert any("Content Security Policy" in error and "192.0.2.1" in error for error in errors)
