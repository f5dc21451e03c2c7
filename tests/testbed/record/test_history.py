"""The history format: flushed JSON lines, exact Parquet round trip, clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.record.history import (
    HISTORY_SCHEMA_VERSION,
    HistoryFormatError,
    HistoryWriter,
    convert_history,
    read_history,
    read_history_parquet,
    read_metadata,
)
from testbed.record.ops import Op

record_values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.none())
keys = st.one_of(st.none(), st.text(max_size=4))


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    """Valid histories: paired client ops of every modelled shape, plus free-form nemesis ops."""
    ops: list[Op] = []
    for process in range(draw(st.integers(0, 4))):
        for _ in range(draw(st.integers(0, 3))):
            f = draw(st.sampled_from(["send", "poll", "drain", "other"]))
            outcome = draw(st.sampled_from(["ok", "fail", "info"]))
            send = {
                "partition": draw(st.integers(0, 3)),
                "key": draw(keys),
                "value": draw(st.integers(0, 2**62)),
            }
            if f == "send":
                invoke: Any = send
                done: Any = (
                    {**send, "offset": draw(st.integers(0, 99))}
                    if outcome == "ok"
                    else draw(st.sampled_from([None, send]))
                )
            elif f == "poll":
                invoke = draw(st.one_of(st.none(), st.just({"partitions": [0, 1]})))
                records = st.fixed_dictionaries(
                    {
                        "partition": st.integers(0, 3),
                        "offset": st.integers(0, 99),
                        "key": keys,
                        "value": record_values,
                    }
                )
                done = draw(st.lists(records, max_size=3)) if outcome == "ok" else None
            elif f == "drain":
                invoke = {"partition": 1}
                records = st.fixed_dictionaries(
                    {"offset": st.integers(0, 99), "key": keys, "value": record_values}
                )
                done = {
                    "partition": 1,
                    "records": draw(st.lists(records, max_size=3)),
                    "end_offset": 7,
                    "complete": draw(st.booleans()),
                }
                done = done if outcome == "ok" else None
            else:
                invoke, done = (
                    draw(st.one_of(st.none(), st.integers())),
                    draw(st.one_of(st.none(), st.text(max_size=3))),
                )
            error = None if outcome == "ok" else draw(st.sampled_from(["TIMEOUT", "NOT_LEADER"]))
            ops.append(Op(len(ops), len(ops) * 10, process, "invoke", f, invoke))
            ops.append(
                Op(
                    len(ops),
                    len(ops) * 10,
                    process,
                    outcome,
                    f,
                    done,
                    error,
                    draw(st.sampled_from([None, "n1"])),
                )
            )  # type: ignore[arg-type]
            if outcome == "info":
                break  # a process whose op ended info never invokes again
    for _ in range(draw(st.integers(0, 2))):
        ops.append(Op(len(ops), len(ops) * 10, "nemesis", "info", "partition", {"grudge": {"n1": ["n2"]}}))
    return ops


def write_history(path: Path, ops: list[Op]) -> None:
    with HistoryWriter(path) as writer:
        for op in ops:
            writer.append(op)


def test_writer_flushes_each_op_before_close(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    writer.append(Op(0, 5, 1, "invoke", "send", {"partition": 0, "key": "k1", "value": 3}))
    lines = path.read_text().splitlines()  # read while the writer is still open
    assert json.loads(lines[0]) == {"format": "tidemark-history", "schema_version": HISTORY_SCHEMA_VERSION}
    assert json.loads(lines[1])["value"] == {"partition": 0, "key": "k1", "value": 3}
    writer.close()
    with HistoryWriter(path) as again:  # reopening appends, without a second header
        again.append(Op(1, 6, 1, "ok", "send", {"partition": 0, "key": "k1", "value": 3, "offset": 0}))
    assert [op.index for op in read_history(path)[0]] == [0, 1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=histories())
def test_parquet_round_trip_restores_every_op(tmp_path: Path, ops: list[Op]) -> None:
    source, target = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    source.unlink(missing_ok=True)
    write_history(source, ops)
    summary = convert_history(source, target)
    assert summary.ops == len(ops)
    assert read_history_parquet(target) == ops
    assert read_metadata(target, "history")["run_id"] == str(summary.run_id)


def _valid_lines() -> list[str]:
    return [
        json.dumps({"format": "tidemark-history", "schema_version": 1}),
        json.dumps(
            {
                "index": 0,
                "time": 1,
                "process": 0,
                "type": "invoke",
                "f": "send",
                "value": {"partition": 0, "key": "k", "value": 1},
            }
        ),
        json.dumps(
            {
                "index": 1,
                "time": 2,
                "process": 0,
                "type": "ok",
                "f": "send",
                "value": {"partition": 0, "key": "k", "value": 1, "offset": 0},
            }
        ),
    ]


@pytest.mark.parametrize(
    ("lines", "line", "reason"),
    [
        ([*_valid_lines()[:2], "{not json", *_valid_lines()[2:]], 3, "Expecting property name"),
        ([*_valid_lines(), '{"index": 2, "time": 3, "pro'], 4, "the last line is incomplete"),
        (
            [
                *_valid_lines(),
                json.dumps({"index": 2, "time": 3, "process": 0, "type": "ok", "f": "poll", "value": []}),
            ],
            4,
            "no pending invoke",
        ),
        (
            [
                *_valid_lines(),
                json.dumps(
                    {
                        "index": 2,
                        "time": 3,
                        "process": 1,
                        "type": "invoke",
                        "f": "send",
                        "value": {"partition": 0, "value": "x"},
                    }
                ),
            ],
            4,
            "integer 'partition' and 'value'",
        ),
        (
            [*_valid_lines(), json.dumps({"index": "2", "time": 3, "process": 0, "type": "ok", "f": "x"})],
            4,
            "'index' must be an integer",
        ),
    ],
)
def test_bad_lines_are_named_by_file_and_line_or_skipped_and_counted(
    tmp_path: Path, lines: list[str], line: int, reason: str
) -> None:
    source = tmp_path / "history.jsonl"
    text = "\n".join(lines)
    source.write_text(text if "incomplete" in reason else text + "\n")
    with pytest.raises(HistoryFormatError) as raised:
        convert_history(source, tmp_path / "history.parquet")
    assert str(raised.value).startswith(f"{source}:{line}: ")
    assert reason in str(raised.value)
    summary = convert_history(source, tmp_path / "history.parquet", skip_bad_lines=True)
    assert [s.line for s in summary.skipped] == [line]
    meta = read_metadata(tmp_path / "history.parquet", "history")
    assert meta["skipped_line_count"] == "1"


def test_wrong_schema_version_is_never_skipped(tmp_path: Path) -> None:
    source = tmp_path / "history.jsonl"
    source.write_text(json.dumps({"format": "tidemark-history", "schema_version": 99}) + "\n")
    for skip in (False, True):
        with pytest.raises(
            HistoryFormatError, match=r"history.jsonl:1: history schema version 99 is not supported"
        ):
            convert_history(source, tmp_path / "history.parquet", skip_bad_lines=skip)


def test_parquet_with_wrong_version_or_kind_is_refused(tmp_path: Path) -> None:
    source, target = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    source.write_text("\n".join(_valid_lines()) + "\n")
    convert_history(source, target)
    table = pq.read_table(target)
    meta = dict(table.schema.metadata)
    meta[b"tidemark.schema_version"] = b"2"
    pq.write_table(table.replace_schema_metadata(meta), target)
    with pytest.raises(HistoryFormatError, match="schema version '2' is not supported"):
        read_history_parquet(target)
    with pytest.raises(HistoryFormatError, match="not a Tidemark replicas file"):
        read_metadata(target, "replicas")


def test_missing_history_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(HistoryFormatError, match=r"history\.jsonl: no such history file"):
        convert_history(tmp_path / "history.jsonl", tmp_path / "history.parquet")
