"""The pages in a 1400 px window of a real Chromium (issue 36): nothing of the summary off-screen
sideways, and the verdict and whether the run met its scenario's expectation in view before any
scrolling -- on the demo's two run pages and its index, with the demo's dozen anomaly columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from harness.cli.main import main
from harness.run.exit_codes import EXIT_VALID
from tests.harness.report.browser import Browser, require_chromium
from tests.harness.report.report_runs import make_demo_store

WIDTH, HEIGHT = 1400, 850
HIGH_WATERMARK = "runs/kip101-loss-high-watermark/report.html"
LEADER_EPOCH = "runs/kip101-loss-leader-epoch/report.html"

BOXES = """
(() => {
  const box = e => { const r = e.getBoundingClientRect(); return e && [r.left, r.top, r.right, r.bottom]; };
  const index = document.querySelector('#runs') !== null;
  const summary = [];
  if (index) {
    summary.push(...document.body.querySelectorAll('*'));
  } else {  // the run page's header: everything before the first section
    for (let e = document.querySelector('h1'); e && e.tagName !== 'H2'; e = e.nextElementSibling) {
      summary.push(e, ...e.querySelectorAll('*'));
    }
  }
  const verdict = document.querySelector(index ? '#runs tbody td.verdict .badge' : 'h1 .badge');
  const expectation = index
    ? document.querySelector('#runs tbody td.verdict .mark')
    : Array.from(document.querySelectorAll('p')).find(p => /^(NOT )?as expected/.test(p.textContent.trim()));
  return {
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    innerHeight: window.innerHeight,
    offscreen: summary.filter(e => box(e)[2] > document.documentElement.clientWidth + 0.5 || box(e)[0] < -0.5)
      .map(e => e.tagName + ' ' + e.textContent.trim().slice(0, 60)),
    verdict: verdict && [verdict.textContent.trim(), box(verdict)],
    expectation: expectation && [expectation.textContent.trim(), box(expectation)],
  };
})()
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_demo_store(tmp_path_factory.mktemp("demo"))
    assert main(["report", str(root)]) == EXIT_VALID
    return root


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


def in_view(box: list[float], width: float, height: float) -> bool:
    left, top, right, bottom = box
    return left >= 0 and top >= 0 and right <= width and bottom <= height and right > left and bottom > top


@pytest.mark.parametrize(
    ("page", "verdict", "expectation"),
    [
        ("index.html", "invalid (all expected)", "as expected"),
        (HIGH_WATERMARK, "invalid (all expected)", "as expected: lost-write (permitted by truncation.mode"),
        (LEADER_EPOCH, "valid", "as expected: valid"),
    ],
    ids=["index", "high-watermark", "leader-epoch"],
)
def test_the_summary_fits_a_1400_px_window_with_the_verdict_and_expectation_in_view(
    chromium: str, demo: Path, page: str, verdict: str, expectation: str, tmp_path: Path
) -> None:
    with Browser(chromium, width=WIDTH, height=HEIGHT) as browser:
        browser.open(demo / page)
        found: dict[str, Any] = browser.evaluate(BOXES)
        shot = browser.screenshot(tmp_path / f"{Path(page).parent.name or 'index'}.png", full_page=False)
        assert browser.errors() == []
    assert found["scrollWidth"] <= WIDTH, f"the page scrolls sideways: {found['scrollWidth']} px wide"
    assert found["offscreen"] == [], "parts of the summary are off-screen sideways"
    assert found["verdict"] is not None and found["verdict"][0] == verdict
    assert found["expectation"] is not None and found["expectation"][0].startswith(expectation)
    for name in ("verdict", "expectation"):
        assert in_view(found[name][1], found["clientWidth"], found["innerHeight"]), (name, found[name])
    picture = Image.open(shot)
    assert picture.size == (WIDTH, HEIGHT)
    assert len(np.unique(np.asarray(picture.convert("L")))) > 20, "a rendered page, not a blank one"
