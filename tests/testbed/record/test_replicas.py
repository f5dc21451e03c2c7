"""Replica dumps to replicas.parquet: every record kept, missing or failed nodes recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from testbed.record.history import HistoryFormatError, read_metadata
from testbed.record.replicas import build_replicas, value_as_int
from testbed.record.rundir import REPLICA_PARTITIONS_FILE, REPLICAS_FILE


def _dump(run_dir: Path, node: str, lines: list[dict[str, Any]]) -> None:
    (run_dir / "nodes" / node).mkdir(parents=True, exist_ok=True)
    (run_dir / "nodes" / node / "dump.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _record(offset: int, value: str | None, topic: str = "queue") -> dict[str, Any]:
    return {
        "type": "record",
        "topic": topic,
        "partition": 0,
        "offset": offset,
        "leader_epoch": 2,
        "key": "k1",
        "value": value,
    }


PARTITION = {
    "type": "partition",
    "topic": "queue",
    "partition": 0,
    "high_watermark": 2,
    "log_end_offset": 3,
    "log_start_offset": 0,
    "epochs": [[0, 0], [2, 1]],
}


def test_dumps_become_rows_with_integer_values_and_partition_state(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text(json.dumps({"nodes": ["n1", "n2"]}))
    _dump(tmp_path, "n1", [_record(0, "17"), _record(1, "base64:/w=="), _record(2, None), PARTITION])
    _dump(tmp_path, "n2", [_record(0, "17"), PARTITION])
    summary = build_replicas(tmp_path)
    assert summary.missing_nodes == {}
    rows = pq.read_table(tmp_path / REPLICAS_FILE).to_pylist()
    assert [(r["node"], r["offset"], r["value"], r["value_int"], r["leader_epoch"]) for r in rows] == [
        ("n1", 0, "17", 17, 2),  # sorted by position: the replicas of one offset sit together
        ("n2", 0, "17", 17, 2),
        ("n1", 1, "base64:/w==", None, 2),
        ("n1", 2, None, None, 2),
    ]
    assert rows[0]["record_id"] == rows[1]["record_id"] != rows[2]["record_id"]
    assert [r["node_index"] for r in rows] == [0, 1, 0, 0]
    assert all(r["run_id"] == summary.run_id for r in rows)
    state = pq.read_table(tmp_path / REPLICA_PARTITIONS_FILE).to_pylist()
    assert (
        state[0]["high_watermark"] == 2
        and state[0]["log_end_offset"] == 3
        and json.loads(state[0]["epochs"]) == [[0, 0], [2, 1]]
    )
    assert read_metadata(tmp_path / REPLICAS_FILE, "replicas")["missing_nodes"] == "{}"


def test_missing_failed_and_empty_dumps_are_recorded_not_raised(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text(json.dumps({"nodes": ["n1", "n2", "n3", "n4"]}))
    _dump(tmp_path, "n1", [_record(0, "1"), PARTITION])
    (tmp_path / "nodes" / "n2").mkdir(parents=True)
    (tmp_path / "nodes" / "n2" / "dump.error").write_text("exec failed: container is gone\n")
    _dump(tmp_path, "n3", [])
    summary = build_replicas(tmp_path)
    assert summary.missing_nodes == {
        "n2": "dump failed: exec failed: container is gone",
        "n3": "dump.jsonl holds no partition lines (empty or cut short)",
        "n4": "no dump.jsonl",
    }
    assert (
        json.loads(read_metadata(tmp_path / REPLICAS_FILE, "replicas")["missing_nodes"])
        == summary.missing_nodes
    )


def test_damaged_dump_names_file_and_line_or_counts_the_node_missing(tmp_path: Path) -> None:
    _dump(tmp_path, "n1", [_record(0, "1"), PARTITION])
    path = tmp_path / "nodes" / "n1" / "dump.jsonl"
    path.write_text(path.read_text() + '{"type": "record", "topic": "queue", "parti')
    with pytest.raises(HistoryFormatError, match=r"n1/dump.jsonl:3: .*the last line is incomplete"):
        build_replicas(tmp_path)
    summary = build_replicas(tmp_path, skip_bad_dumps=True)
    assert "damaged dump" in summary.missing_nodes["n1"]


@pytest.mark.parametrize(
    ("text", "number"),
    [("17", 17), ("-3", -3), ("1.5", None), ("x", None), ("99999999999999999999", None), (None, None)],
)
def test_value_as_int(text: str | None, number: int | None) -> None:
    assert value_as_int(text) == number
