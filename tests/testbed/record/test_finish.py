"""The record finishes itself: a run's files become its tables here, and a finished record is only read.

Also: ``test.json`` has one schema version, owned by the record (:mod:`testbed.record.rundir`).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from harness.run import spec as harness_spec
from testbed.record import rundir
from testbed.record.finish import EVENT_LOG_SETTING, event_logs_absent, finish_history, finish_record
from testbed.record.history import HistoryFormatError, read_metadata
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("broker_impl", "checker", "harness", "nemesis", "testbed", "workloads", "bench")


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file below the run directory: (size, mtime in ns)."""
    return {
        str(path.relative_to(run_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(run_dir.rglob("*"))
        if path.is_file()
    }


def test_a_run_written_as_it_went_gets_every_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=3))
    for table in ("history.parquet", "replicas.parquet", "replica_partitions.parquet", "events.parquet"):
        (run_dir / table).unlink(missing_ok=True)
    finished = finish_record(run_dir)
    assert finished.history == run_dir / "history.parquet"
    assert finished.replicas == run_dir / "replicas.parquet"
    assert finished.events == run_dir / "events.parquet"
    assert read_metadata(finished.history, "history")["skipped_line_count"] == "0"
    assert (run_dir / "replica_partitions.parquet").is_file()
    assert json.loads(read_metadata(finished.events, "events")["missing_logs"]) == {}


def test_a_finished_record_is_only_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=4))
    finish_record(run_dir)
    before = snapshot(run_dir)
    finish_record(run_dir)
    assert snapshot(run_dir) == before


def test_a_history_changed_after_its_table_is_converted_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=5))
    parquet = finish_history(run_dir)
    old_id = read_metadata(parquet, "history")["run_id"]
    jsonl = run_dir / "history.jsonl"
    newer = parquet.stat().st_mtime_ns + 1_000_000_000
    os.utime(jsonl, ns=(newer, newer))
    assert read_metadata(finish_history(run_dir), "history")["run_id"] != old_id


def test_no_history_at_all_names_the_run_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "test.json").write_text("{}", encoding="utf-8")
    with pytest.raises(HistoryFormatError) as caught:
        finish_record(run_dir)
    assert str(caught.value) == f"{run_dir}: no history.jsonl or history.parquet"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"broker_config": {EVENT_LOG_SETTING: "true"}}, None),
        ({"broker_config": {EVENT_LOG_SETTING: "false"}}, f"no broker event logs: {EVENT_LOG_SETTING}=false"),
        ({"broker_config": {}}, "stored before event logs"),
        ({"replica_evidence": "single-store: PostgreSQL"}, "no broker event logs: PostgreSQL"),
        ({"replica_evidence": "none"}, "no broker event logs: replica evidence none"),
    ],
)
def test_which_runs_keep_event_logs(spec: dict[str, object], reason: str | None) -> None:
    found = event_logs_absent(spec)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_a_run_without_event_logs_gets_no_event_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=6, broker_config=((EVENT_LOG_SETTING, "false"),)))
    (run_dir / "events.parquet").unlink(missing_ok=True)
    assert finish_record(run_dir).events is None
    assert not (run_dir / "events.parquet").exists()


def test_test_json_has_one_schema_version_owned_by_the_record() -> None:
    assert harness_spec.SPEC_SCHEMA_VERSION is rundir.SPEC_SCHEMA_VERSION
    defined = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                for target in targets:
                    if isinstance(target, ast.Name) and "SPEC" in target.id and "VERSION" in target.id:
                        defined.append(f"{path.relative_to(ROOT)}:{target.id}")
    assert defined == ["testbed/record/rundir.py:SPEC_SCHEMA_VERSION"]
