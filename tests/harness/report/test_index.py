"""index.html and ``tidemark report``: finding runs, one row each, sorting in a real browser."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from checker.definitions import ALL_CHECKS
from harness.cli.main import main
from harness.report.index import render_index
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_VALID
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op
from testbed.record.rundir import find_run_directories
from testbed.record.stored_run import history_span_seconds, key_settings
from tests.harness.report.browser import Browser, require_chromium
from tests.harness.report.report_runs import RunShape, make_checked_run, write_run

ROW = re.compile(r'<tr class="verdict-([a-z-]+)">(.*?)</tr>', re.S)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A campaign store: checked runs of every verdict at different depths, one never checked."""
    root = tmp_path_factory.mktemp("campaign")
    make_checked_run(
        root / "hw" / "run-1", RunShape(truncation="high-watermark", lost_writes=12, name="kip101")
    )
    make_checked_run(
        root / "hw" / "run-2", RunShape(truncation="high-watermark", lost_writes=2, name="kip101")
    )
    make_checked_run(root / "le" / "run-1", RunShape(lost_writes=3, divergent_offsets=1))
    make_checked_run(root / "le" / "run-2", RunShape())
    make_checked_run(root / "le" / "deeper" / "run-3", RunShape(drain_complete=False))
    write_run(root / "le" / "run-4-crashed")
    (root / "latest").symlink_to(root / "le" / "run-2")  # the store's link: must not list the run twice
    assert main(["report", str(root)]) == EXIT_VALID
    return root


def index_text(root: Path) -> str:
    """``index.html`` without its line-break opportunities (``<wbr>``: they are no text)."""
    return (root / "index.html").read_text(encoding="utf-8").replace("<wbr>", "")


def headers_of(text: str) -> list[str]:
    """The column headers' text (an anomaly column's is in a turned ``span``)."""
    return re.findall(r'<th scope="col"(?: class="turned")?>(?:<span>)?([^<]+)(?:</span>)?</th>', text)


def rows(root: Path) -> list[tuple[str, str]]:
    return ROW.findall(index_text(root))


def test_every_run_below_the_directory_is_found_once(campaign: Path) -> None:
    found = [path.relative_to(campaign).as_posix() for path in find_run_directories(campaign)]
    assert found == ["hw/run-1", "hw/run-2", "le/deeper/run-3", "le/run-1", "le/run-2", "le/run-4-crashed"]


def test_hidden_directories_and_the_inside_of_runs_are_not_searched(tmp_path: Path) -> None:
    for inside in (tmp_path / "run", tmp_path / "run" / "nested", tmp_path / ".cluster"):
        inside.mkdir(parents=True)
        (inside / "test.json").write_text("{}")
    assert find_run_directories(tmp_path) == [tmp_path / "run"]


def run_name(cells: str) -> str:
    """The run column's text: the link text, or the plain name of a run without a report."""
    first = re.match(r"<td>(?:<a [^>]*>)?([^<]+?)(?:</a>| <span)", cells)
    assert first is not None, cells
    return first.group(1)


def test_one_row_per_run_with_its_verdict_class(campaign: Path) -> None:
    verdicts = {run_name(cells): verdict for verdict, cells in rows(campaign)}
    assert verdicts == {
        "hw/run-1": "expected",
        "hw/run-2": "expected",
        "le/run-1": "invalid",
        "le/run-2": "valid",
        "le/deeper/run-3": "unknown",
        "le/run-4-crashed": "not-checked",
    }
    assert len(rows(campaign)) == 6


def test_rows_carry_settings_anomaly_counts_and_a_link_to_the_report(campaign: Path) -> None:
    headers = headers_of(index_text(campaign))
    assert headers == [
        "run",
        "test",
        "truncation.mode",
        "acks",
        "min ISR",
        "unclean election",
        "flush",
        "nemesis faults",
        "scenario",
        "verdict",
        "lost-write",
        "replica-divergence",
        "not applicable",
        "started",
        "history (s)",
    ]
    by_run = {run_name(cells): cells for _, cells in rows(campaign)}
    cells = by_run["hw/run-1"]
    assert (
        "<td>high-watermark</td><td>all</td><td>2</td><td>false</td><td>never</td><td>kill,pause,partition</td><td>-</td>"
        in cells
    )
    assert 'data-sort="12" title="expected: truncation.mode=high-watermark">12*</td>' in cells
    assert 'data-sort="3">3</td><td class="num" data-sort="1">1</td>' in by_run["le/run-1"]
    for name, cells in by_run.items():  # every run, the crashed one included, links to its own report
        assert f'<td><a href="{name}/report.html">' in cells
        assert (campaign / name / "report.html").is_file()


