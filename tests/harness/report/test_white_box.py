"""White-box examples on the run page: each event of an example a table under a heading."""

from __future__ import annotations

from pathlib import Path

from checker.definitions import HW_REGRESSION, TRUNCATED_COMMITTED
from harness.cli.main import main
from harness.report.white_box import event_html, is_event
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run

EVENT = {
    "ts": 1_795_000_000_000_054_000,
    "node": 2,
    "seq": 18,
    "kind": "become-leader",
    "topic": "q",
    "hw": 4,
}


def test_an_event_is_a_heading_over_its_fields() -> None:
    assert is_event(EVENT) and not is_event({"kind": "x", "seq": 1}) and not is_event([EVENT])
    html = event_html(EVENT)
    assert html.startswith('<div class="event"><b>become-leader</b>')
    assert "(node 2, seq 18, " in html and " UTC)" in html
    assert (
        "<tr><th>hw</th><td>4</td></tr>" in html
        and "<th>topic</th>" not in html
        and "<th>seq</th>" not in html
    )


def test_the_run_page_shows_white_box_events_as_tables(tmp_path: Path) -> None:
    write_invariant_run(
        tmp_path / "run", InvariantPlan(seed=1, plant=((HW_REGRESSION, 1), (TRUNCATED_COMMITTED, 1)))
    )
    main(
        [
            "check",
            str(tmp_path / "run"),
            "--engine",
            "pandas",
            "--checks",
            f"{HW_REGRESSION},{TRUNCATED_COMMITTED}",
        ]
    )
    assert main(["report", str(tmp_path / "run")]) == 0
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert '<div class="event"><b>truncate</b>' in page and '<div class="event"><b>become-leader</b>' in page
    assert "&quot;kind&quot;: &quot;truncate&quot;" not in page, "no event left as a line of JSON"
