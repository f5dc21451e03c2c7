"""The run page's transactional section: each example's transactions as a table of micro-ops, each
cycle drawn as an SVG whose every arrow carries its kind and (ww, wr) partition and offsets, a
layout whose labels and nodes do not overlap, and the section on the page -- from hand-written
examples, from examples the real checks (:mod:`checker.txn`) found in hand-written histories, and
in a real headless Chromium."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from checker.definitions import TXN_CHECKS
from harness.report.cycle_svg import cycle_svg
from harness.report.run_page import render_run_report, run_report_html
from harness.report.txn_section import txn_section
from tests.checker.txn.histories import History, check, poll, send
from tests.checker.txn.runs import write_run
from tests.harness.report.browser import Browser, require_chromium
from tests.harness.report.report_runs import check_run

SVG = "{http://www.w3.org/2000/svg}"


def view(
    index: int,
    process: int,
    sends: Sequence[tuple[int, int, int, int | None]] = (),
    reads: Sequence[tuple[int, int, int, int]] = (),
    end: tuple[str, int] | None = ("commit", 5_000_000_000),
    kind: str = "ok",
    records_read: int | None = None,
) -> dict[str, Any]:
    """A transaction as :meth:`checker.txn.examples.Views.txn` gives it: sends (item, partition,
    value, offset), reads (item, partition, offset, value)."""
    return {
        "index": index,
        "invoke_index": index - 1,
        "process": process,
        "type": kind,
        "end": None if end is None else {"f": end[0], "time": end[1]},
        "sends": [{"item": i, "partition": p, "value": v, "offset": o} for i, p, v, o in sends],
        "reads": [{"item": i, "partition": p, "offset": o, "value": v} for i, p, o, v in reads],
        "records_read": len(reads) if records_read is None else records_read,
    }


def ww(source: int, target: int, partition: int, offset: int, next_offset: int) -> dict[str, Any]:
    return {
        "kind": "ww",
        "from": source,
        "to": target,
        "partition": partition,
        "offset": offset,
        "value": 1,
        "next_offset": next_offset,
        "next_value": 2,
    }


def wr(source: int, target: int, partition: int, offset: int) -> dict[str, Any]:
    return {"kind": "wr", "from": source, "to": target, "partition": partition, "offset": offset, "value": 3}


def cycle(*steps: dict[str, Any], length: int | None = None) -> dict[str, Any]:
    order = [step["from"] for step in steps]
    txns = [view(t, process=t % 7, sends=[(0, 1, t, 9)]) for t in order]
    return {"cycle": order, "length": length or len(steps), "steps": list(steps), "txns": txns}


THREE = cycle(
    wr(10, 20, 0, 1234567),
    ww(20, 30, 1, 999998, 999999),
    {"kind": "realtime", "from": 30, "to": 10, "completed": 30, "invoked": 9},
)
FOUR = cycle(
    ww(1, 2, 0, 5, 6),
    wr(2, 3, 1, 7),
    {"kind": "process", "from": 3, "to": 4, "process": 3},
    ww(4, 1, 2, 100000, 100001),
)
TWO = cycle(wr(41, 42, 0, 0), wr(42, 41, 1, 0))
PRECOMMITTED = {
    "commit_began": 3_000_000_000,
    "offset": 0,
    "own_write": False,
    "partition": 1,
    "read_completed": 2_000_000_000,
    "reader": view(2, 4, sends=[(0, 0, 10, 0)], reads=[(1, 1, 0, 11)]),
    "value": 11,
    "writer": view(3, 5, sends=[(0, 1, 11, None)], records_read=2),
    "writer_invoked": 1_000_000_000,
}
G1A = {
    "partition": 0,
    "value": 30,
    "send": {
        "index": 9,
        "time": 90,
        "process": 2,
        "type": "fail",
        "f": "txn",
        "value": [
            {"f": "send", "partition": 0, "key": "k0", "value": 30, "offset": 1},
            {"f": "abort", "time": 80},
        ],
    },
    "read": {"index": 11, "time": 110, "process": 3, "type": "ok", "f": "poll", "value": [
        {"partition": 0, "offset": 1, "key": "k0", "value": 30}
    ]},
}  # fmt: skip
HANGING = {
    "partition": 4,
    "node": "n2",
    "first_offset": 17,
    "lso": 17,
    "held": 40,
    "opened": {"ts": 1, "node": "n2", "seq": 5, "kind": "txn-open", "producer_id": 1000, "producer_epoch": 3},
    "coordinator_last": {"ts": 2, "node": "n1", "seq": 9, "kind": "txn-state", "state": "CompleteAbort",
                         "transactional_id": "tidemark-queue-1"},
}  # fmt: skip


def results(**examples: list[Any]) -> dict[str, Any]:
    """A ``results.json`` whose anomalies are ``name=[examples]`` (``_`` spelled ``-``)."""
    anomalies = {
        name.replace("_", "-"): {
            "count": len(shown) + 1,
            "expected": False,
            "severity": "error",
            "examples": shown,
        }
        for name, shown in examples.items()
    }
    return {"valid": False, "anomalies": anomalies}


class Tables(HTMLParser):
    """Each ``table.txn-ops`` row as (its ``data-txn``, the texts of its cells), and every other
    table's rows as (None, texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str | None, list[str]]] = []
        self._cell: list[str] | None = None
        self._svg = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self._svg += 1
        elif tag == "tr" and not self._svg:
            self.rows.append((dict(attrs).get("data-txn"), []))
        elif tag in ("td", "th") and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1][1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rows_of(html: str) -> list[tuple[str | None, list[str]]]:
    parser = Tables()
    parser.feed(html)
    return parser.rows


def micro_rows(html: str) -> list[tuple[str | None, list[str]]]:
    return [row for row in rows_of(html) if row[0] is not None]


def drawings(html: str) -> list[ElementTree.Element]:
    return [ElementTree.fromstring(svg) for svg in re.findall(r"<svg\b.*?</svg>", html, re.S)]


def edges(svg: ElementTree.Element) -> list[tuple[str, int, int, list[str]]]:
    """Each arrow as (kind, from, to, its label's lines)."""
    return [
        (g.get("data-kind", ""), int(g.get("data-from", "")), int(g.get("data-to", "")),
         [t.text or "" for t in g.iter(f"{SVG}text")])
        for g in svg.iter(f"{SVG}g") if g.get("class") == "edge"
    ]  # fmt: skip


def nodes(svg: ElementTree.Element) -> dict[int, list[str]]:
    return {
        int(g.get("data-txn", "")): [t.text or "" for t in g.iter(f"{SVG}text")]
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "node"
    }


def expected_label(step: dict[str, Any]) -> list[str]:
    """What an arrow must say: its kind, and for ww and wr the partition and offset(s)."""
    if step["kind"] == "ww":
        return ["ww", f"partition {step['partition']}", f"offsets {step['offset']} → {step['next_offset']}"]
    if step["kind"] == "wr":
        return ["wr", f"partition {step['partition']}", f"offset {step['offset']}"]
    if step["kind"] == "process":
        return ["process", f"process {step['process']}"]
    return [step["kind"]]


def assert_drawn(example: dict[str, Any], svg: ElementTree.Element) -> None:
    """Every step of ``example`` is an arrow between the right nodes with its whole label."""
    assert [(kind, a, b) for kind, a, b, _ in edges(svg)] == [
        (step["kind"], step["from"], step["to"]) for step in example["steps"]
    ]
    for step, (_, _, _, label) in zip(example["steps"], edges(svg), strict=True):
        assert label == expected_label(step), step
    assert set(nodes(svg)) == {step["from"] for step in example["steps"]} | {
        step["to"] for step in example["steps"]
    }


def test_a_cycle_is_drawn_with_its_transactions_as_nodes_and_labelled_edges() -> None:
    html = txn_section(results(G1c_realtime=[THREE]))
    (svg,) = drawings(html)
    assert nodes(svg) == {10: ["#10", "process 3"], 20: ["#20", "process 6"], 30: ["#30", "process 2"]}
    assert edges(svg) == [
        ("wr", 10, 20, ["wr", "partition 0", "offset 1234567"]),
        ("ww", 20, 30, ["ww", "partition 1", "offsets 999998 → 999999"]),
        ("realtime", 30, 10, ["realtime"]),
    ]
    titles = [t.text for t in svg.iter(f"{SVG}title")]
    assert titles[0] == "#20 read value 3 at partition 0 offset 1234567, which #10 sent"
    assert titles[2] == "#30 completed before #10 was invoked (its invoke: op #9)"
    steps = [cells for txn, cells in rows_of(html) if txn is None and cells and cells[0].isdigit()]
    assert [cells[:4] for cells in steps] == [
        ["1", "#10", "#20", "wr"],
        ["2", "#20", "#30", "ww"],
        ["3", "#30", "#10", "realtime"],
    ]


@pytest.mark.parametrize("example", [TWO, THREE, FOUR], ids=["two", "three", "four"])
def test_every_arrow_keeps_its_whole_label(example: dict[str, Any]) -> None:
    """Fails when any arrow's kind, partition or offset is dropped from the drawing."""
    (svg,) = drawings(txn_section(results(G1c=[example])))
    assert_drawn(example, svg)


def test_a_cut_off_cycle_draws_the_transaction_it_does_not_show_dashed() -> None:
    example = cycle(wr(1, 2, 0, 4), wr(2, 3, 0, 5), length=40)
    html = txn_section(results(G1c=[example]))
    assert "a cycle of 40 transactions; its first 2 steps shown" in html
    (svg,) = drawings(html)
    assert nodes(svg)[3] == ["#3", "(not shown)"]
    dashed = {
        int(g.get("data-txn", "")): rect.get("stroke-dasharray")
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "node"
        for rect in g.findall(f"{SVG}rect")
    }
    assert dashed == {1: None, 2: None, 3: "4 3"}


def boxes(svg: ElementTree.Element) -> list[list[float]]:
    """Every label's and node's box (x, y, width, height)."""
    return [
        [float(rect.get(a, "")) for a in ("x", "y", "width", "height")]
        for g in svg.iter(f"{SVG}g")
        if g.get("class") in ("edge", "node")
        for rect in g.findall(f"{SVG}rect")
    ]


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6, 8])
def test_no_label_or_node_overlaps_another_and_all_lie_in_the_view_box(size: int) -> None:
    txns = [100000 + k for k in range(size)]
    steps = [ww(t, txns[(k + 1) % size], 123456, 1234567, 1234568) for k, t in enumerate(txns)]
    svg = ElementTree.fromstring(cycle_svg(steps, {t: 123 for t in txns}))
    found = boxes(svg)
    assert len(found) == 2 * size
    for a, b in itertools.combinations(found, 2):
        assert not overlap(a, b), (a, b)
    left, top, width, height = (float(v) for v in svg.get("viewBox", "").split())
    for x, y, w, h in found:
        assert left <= x and x + w <= left + width and top <= y and y + h <= top + height