def test_checks_that_do_not_apply_read_n_a_with_the_reason_apart_from_zero_and_not_run(
    tmp_path: Path,
) -> None:
    make_checked_run(tmp_path / "bundled", RunShape(divergent_offsets=2))  # makes a divergence column
    tansu = make_checked_run(tmp_path / "tansu", RunShape(single_store=True))
    make_checked_run(tmp_path / "partial", RunShape(), [c for c in ALL_CHECKS if c != "replica-divergence"])
    make_checked_run(tmp_path / "clean", RunShape())
    render_index(tmp_path)
    headers = headers_of(index_text(tmp_path))
    divergence = headers.index("replica-divergence")
    inapplicable = headers.index("not applicable")
    cells = {run_name(row): re.findall(r"<td[^>]*>.*?</td>", row) for _, row in rows(tmp_path)}
    why = tansu["not_applicable"]["replica-divergence"]
    assert cells["tansu"][divergence] == (
        f'<td class="num not-applicable" data-sort="-1" title="not applicable: {html.escape(why)}">n/a</td>'
    )
    assert (
        cells["partial"][divergence] == '<td class="num not-run" data-sort="-2" title="not run">not run</td>'
    )
    assert cells["clean"][divergence] == '<td class="num" data-sort="0"></td>'
    assert cells["bundled"][divergence] == '<td class="num" data-sort="2">2</td>'
    count = len(tansu["not_applicable"])
    assert cells["tansu"][inapplicable].startswith(
        f'<td class="num not-applicable" data-sort="{count}" title="'
    )
    for name, reason in tansu["not_applicable"].items():
        assert f"{name}: {html.escape(reason)}" in cells["tansu"][inapplicable]
    assert cells["tansu"][inapplicable].endswith(f">{count} n/a</td>")
    for name in ("bundled", "partial", "clean"):
        assert cells[name][inapplicable] == '<td class="num" data-sort="0"></td>'
    assert dict((run_name(row), verdict) for verdict, row in rows(tmp_path))["tansu"] == "valid"


def test_why_evidence_was_incomplete_is_on_the_verdict(campaign: Path) -> None:
    unknown = next(cells for verdict, cells in rows(campaign) if verdict == "unknown")
    assert 'title="partition(s) 1 of topic tidemark have no complete final drain"' in unknown


def test_a_run_without_a_report_is_listed_without_a_link(tmp_path: Path) -> None:
    write_run(tmp_path / "only")
    render_index(tmp_path)
    assert 'only <span class="note">(no report)</span>' in index_text(tmp_path)


def test_a_directory_without_runs_gets_an_index_that_says_so(tmp_path: Path) -> None:
    render_index(tmp_path)
    assert "No run directories (holding test.json) here yet." in (tmp_path / "index.html").read_text()


def test_the_history_span_is_read_from_the_end_even_past_a_huge_or_torn_last_line(tmp_path: Path) -> None:
    records = [{"offset": n, "key": "k", "value": n} for n in range(20_000)]  # a final drain of ~600 KiB
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        writer.append(Op(0, 7 * 10**9, 0, "invoke", "drain", {"partition": 0}))
        writer.append(
            Op(
                1,
                9_500_000_000,
                0,
                "ok",
                "drain",
                {"partition": 0, "records": records, "end_offset": 20_000, "complete": True},
            )
        )
    assert history_span_seconds(tmp_path) == 9.5
    with (tmp_path / "history.jsonl").open("a") as handle:
        handle.write('{"index": 2, "ti')  # killed mid-line
    assert history_span_seconds(tmp_path) == 9.5
    assert history_span_seconds(tmp_path / "nowhere") is None


def test_key_settings_read_the_recorded_effective_settings_and_know_no_defaults() -> None:
    # Defaults have one owner (the bundled broker's config, resolved into test.json by the
    # spec); a run that recorded nothing reads as unknown rather than as Kafka's defaults.
    assert key_settings({}) == {
        "truncation.mode": "?",
        "acks": "?",
        "min.insync.replicas": "?",
        "unclean.leader.election.enable": "?",
        "flush": "?",
        "faults": "-",
        "scenario": "-",
    }
    spec = {
        "broker_config": {
            "acks": "1",
            "flush.messages": 1,
            "flush.ms": "1000",
            "unclean.leader.election.enable": True,
            "truncation.mode": "leader-epoch",
        },
        "settings": {"flush.ms": "1000"},
        "nemesis": {"faults": ["power-loss"]},
        "scenario": "kip101-loss",
    }
    chosen = key_settings(spec)
    assert (
        chosen["acks"],
        chosen["flush"],
        chosen["unclean.leader.election.enable"],
        chosen["truncation.mode"],
        chosen["faults"],
        chosen["scenario"],
    ) == ("1", "messages=1 ms=1000", "true", "leader-epoch", "power-loss", "kip101-loss")
    never = str(2**63 - 1)  # Kafka's Long.MAX_VALUE, as the effective settings record "never"
    assert key_settings({"broker_config": {"flush.messages": never, "flush.ms": never}})["flush"] == "never"


