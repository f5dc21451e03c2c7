"""``events.parquet`` from a run's collected event logs (``testbed.record.event_table``).

The logs are written by the broker's own writer (``broker_impl.events.EventLog``), so the table is
tested on the format as it is produced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from broker_impl.events import BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE, FORMAT, SCHEMA_VERSION, EventLog
from testbed.record.event_table import build_events, events_table_stale, expected_logs
from testbed.record.history import read_metadata
from testbed.record.rundir import RunDir


def _log(run_dir: Path, node: str, node_id: int, file_name: str = BROKER_EVENTS_FILE) -> EventLog:
    log = EventLog(run_dir / "nodes" / node / file_name, node_id)
    log.emit("start", format=FORMAT, schema_version=SCHEMA_VERSION, role="broker")
    return log


def _run(tmp_path: Path, nodes: list[str]) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "test.json").write_text(json.dumps({"schema_version": 1, "nodes": nodes}))
    return run_dir


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(RunDir(run_dir).events).to_pylist()
    return rows


def test_every_event_is_a_row_with_its_fields_projected(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, ["n1"])
    broker = _log(run_dir, "n1", 1)
    common = {"topic": "t", "partition": 0}
    broker.emit(
        "replica-opened",
        **common,
        leo=5,
        hw=3,
        checkpointed_hw=3,
        log_start=0,
        epochs=[[0, 0], [2, 4]],
        dropped_bytes=0,
    )
    broker.emit(
        "become-follower",
        **common,
        leader=-1,
        epoch=3,
        partition_epoch=3,
        replicas=[1],
        isr=[1],
        leo=5,
        hw=3,
        previous_role="none",
        previous_epoch=-1,
    )
    broker.emit(
        "hw",
        **common,
        role="leader",
        epoch=3,
        old_hw=3,
        new_hw=4,
        leo=5,
        isr=[1, 2],
        pending_isr=None,
        min_isr=2,
        epoch_start=5,
    )
    broker.emit(
        "truncate",
        **common,
        role="follower",
        epoch=3,
        leader=2,
        reason="leader-epoch",
        target=4,
        old_leo=5,
        new_leo=4,
        old_hw=4,
        new_hw=4,
        queried_epoch=2,
        answer_epoch=2,
        answer_end_offset=4,
        complete=True,
    )
    broker.emit(
        "shutdown",
        partitions=[
            {"topic": "t", "partition": 0, "role": "follower", "epoch": 3, "leo": 4, "hw": 4},
            {"topic": "t", "partition": 1, "role": "leader", "epoch": 1, "leo": 7, "hw": 7},
        ],
    )
    broker.close()
    controller = _log(run_dir, "controller", 3000, CONTROLLER_EVENTS_FILE)
    controller.emit(
        "topic-created",
        metadata_version=1,
        topic="t",
        topic_id="x",
        partitions=[
            {"partition": 0, "replicas": [1, 2], "leader": 1, "epoch": 0, "isr": [1, 2]},
            {"partition": 1, "replicas": [1, 2], "leader": 2, "epoch": 0, "isr": [2]},
        ],
    )
    controller.emit(
        "election",
        metadata_version=2,
        cause="broker-fenced",
        broker=1,
        **common,
        old_leader=1,
        new_leader=2,
        old_epoch=0,
        new_epoch=1,
        partition_epoch=1,
        replicas=[1, 2],
        old_isr=[1, 2],
        new_isr=[2],
        old_elr=[],
        new_elr=[],
        alive=[2],
        how="isr",
    )
    controller.close()
    summary = build_events(run_dir)
    assert summary.missing_logs == {} and summary.logs == {"n1": "broker", "controller": "controller"}
    rows = _rows(run_dir)
    assert len(rows) == summary.rows == 5 + 2 + 1 + 2 + 1  # shutdown and topic-created: a row per partition
    assert len({row["run_id"] for row in rows}) == 1
    by = {(row["node_name"], row["kind"], row["partition"]): row for row in rows}
    opened = by[("n1", "replica-opened", 0)]
    assert (opened["leo"], opened["hw"], opened["lineage_epoch"], opened["process"]) == (5, 3, 2, "broker")
    assert by[("n1", "become-follower", 0)]["role"] == "none"  # no leader: the replica's role is none
    hw = by[("n1", "hw", 0)]
    assert (hw["hw"], hw["old_hw"], hw["isr"], hw["min_isr"], hw["role"]) == (4, 3, [1, 2], 2, "leader")
    cut = by[("n1", "truncate", 0)]
    assert (cut["leo"], cut["old_leo"], cut["hw"], cut["reason"], cut["queried_epoch"]) == (
        4,
        5,
        4,
        "leader-epoch",
        2,
    )
    assert by[("n1", "shutdown", 1)]["role"] == "leader" and by[("n1", "shutdown", 1)]["leo"] == 7
    created = by[("controller", "topic-created", 1)]
    assert (created["leader"], created["isr"], created["process"]) == (2, [2], "controller")
    election = by[("controller", "election", 0)]
    assert (election["leader"], election["epoch"], election["isr"]) == (2, 1, [2])
    assert json.loads(election["line"])["how"] == "isr" and election["ts"] > 0
    assert by[("n1", "start", None)]["topic"] is None


def test_missing_damaged_torn_and_gapped_logs_are_named_in_the_metadata(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, ["n1", "n2", "n3", "n4"])
    _log(run_dir, "n1", 1).close()
    torn = _log(run_dir, "n2", 2)
    torn.emit("hw", topic="t", partition=0)
    torn.close()
    path = RunDir(run_dir).broker_events("n2")
    whole = path.read_text().splitlines()
    path.write_bytes(path.read_bytes()[:-10])  # a power loss cut the last line
    damaged = RunDir(run_dir).broker_events("n3")
    damaged.parent.mkdir(parents=True)
    damaged.write_text("\n".join([whole[0], "garbage", whole[1]]) + "\n")  # no crash explains it
    gapped = _log(run_dir, "controller", 3000, CONTROLLER_EVENTS_FILE)
    gapped._sequence += 2  # two events lost to failed writes
    gapped.emit("broker-fenced", broker=1)
    gapped.close()
    assert expected_logs(run_dir) == {
        "n1": "broker",
        "n2": "broker",
        "n3": "broker",
        "n4": "broker",
        "controller": "controller",
    }
    summary = build_events(run_dir)
    meta = read_metadata(RunDir(run_dir).events, "events")
    missing = json.loads(meta["missing_logs"])
    assert missing["n4"] == f"no {BROKER_EVENTS_FILE}"
    assert missing["n3"].startswith("damaged event log: ") and f"{damaged}:2: not an event" in missing["n3"]
    assert sorted(missing) == ["n3", "n4"] == sorted(summary.missing_logs)
    assert json.loads(meta["torn_lines"]) == {"n2": [2]}
    assert json.loads(meta["seq_gaps"]) == {"controller": [[1, 3]]}
    assert {row["node_name"] for row in _rows(run_dir)} == {"n1", "n2", "controller"}


def test_without_a_controller_log_the_harness_name_is_reported_missing(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, ["n1"])
    _log(run_dir, "n1", 1).close()
    assert build_events(run_dir).missing_logs == {"controller": f"no {CONTROLLER_EVENTS_FILE}"}


def test_the_table_is_rebuilt_only_when_a_log_is_newer(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, ["n1"])
    _log(run_dir, "n1", 1).close()
    assert events_table_stale(run_dir)
    build_events(run_dir)
    assert not events_table_stale(run_dir)
    later = RunDir(run_dir).events.stat().st_mtime_ns + 10**9
    os.utime(RunDir(run_dir).broker_events("n1"), ns=(later, later))
    assert events_table_stale(run_dir)
