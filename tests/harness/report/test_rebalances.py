"""The report's consumer-group view: the rebalance timeline and the group anomalies' example ops."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from checker.definitions import GROUP_CHECKS
from harness.report.rebalances import Assignment
from harness.report.run_page import render_run_report
from harness.report.timeline import build_timeline
from testbed.record.history import HistoryWriter, convert_history
from testbed.record.ops import Op
from tests.checker.group_synthetic import GROUP_PLANTABLE, GroupPlan, write_group_run
from tests.harness.report.report_runs import RunShape, check_run, make_checked_run

SECOND = 1_000_000_000


def _assign(
    process: int, generation: int, consumer: int, partitions: list[int], **more: Any
) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "generation": generation,
        "member_id": f"m{consumer}",
        "consumer": consumer,
        **more,
    }


def _revoke(partitions: list[int], generation: int, consumer: int, lost: bool = False) -> dict[str, Any]:
    return {"partitions": partitions, "lost": lost, "generation": generation, "consumer": consumer}


def _commit(offsets: dict[str, int], generation: int, polled_by: int) -> dict[str, Any]:
    return {"offsets": offsets, "generation": generation, "polled_by": polled_by}


HISTORY: list[tuple[float, Any, str, str, Any]] = [
    (1.0, 10, "invoke", "assign", _assign(10, 1, 0, [0, 1])),
    (1.0, 10, "ok", "assign", _assign(10, 1, 0, [0, 1])),
    (1.5, 10, "invoke", "commit", _commit({"0": 3}, 1, 10)),
    (2.0, 10, "info", "commit", _commit({"0": 3}, 1, 10)),
    (2.0, 11, "invoke", "assign", _assign(11, 1, 0, [0, 1], takeover=10)),
    (2.0, 11, "ok", "assign", _assign(11, 1, 0, [0, 1], takeover=10)),
    (3.0, 20, "invoke", "assign", _assign(20, 1, 1, [])),
    (3.0, 20, "ok", "assign", _assign(20, 1, 1, [])),
    (4.0, "nemesis", "invoke", "consumer-churn", {"stop": "stall", "pick": 1}),
    (5.0, 11, "invoke", "revoke", _revoke([0, 1], 1, 0)),
    (5.0, 11, "ok", "revoke", _revoke([0, 1], 1, 0)),
    (5.5, 30, "invoke", "assign", _assign(30, 2, 0, [0])),
    (5.5, 30, "ok", "assign", _assign(30, 2, 0, [0])),
    (5.6, 40, "invoke", "assign", _assign(40, 2, 2, [1])),
    (5.6, 40, "ok", "assign", _assign(40, 2, 2, [1])),
    (6.0, "nemesis", "ok", "consumer-churn", {"stop": "stall", "pick": 1}),
    (6.5, 40, "invoke", "poll", None),
    (7.0, 40, "info", "poll", None),
    (7.5, 20, "invoke", "revoke", _revoke([], 1, 1, lost=True)),  # a zombie's late revoke
    (7.5, 20, "ok", "revoke", _revoke([], 1, 1, lost=True)),
    (9.0, 0, "invoke", "send", {"partition": 0, "key": "k", "value": 1}),
]

EXPECTED = [
    (10, 0, 1, (0, 1), 1.0, 2.0, "taken over by process 11", None),
    (11, 0, 1, (0, 1), 2.0, 5.0, "revoked", 10),
    (20, 1, 1, (), 3.0, 7.5, "lost", None),
    (30, 0, 2, (0,), 5.5, None, "held when the history ended", None),
    (40, 2, 2, (1,), 5.6, 7.0, "its poll ended info (no revoke recorded)", None),
]


def _write(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (seconds, process, kind, f, value) in enumerate(HISTORY):
            writer.append(Op(index, int(seconds * SECOND), process, kind, f, value))  # type: ignore[arg-type]


def _shown(held: tuple[Assignment, ...]) -> list[tuple[Any, ...]]:
    return [
        (a.process, a.consumer, a.generation, a.partitions, a.start_s, a.end_s, a.ended, a.takeover_of)
        for a in held
    ]


@pytest.mark.parametrize("source", ["history.jsonl", "history.parquet"])
def test_each_member_process_holds_its_partitions_until_its_assignment_ends(
    tmp_path: Path, source: str
) -> None:
    """Revoked, lost, taken over, ended by an info op, or still held: from either history file."""
    _write(tmp_path)
    if source == "history.parquet":
        convert_history(tmp_path / "history.jsonl", tmp_path / "history.parquet")
        (tmp_path / "history.jsonl").unlink()
    timeline, _ = build_timeline(tmp_path)
    assert timeline.source == source
    assert _shown(timeline.assignments) == EXPECTED
    assert [e.f for e in timeline.events] == ["consumer-churn"]


def test_a_run_without_a_group_has_no_rebalance_timeline(tmp_path: Path) -> None:
    make_checked_run(tmp_path / "run", RunShape(lost_writes=1))
    render_run_report(tmp_path / "run")
    timeline, _ = build_timeline(tmp_path / "run")
    assert timeline.assignments == ()
    assert "who held which partition" not in (tmp_path / "run" / "report.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def group_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A checked subscribe run with every group anomaly planted, its report rendered."""
    run_dir = tmp_path_factory.mktemp("group") / "run"
    write_group_run(run_dir, GroupPlan(seed=3, consumers=2, plant=tuple((k, 1) for k in GROUP_PLANTABLE)))
    result = check_run(run_dir)
    render_run_report(run_dir)
    return run_dir, result


def test_the_report_draws_the_rebalance_timeline_under_the_throughput_plot(
    group_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, _ = group_run
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    timeline, _ = build_timeline(run_dir)
    section = text.index("who held which partition")
    assert text.index("nemesis windows, send throughput and latency") < section < text.index("<h2>Anomalies")
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 3, "the timeline, the rebalances and the offsets"
    figure = Image.open(io.BytesIO(base64.b64decode(images[1])))
    assert figure.width == 1200 and figure.height > 100
    assert f"assignments ({len(timeline.assignments)})" in text
    rows = re.findall(r"<tr><td>(\d+)</td>", text.split('class="assignments"', 1)[1].split("</table>", 1)[0])
    assert [int(p) for p in rows] == [a.process for a in timeline.assignments]
    takeovers = [a for a in timeline.assignments if a.takeover_of is not None]
    assert all(f"taken over by process {a.process}" in text for a in takeovers)


def test_the_anomaly_table_shows_the_group_anomalies_with_their_example_ops(
    group_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, result = group_run
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    anomalies = result["anomalies"]
    assert set(GROUP_CHECKS) <= set(anomalies)
    for kind in GROUP_CHECKS:
        assert re.search(rf'href="#anomaly-{kind}">{kind}</a></td><td class="num">1</td><td><b>no</b>', text)
    shown = {
        "group-skip": ("send", "committed_by"),
        "group-redelivery": ("read", "committed_by"),
        "commit-regression": ("prev_commit", "commit"),
        "committed-beyond-read": ("read", "commit"),
        "generation-regression": ("prev_assign", "assign"),
    }
    assert set(shown) == set(GROUP_CHECKS)
    for kind, fields in shown.items():
        details = text.split(f'id="anomaly-{kind}"', 1)[1].split("</details>", 1)[0]
        (example,) = anomalies[kind]["examples"]
        for field in fields:
            op = example[field]
            assert f"#{op['index']} process {op['process']} {op['f']} {op['type']}" in details, (kind, field)
        assert json.dumps(example.get("partition", example.get("generation"))) in details