# ----------------------------------------------------------------------------- the CLI


def test_report_on_one_run_writes_only_its_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "run")
    assert main(["report", str(tmp_path / "run")]) == EXIT_VALID
    assert capsys.readouterr().out.strip() == str(tmp_path / "run" / "report.html")
    assert not (tmp_path / "index.html").exists() and not (tmp_path / "run" / "index.html").exists()


def test_report_on_a_directory_writes_every_page_the_index_and_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_checked_run(tmp_path / "a" / "run", RunShape(lost_writes=1))
    write_run(tmp_path / "b")
    assert main(["report", str(tmp_path), "--junit", str(tmp_path / "junit.xml")]) == EXIT_VALID
    assert (tmp_path / "a" / "run" / "report.html").is_file() and (tmp_path / "b" / "report.html").is_file()
    output = capsys.readouterr().out
    assert f"index: {tmp_path / 'index.html'}" in output and f"junit: {tmp_path / 'junit.xml'}" in output
    assert 'failures="1"' in (tmp_path / "junit.xml").read_text()


@pytest.mark.parametrize("problem", ["missing", "empty", "file"])
def test_report_refuses_a_path_without_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    target = tmp_path / "target"
    if problem == "empty":
        target.mkdir()
    elif problem == "file":
        target.write_text("x")
    assert main(["report", str(target)]) == EXIT_BAD_ARGUMENTS
    error = capsys.readouterr().err
    assert error.startswith(f"tidemark report: error: {target}:") and "Traceback" not in error


def test_report_names_a_run_whose_page_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "a")
    write_run(tmp_path / "b")
    (tmp_path / "a" / "report.html").mkdir()  # cannot be replaced by a file
    assert main(["report", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert (tmp_path / "b" / "report.html").is_file()  # the other run still got its page
    assert f"{tmp_path / 'a'}: report not written" in capsys.readouterr().err


# ----------------------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


def column_text(browser: Browser, column: int) -> list[str]:
    return list(
        browser.evaluate(
            f"Array.from(document.querySelectorAll('#runs tbody tr')).map(r => r.cells[{column}].textContent.trim())"
        )
    )


def test_chromium_sorts_the_table_when_a_header_is_clicked(
    chromium: str, campaign: Path, tmp_path: Path
) -> None:
    with Browser(chromium, width=1800) as browser:
        browser.open(campaign / "index.html")
        headers = list(
            browser.evaluate("Array.from(document.querySelectorAll('#runs th')).map(h => h.textContent)")
        )
        verdict, lost_write = headers.index("verdict"), headers.index("lost-write")
        assert column_text(browser, 0) == [
            "hw/run-1",
            "hw/run-2",
            "le/deeper/run-3",
            "le/run-1",
            "le/run-2",
            "le/run-4-crashed",
        ]
        browser.click(f"#runs th:nth-child({verdict + 1})")
        assert column_text(browser, verdict) == [
            "INVALID",
            "invalid (all expected)",
            "invalid (all expected)",
            "unknown",
            "not checked",
            "valid",
        ]
        browser.click(f"#runs th:nth-child({verdict + 1})")
        assert column_text(browser, verdict)[0] == "valid"
        assert (
            browser.evaluate(f"document.querySelectorAll('#runs th')[{verdict}].getAttribute('aria-sort')")
            == "descending"
        )
        browser.click(f"#runs th:nth-child({lost_write + 1})")
        assert column_text(browser, lost_write) == ["", "", "", "2*", "3", "12*"]  # numeric, not "12" < "2"
        assert browser.errors() == []
        assert {url.split(":", 1)[0] for url in browser.requested_urls()} == {"file"}
        shot = browser.screenshot(tmp_path / "index.png")
    assert shot.stat().st_size > 20_000


def test_the_sort_script_error_would_be_caught(chromium: str, campaign: Path, tmp_path: Path) -> None:
    """A syntax error in the inline script is reported, so the test above cannot pass on a dead script."""
    broken = tmp_path / "index.html"
    broken.write_text((campaign / "index.html").read_text().replace('"use strict";', '"use strict"; var = ;'))
    with Browser(chromium) as browser:
        browser.open(broken)
        assert any("SyntaxError" in error for error in browser.errors())


def test_the_campaign_summary_counts_verdicts(campaign: Path) -> None:
    text = (campaign / "index.html").read_text()
    assert re.search(
        r"6 run\(s\): 1 <span class=\"badge invalid\">INVALID</span>, 2 <span class=\"badge expected\">", text
    )