def test_the_transactions_table_has_a_row_per_micro_op() -> None:
    html = txn_section(results(precommitted_read=[PRECOMMITTED]))
    assert micro_rows(html) == [
        ("3", ["#3 writer", "5", "committed", "0", "send", "1", "-", "11"]),
        ("3", ["-", "commit (began at 5.000000 s)", "-", "-", "-"]),
        ("3", ["its polls returned 2 more record(s), not part of this finding"]),
        ("2", ["#2 reader", "4", "committed", "0", "send", "0", "0", "10"]),
        ("2", ["1", "poll", "1", "0", "11"]),
        ("2", ["-", "commit (began at 5.000000 s)", "-", "-", "-"]),
    ]
    facts = next(cells for txn, cells in rows_of(html) if txn is None and cells[:1] == ["1"])
    assert facts == ["1", "0", "11", "3.000000 s", "false", "2.000000 s", "1.000000 s"]


def test_a_transaction_reading_its_own_write_is_shown_once() -> None:
    reader = view(5, 1, sends=[(0, 0, 7, 3)], reads=[(1, 0, 3, 7)])
    writer = view(5, 1, sends=[(0, 0, 7, 3)], records_read=1)
    example = {"own_write": True, "partition": 0, "offset": 3, "value": 7, "reader": reader, "writer": writer}
    assert micro_rows(txn_section(results(precommitted_read=[example]))) == [
        ("5", ["#5 writer and reader", "1", "committed", "0", "send", "0", "3", "7"]),
        ("5", ["1", "poll", "0", "3", "7"]),
        ("5", ["-", "commit (began at 5.000000 s)", "-", "-", "-"]),
    ]


