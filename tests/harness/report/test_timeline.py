"""The report's time series: latency pairing, throughput bins, fault windows, both history sources."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.report.timeline import HistoryUnavailable, bin_width, build_timeline
from testbed.record.history import HistoryWriter, convert_history
from testbed.record.ops import Op
from tests.harness.report.report_runs import RunShape, write_run

SECOND = 1_000_000_000


def write_history(run_dir: Path, ops: list[tuple[float, Any, str, str, Any]]) -> None:
    """``(seconds, process, type, f, value)`` in history order."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (seconds, process, kind, f, value) in enumerate(ops):
            writer.append(Op(index, int(seconds * SECOND), process, kind, f, value))  # type: ignore[arg-type]


def send(value: int) -> dict[str, Any]:
    return {"partition": 0, "key": "k", "value": value}


def test_each_completion_is_paired_with_its_own_process_invoke(tmp_path: Path) -> None:
    write_history(
        tmp_path,
        [
            (1.0, 0, "invoke", "send", send(1)),
            (1.1, 1, "invoke", "send", send(2)),
            (1.3, 1, "ok", "send", {**send(2), "offset": 0}),  # completes before process 0's earlier invoke
            (1.4, 1, "invoke", "send", send(3)),
            (2.0, 0, "info", "send", None),
            (2.2, 1, "fail", "send", None),
            (2.5, 2, "invoke", "send", send(4)),  # never completes
            (2.6, 3, "invoke", "poll", None),
            (2.7, 3, "ok", "poll", []),  # not a send: no latency point
        ],
    )
    timeline, _ = build_timeline(tmp_path)
    rows = timeline.latencies.round({"latency_ms": 3}).to_dict("records")
    assert [(r["invoked_s"], r["latency_ms"], r["type"]) for r in rows] == [
        (1.0, 1000.0, "info"),
        (1.1, 200.0, "ok"),
        (1.4, 800.0, "fail"),
    ]
    assert timeline.pending == 1
    assert timeline.op_count == 9


def test_throughput_counts_send_completions_per_outcome_and_bin(tmp_path: Path) -> None:
    ops: list[tuple[float, Any, str, str, Any]] = []
    for number, (start, outcome) in enumerate(
        [(0.1, "ok"), (0.3, "ok"), (1.2, "fail"), (1.5, "ok"), (2.1, "info")]
    ):
        ops += [
            (start, number, "invoke", "send", send(number)),
            (start + 0.05, number, outcome, "send", None),
        ]
    write_history(tmp_path, ops)
    timeline, _ = build_timeline(tmp_path)
    assert timeline.bin_seconds == 1
    table = timeline.throughput
    assert table.loc[0.0].tolist() == [2, 0, 0]
    assert table.loc[1.0].tolist() == [1, 1, 0]
    assert table.loc[2.0].tolist() == [0, 0, 1]


def nemesis(seconds: float, kind: str, f: str, value: Any) -> tuple[float, Any, str, str, Any]:
    return (seconds, "nemesis", kind, f, value)


def test_each_fault_window_closes_at_the_heal_that_undid_it(tmp_path: Path) -> None:
    both = {"nodes": ["n1", "n2"]}
    write_history(
        tmp_path,
        [
            nemesis(1.0, "invoke", "kill", both),
            nemesis(1.1, "ok", "kill", both),
            nemesis(2.0, "invoke", "start", {"nodes": ["n1"]}),
            nemesis(2.1, "ok", "start", {"nodes": ["n1"]}),
            nemesis(3.0, "invoke", "start", {"nodes": ["n2"]}),
            nemesis(3.2, "ok", "start", {"nodes": ["n2"]}),
            nemesis(4.0, "invoke", "pause", {"nodes": ["n3"]}),
            nemesis(4.1, "ok", "pause", {"nodes": ["n3"]}),
            nemesis(5.0, "invoke", "resume", {"nodes": ["n3"]}),
            nemesis(5.1, "ok", "resume", {"nodes": ["n3"]}),
            nemesis(6.0, "invoke", "partition", {"kind": "halves", "grudge": {"n1": ["n2"], "n2": ["n1"]}}),
            nemesis(6.1, "ok", "partition", {"kind": "halves", "grudge": {"n1": ["n2"], "n2": ["n1"]}}),
            nemesis(7.0, "invoke", "heal", {"nodes": ["n1", "n2"]}),
            nemesis(7.3, "info", "heal", {"nodes": ["n1", "n2"]}),
            nemesis(8.0, "invoke", "power-loss", {"nodes": ["n1"]}),
            nemesis(8.1, "ok", "power-loss", {"nodes": ["n1"]}),
            nemesis(9.0, "invoke", "start", {"nodes": ["n1"]}),
            nemesis(9.5, "ok", "start", {"nodes": ["n1"]}),
            nemesis(10.0, "invoke", "kill", {"nodes": ["n2"]}),
            nemesis(10.1, "fail", "kill", {"nodes": ["n2"]}),
            nemesis(11.0, "invoke", "pause", {"nodes": ["n1"]}),
            nemesis(11.1, "ok", "pause", {"nodes": ["n1"]}),
            nemesis(12.0, "invoke", "resume", {"nodes": ["n1"]}),
            nemesis(12.1, "fail", "resume", {"nodes": ["n1"]}),
            nemesis(13.0, "invoke", "kill", {"nodes": ["n3"]}),
            nemesis(13.1, "ok", "kill", {"nodes": ["n3"]}),
        ],
    )
    timeline, _ = build_timeline(tmp_path)
    windows = [(w.label, w.start_s, w.end_s, w.healed_by) for w in timeline.windows]
    assert windows == [
        ("kill n1,n2", 1.0, 3.2, "start"),  # closed only when its last node was started
        ("pause n3", 4.0, 5.1, "resume"),
        ("partition halves", 6.0, 7.3, "heal"),  # an info heal may have acted: the window ends there
        ("power-loss n1", 8.0, 9.5, "start"),
        ("pause n1", 11.0, None, None),  # its resume failed: still paused at the end
        ("kill n3", 13.0, None, None),  # never started
    ]
    assert [e.outcome for e in timeline.events if e.f == "kill"] == [
        "ok",
        "fail",
        "ok",
    ]  # the failed kill is listed


