"""The runner's last step: the record finishes itself, then the checker reads it.

``finish_run`` runs after every run, a failed one too; here on run directories written the way a
run writes them (JSON lines, dumps, event logs), without Docker.
"""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

from checker.definitions import HW_REGRESSION
from harness.run.runner import finish_run
from testbed.record.rundir import RunDir
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run

TABLES = ("history.parquet", "replicas.parquet", "replica_partitions.parquet", "events.parquet")


def raw_run(run_dir: Path) -> RunDir:
    write_invariant_run(run_dir, InvariantPlan(seed=11, plant=((HW_REGRESSION, 1),)))
    for table in TABLES:
        (run_dir / table).unlink(missing_ok=True)
    return RunDir(run_dir)


def test_a_campaign_run_is_finished_but_not_checked(tmp_path: Path) -> None:
    run_dir = raw_run(tmp_path / "run")
    outcome = finish_run(run_dir, None, [], io.StringIO())
    assert outcome.results is None and outcome.problems == []
    assert all((run_dir.path / table).is_file() for table in TABLES)
    assert json.loads(run_dir.run_file.read_text(encoding="utf-8")) == {"problems": [], "finished": True}
    assert not run_dir.results.exists()


def test_a_run_is_finished_then_checked(tmp_path: Path) -> None:
    run_dir = raw_run(tmp_path / "run")
    outcome = finish_run(run_dir, "pandas", [], io.StringIO())
    assert outcome.results is not None and HW_REGRESSION in outcome.results["anomalies"]
    assert run_dir.results.is_file()


def test_a_history_that_cannot_be_finished_is_a_problem_named_with_its_line(tmp_path: Path) -> None:
    run_dir = raw_run(tmp_path / "run")
    with run_dir.history_jsonl.open("a", encoding="utf-8") as history:
        history.write("garbage\n")
    out = io.StringIO()
    outcome = finish_run(run_dir, "pandas", ["drain incomplete"], out)
    assert outcome.results is None
    assert outcome.problems[0] == "drain incomplete"
    assert outcome.problems[1].startswith(f"not checked: {run_dir.history_jsonl}:")
    assert "problem: not checked:" in out.getvalue()
    assert json.loads(run_dir.run_file.read_text(encoding="utf-8"))["problems"] == outcome.problems


def test_a_spark_connect_server_gone_leaves_the_run_stored_and_says_so(tmp_path: Path) -> None:
    """A hunt's run checked through the hunt's server (``--remote``) when nothing answers there any
    more: the run is finished and unchecked, the problem names the address (run.json too)."""
    run_dir = raw_run(tmp_path / "run")
    with socket.socket() as silent:  # bound, not listening: refused
        silent.bind(("127.0.0.1", 0))
        address = f"sc://127.0.0.1:{silent.getsockname()[1]}"
        outcome = finish_run(run_dir, "spark", [], io.StringIO(), remote=address)
    assert outcome.results is None and not run_dir.results.exists()
    (problem,) = outcome.problems
    assert problem.startswith(f"not checked: no Spark Connect server answers at {address} (")
    assert json.loads(run_dir.run_file.read_text(encoding="utf-8"))["problems"] == outcome.problems
    assert all((run_dir.path / table).is_file() for table in TABLES)