def test_an_aborted_read_shows_the_aborted_transaction_and_the_read_with_keys() -> None:
    html = txn_section(results(G1a=[G1A]))
    assert micro_rows(html) == [
        ("9", ["#9 writer", "2", "aborted", "-", "send", "0", "k0", "1", "30"]),
        ("9", ["-", "abort (began at 0.000000 s)", "-", "-", "-", "-"]),
        ("11", ["#11 reader", "3", "ok", "-", "poll", "0", "k0", "1", "30"]),
    ]


def test_a_hanging_transaction_names_its_producer_not_micro_ops() -> None:
    html = txn_section(results(hanging_transaction=[HANGING]))
    assert micro_rows(html) == []
    facts = [cells for txn, cells in rows_of(html) if txn is None]
    assert facts[1] == ["4", "n2", "1000", "3", "tidemark-queue-1", "CompleteAbort", "17", "17", "40"]


def test_no_transactional_anomaly_no_section_and_bad_input_never_raises() -> None:
    assert txn_section(None) == "" and txn_section({"anomalies": {}}) == ""
    assert txn_section(results(lost_write=[{"partition": 0}])) == ""
    weird: list[Any] = [
        None,
        7,
        "text",
        {"steps": "no"},
        {"steps": [None, {"kind": "ww"}, {"from": "a", "to": 1}], "txns": [{"index": 1, "sends": [None]}]},
        {
            "reader": {"index": 1, "sends": 3, "end": "x", "records_read": "many"},
            "writer": {"index": 2, "sends": []},
        },
        {"send": {"index": 1, "type": "fail", "f": "txn", "value": [None, {"f": "poll", "records": None}]}},
        {
            "read": {
                "index": 1,
                "type": "ok",
                "f": "drain",
                "value": {"partition": 1, "records": [{"offset": 2}]},
            }
        },
    ]
    html = txn_section(
        {"anomalies": {name: {"count": "x", "examples": weird} for name in (*TXN_CHECKS, "G1a")}}
    )
    assert "Transactional anomalies" in html
    odd = txn_section({"anomalies": {"G0": {"examples": "none"}, "G1c": None}})
    assert odd.count("no examples recorded") == 1 and "G1c" not in odd