def test_parquet_and_json_lines_give_the_same_timeline(tmp_path: Path) -> None:
    write_run(tmp_path, RunShape(unhealed_kill=True))
    from_jsonl, _ = build_timeline(tmp_path)
    convert_history(tmp_path / "history.jsonl", tmp_path / "history.parquet")
    from_parquet, _ = build_timeline(tmp_path)
    assert (from_jsonl.source, from_parquet.source) == ("history.jsonl", "history.parquet")
    pd.testing.assert_frame_equal(from_jsonl.latencies, from_parquet.latencies)
    pd.testing.assert_frame_equal(from_jsonl.throughput, from_parquet.throughput)
    assert from_jsonl.windows == from_parquet.windows
    assert from_jsonl.events == from_parquet.events
    assert (from_jsonl.op_count, from_jsonl.pending) == (from_parquet.op_count, from_parquet.pending)
    assert len(from_jsonl.windows) == 4 and from_jsonl.windows[-1].end_s is None


def test_a_stale_parquet_file_is_not_read(tmp_path: Path) -> None:
    write_run(tmp_path)
    convert_history(tmp_path / "history.jsonl", tmp_path / "history.parquet")
    later = (tmp_path / "history.parquet").stat().st_mtime + 10
    os.utime(tmp_path / "history.jsonl", (later, later))  # the JSON lines grew after the conversion
    timeline, _ = build_timeline(tmp_path)
    assert timeline.source == "history.jsonl"


def test_a_damaged_parquet_file_falls_back_to_the_json_lines(tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / "history.parquet").write_bytes(b"PAR1 not really")
    timeline, notes = build_timeline(tmp_path)
    assert timeline.source == "history.jsonl"
    assert "history.parquet unusable" in notes[0]


def test_garbage_and_torn_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    write_history(tmp_path, [(1.0, 0, "invoke", "send", send(1)), (1.5, 0, "ok", "send", None)])
    with (tmp_path / "history.jsonl").open("a") as handle:
        handle.write("this is not json\n")
        handle.write(json.dumps({"index": 9, "time": 1, "process": 0, "type": "bogus", "f": "send"}) + "\n")
        handle.write('{"index": 10, "time": 2')  # the torn last line of a killed run
    timeline, _ = build_timeline(tmp_path)
    assert [s.line for s in timeline.skipped] == [4, 5, 6]
    assert "incomplete" in timeline.skipped[-1].reason
    assert len(timeline.latencies) == 1


def test_an_unsupported_schema_version_is_no_history(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text('{"format": "tidemark-history", "schema_version": 99}\n')
    with pytest.raises(HistoryUnavailable, match="schema version 99"):
        build_timeline(tmp_path)


def test_a_run_without_history_files_is_no_history(tmp_path: Path) -> None:
    with pytest.raises(HistoryUnavailable, match=r"no history\.jsonl or history\.parquet"):
        build_timeline(tmp_path)


def test_an_empty_history_is_an_empty_timeline(tmp_path: Path) -> None:
    write_history(tmp_path, [])
    timeline, _ = build_timeline(tmp_path)
    assert (timeline.op_count, timeline.duration_s, len(timeline.latencies), timeline.windows) == (
        0,
        0.0,
        0,
        (),
    )


@pytest.mark.parametrize(
    ("seconds", "width"), [(0, 1), (30, 1), (200, 1), (201, 2), (3600, 30), (10**6, 5000)]
)
def test_bins_stay_few_enough_to_read(seconds: float, width: float) -> None:
    assert bin_width(seconds) == width
