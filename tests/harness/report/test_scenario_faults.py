"""A scenario run's pages name the faults its steps injected, not ``faults=-`` (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli.main import main
from tests.checker.synthetic import Plan, write_run


def test_a_scenario_runs_settings_name_its_scripted_faults(tmp_path: Path) -> None:
    run_dir = tmp_path / "store" / "kip101" / "run"
    write_run(run_dir, Plan(seed=1))
    spec_file = run_dir / "test.json"
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec["nemesis"]["faults"] = []
    spec |= {"scenario": "kip101-loss", "scenario_faults": ["kill", "partition"]}
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    assert main(["report", str(tmp_path / "store")]) == 0
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "faults=kill,partition" in page and "faults=-" not in page
    index = (tmp_path / "store" / "index.html").read_text(encoding="utf-8").replace("<wbr>", "")
    (row,) = [line for line in index.splitlines() if line.startswith("<tr class")]
    assert "<td>kill,partition</td><td>kip101-loss</td>" in row, row