def real_examples(history: History) -> dict[str, list[dict[str, Any]]]:
    """The examples the transactional checks give for ``history``, by anomaly."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in check(history, frozenset(TXN_CHECKS)).to_dict("records"):
        found.setdefault(row["kind"], []).append(json.loads(row["example"]))
    return found


def _g0_two_writers(history: History) -> None:
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [send(1, 3, 0), send(0, 4, 1)])
    history.complete(0)
    history.complete(1)


def _g1c_three_readers(history: History) -> None:
    history.invoke(2, [send(2, 10, 0), poll((3, 0, 11))])
    history.invoke(3, [send(3, 11, 0), poll((4, 0, 12))])
    history.invoke(4, [send(4, 12, 0), poll((2, 0, 10))])
    for process in (2, 3, 4):
        history.complete(process)


def _g1c_via_wr_then_ww(history: History) -> None:
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [poll((0, 0, 1)), send(1, 3, 0)])
    history.complete(0)
    history.complete(1)


def _g1c_process(history: History) -> None:
    history.txn(0, [poll((1, 0, 20))])
    history.txn(0, [send(0, 10, 0)])
    history.txn(1, [poll((0, 0, 10)), send(1, 20, 0)])


@pytest.mark.parametrize(
    ("build", "kinds"),
    [
        (_g0_two_writers, {"G0"}),
        (_g1c_three_readers, {"G1c"}),
        (_g1c_via_wr_then_ww, {"G1c"}),
        (_g1c_process, {"G1c-process", "G1c-realtime"}),
    ],
    ids=["G0 of two writers", "G1c of three readers", "G1c via wr then ww", "G1c-process"],
)
def test_the_real_checks_cycles_are_drawn_edge_for_edge(
    build: Callable[[History], None], kinds: set[str]
) -> None:
    """Cycles the transactional checks find in hand-written histories (Elle's examples among
    them): every step an arrow with its whole label, every transaction of the cycle in the table."""
    history = History()
    build(history)
    found = real_examples(history)
    assert kinds <= set(found)
    for name in kinds:
        (example,) = found[name]
        html = txn_section(results(**{name.replace("-", "_"): [example]}))
        (svg,) = drawings(html)
        assert_drawn(example, svg)
        assert {int(txn) for txn, _ in micro_rows(html) if txn is not None} == set(example["cycle"])
        for txn in example["txns"]:
            rows = [cells for index, cells in micro_rows(html) if index == str(txn["index"])]
            sends = [cells[-5:] for cells in rows if "send" in cells]
            assert sends == [
                [str(s["item"]), "send", str(s["partition"]), str(s["offset"]), str(s["value"])]
                for s in txn["sends"]
            ]


def page_run(root: Path, extra: dict[str, Any]) -> Path:
    """A checked transactional run (a G1c by wr edges) with ``extra`` anomalies added to its results."""
    history = History()
    history.invoke(0, [send(0, 1, 0), poll((1, 0, 2))])
    history.invoke(1, [send(1, 2, 0), poll((0, 0, 1))])
    history.complete(0)
    history.complete(1)
    history.drain(0, [(0, 1)])
    history.drain(1, [(0, 2)])
    history.drain(2, [])
    run_dir = root / "txn-run"
    write_run(run_dir, history)
    checked = check_run(run_dir)
    assert "G1c" in checked["anomalies"]
    stored = json.loads((run_dir / "results.json").read_text())
    stored["anomalies"].update(extra)
    (run_dir / "results.json").write_text(json.dumps(stored))
    return run_dir


def test_the_run_page_shows_the_section_after_the_anomaly_table(tmp_path: Path) -> None:
    page = run_report_html(page_run(tmp_path, {}))
    assert (
        page.index("<h2>Anomalies</h2>")
        < page.index('<h2 id="transactions">')
        < page.index("<h2>Evidence</h2>")
    )
    assert len(drawings(page)) == 1 and 'href="#anomaly-G1c"' in page
    clean = History()
    clean.txn(0, [send(0, 1, 0)])
    clean.drain(0, [(0, 1)])
    write_run(tmp_path / "clean", clean)
    check_run(tmp_path / "clean")
    assert 'id="transactions"' not in run_report_html(tmp_path / "clean")


def test_in_chromium_each_text_fits_its_box_and_no_boxes_overlap(tmp_path: Path) -> None:
    """The page as a browser lays it out: no error, and in each cycle drawing every label's and
    node's rendered text lies inside its box (the layout's width estimate holds for the real font)
    and no two boxes overlap -- so no text overlaps another."""
    chromium = require_chromium()
    extra = {"G0": results(G0=[TWO, THREE, FOUR])["anomalies"]["G0"]}
    report = render_run_report(page_run(tmp_path, extra))
    with Browser(chromium, width=1280, height=1000) as browser:
        browser.open(report)
        found = browser.evaluate(
            "[...document.querySelectorAll('svg.cycle')].map(svg => [...svg.querySelectorAll('g.edge, g.node')]"
            ".map(g => [g.querySelector(':scope > rect'), g.querySelector(':scope > g')].map(e => {"
            " const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })))"
        )
        assert browser.errors() == []
    assert [len(boxes) for boxes in found] == [4, 4, 6, 8]  # G1c's two-node cycle, then G0's three
    for drawn in found:
        for (bx, by, bw, bh), (tx, ty, tw, th) in drawn:
            assert bx - 0.5 <= tx and tx + tw <= bx + bw + 0.5 and by - 0.5 <= ty and ty + th <= by + bh + 0.5
        for a, b in itertools.combinations([box for box, _ in drawn], 2):
            assert not overlap(a, b), (a, b)
