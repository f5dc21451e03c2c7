"""``tidemark store pack|verify`` and ``tidemark check PACKED_DIR``: outputs, exit codes, refusals.

Every refusal is one line on stderr naming what and where, exit code 254, no traceback; a check of
a packed store writes each run's ``results.json`` to its run directory and the campaign summary
where a check of the directories would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.cli.main import main
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS
from testbed.record.packed import INDEX_FILE
from tests.checker.synthetic import Plan, write_run
from tests.harness.cli.commands import captured_one_line


def test_pack_verify_and_check_a_packed_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "camp" / "a", Plan(seed=1))
    write_run(tmp_path / "camp" / "b", Plan(seed=2, plant=(("duplicate", 1),)))
    out = tmp_path / "packed"
    assert main(["store", "pack", str(tmp_path / "camp"), "--out", str(out)]) == 0
    assert f"{out}: 2 run(s) in " in capsys.readouterr().out
    assert (out / INDEX_FILE).is_file() and (out / "history").is_dir()
    assert main(["store", "verify", str(out)]) == 0
    assert "2 run(s) match their run directories" in capsys.readouterr().out
    assert main(["check", str(out), "--engine", "pandas"]) == 1
    results = {name: json.loads((tmp_path / "camp" / name / "results.json").read_text()) for name in "ab"}
    assert results["a"]["valid"] is True and results["b"]["anomalies"]["duplicate"]["count"] == 1
    rows = pq.read_table(tmp_path / "camp" / "check-summary.parquet").to_pylist()
    assert len(rows) == 2


def test_refusals_are_one_line_naming_what_and_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main(["store", "pack", str(missing), "--out", str(tmp_path / "p")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, "tidemark store: error:", str(missing))
    write_run(tmp_path / "camp" / "a", Plan(seed=1))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "note.txt").write_text("mine")
    assert main(["store", "pack", str(tmp_path / "camp"), "--out", str(busy)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(busy), "--out exists and is not an empty directory")
    assert (busy / "note.txt").read_text() == "mine"
    assert main(["store", "verify", str(tmp_path / "camp")]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(tmp_path / "camp"), "not a packed store")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / INDEX_FILE).write_text("not parquet")
    assert main(["check", str(fake)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(fake / INDEX_FILE), "not a readable packed store index")


def test_verify_names_a_run_directory_changed_since_packing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "camp" / "a", Plan(seed=1))
    write_run(tmp_path / "camp" / "b", Plan(seed=2))
    out = tmp_path / "packed"
    assert main(["store", "pack", str(tmp_path / "camp"), "--out", str(out)]) == 0
    capsys.readouterr()
    history = tmp_path / "camp" / "b" / "history.parquet"
    table = pq.read_table(history)
    pq.write_table(table.slice(0, table.num_rows - 1).replace_schema_metadata(table.schema.metadata), history)
    assert main(["store", "verify", str(out)]) == EXIT_BAD_ARGUMENTS
    captured_one_line(capsys, str(tmp_path / "camp" / "b"), "history has", "row(s) in the run directory")
