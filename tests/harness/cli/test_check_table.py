"""``tidemark check``'s table in a pipe or a CI log: wide enough to read, not rich's 80 columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from tests.checker.synthetic import Plan, write_run


def test_the_batch_table_keeps_its_headers_on_one_line_without_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for seed in (1, 2):
        write_run(tmp_path / "runs" / f"r{seed}", Plan(seed=seed))
    main(["check", str(tmp_path / "runs"), "--engine", "pandas", "--checks", "lost-write"])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "broker config" in line)
    assert "anomalies (* = expected under config)" in header, out
    assert any("trunc=None acks=all minisr=None" in line for line in out.splitlines()), out
