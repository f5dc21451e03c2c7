"""``tidemark check`` / ``tidemark analyze`` / ``tidemark history``: exit codes, outputs, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.cli.main import main
from tests.checker.synthetic import Plan, write_run


def test_valid_invalid_and_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "clean", Plan(seed=1))
    write_run(tmp_path / "lossy", Plan(seed=2, plant=(("lost-write", 2),), acks="1"))
    assert main(["check", str(tmp_path / "clean")]) == 0
    assert json.loads((tmp_path / "clean" / "results.json").read_text())["valid"] is True
    capsys.readouterr()
    assert main(["check", str(tmp_path / "lossy"), "--json"]) == 1
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed["anomalies"]["lost-write"] | {"examples": None} == {
        "count": 2,
        "expected": True,
        "rule": "acks=1",
        "severity": "error",
        "examples": None,
    }
    assert "lost-write x2, expected: acks=1" in captured.err


def test_batch_writes_results_per_run_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "camp" / "a", Plan(seed=1))
    write_run(tmp_path / "camp" / "b", Plan(seed=2, plant=(("duplicate", 1),)))
    assert main(["check", str(tmp_path / "camp"), "--engine", "pandas"]) == 1
    rows = pq.read_table(tmp_path / "camp" / "check-summary.parquet").to_pylist()
    assert sorted((r["valid"], r["duplicate"]) for r in rows) == [("false", 1), ("true", 0)]
    assert all((tmp_path / "camp" / name / "results.json").is_file() for name in "ab")
    assert "Tidemark check: 2 run(s)" in capsys.readouterr().out


def test_skip_bad_lines_counts_them_and_never_says_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, Plan(seed=3))
    history = tmp_path / "history.jsonl"
    history.write_text(history.read_text() + '{"index": 9999, "ti')
    assert main(["check", str(tmp_path)]) == 254
    err = capsys.readouterr().err
    line = len(history.read_text().splitlines())
    assert (
        f"history.jsonl:{line}: " in err and "the last line is incomplete" in err and "Traceback" not in err
    )
    assert main(["check", str(tmp_path), "--skip-bad-lines"]) == 2
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["valid"] == "unknown" and result["stats"]["skipped_lines"] == 1
    assert result["incomplete"] == ["1 bad history line(s) skipped"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "test.json").unlink(), "no run directory (a directory holding test.json)"),
        (lambda d: (d / "history.jsonl").unlink(), "no history.jsonl or history.parquet"),
        (
            lambda d: (d / "test.json").write_text('{"schema_version": 7}'),
            "test.json: schema_version 7 is not supported",
        ),
        (lambda d: (d / "test.json").write_text("{"), "test.json: not valid JSON"),
        (
            lambda d: (d / "history.jsonl").write_text(
                '{"format": "tidemark-history", "schema_version": 3}\n'
            ),
            "history.jsonl:1: history schema version 3 is not supported",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_254(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, message
) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    write_run(run_dir, Plan(seed=4))
    damage(run_dir)
    assert main(["check", str(run_dir)]) == 254
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_unknown_check_name_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, Plan(seed=5))
    assert main(["check", str(tmp_path), "--checks", "lost-write,bogus"]) == 254
    assert "unknown check(s) bogus" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--checks", "lost-write"]) == 2  # a subset never proves valid


def test_analyze_and_history_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, Plan(seed=6, plant=(("unexpected", 1),)))
    assert main(["history", "convert", str(tmp_path)]) == 0
    assert (tmp_path / "history.parquet").is_file()
    assert main(["analyze", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "results.json").read_text())["anomalies"]["unexpected"]["count"] == 1
    assert main(["history", "convert", str(tmp_path / "nope.jsonl")]) == 254
    assert "nope.jsonl: no such history file" in capsys.readouterr().err


def test_liveness_flags_decide_the_stall_severity_and_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planted 30 s gap: a warning by default, invalid with --liveness strict, gone above it."""
    write_run(tmp_path, Plan(seed=8, partitions=1, plant=(("stalled", 1),)))
    assert main(["check", str(tmp_path)]) == 0
    assert "stalled x1 (warning)" in capsys.readouterr().out
    assert main(["check", str(tmp_path), "--liveness", "strict"]) == 1
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["anomalies"]["stalled"]["severity"] == "error" and result["liveness"]["mode"] == "strict"
    assert main(["check", str(tmp_path), "--liveness", "strict", "--stall-threshold", "31"]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["liveness"]["stall_threshold_s"] == 31.0
    assert main(["check", str(tmp_path), "--stall-threshold", "0"]) == 254
    assert "--stall-threshold" in capsys.readouterr().err
