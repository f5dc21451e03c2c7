"""The checker only reads a finished run: making a run's tables is the record's job
(:mod:`testbed.record.finish`).

Shown two ways: checking a run directory the record finished leaves every file of it as it was
(only ``results.json``, the checker's own verdict, and ``anomaly_records.parquet``, its findings
whole, are added when results are written), and no
module of the checker calls a maker of tables or a Parquet writer except the few that write
something other than a run's evidence, each named here with what it writes.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from checker.api import check_runs
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, HW_REGRESSION
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from testbed.record.finish import finish_record
from testbed.record.rundir import ANOMALY_RECORDS_FILE, RESULTS_FILE
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run
from tests.testbed.record.test_finish import snapshot

CHECKER = Path(__file__).resolve().parents[2] / "checker"

TABLE_WRITERS = frozenset(
    {"convert_history", "build_replicas", "build_events", "write_parquet", "write_table", "ParquetWriter"}
)
"""Calls that make a Parquet table: the record's makers and pyarrow's writers."""
FINISHERS = frozenset({"finish_record", "finish_history", "finish_replicas", "finish_events"})
"""The record's finishing, which the checker's loader calls for a run directory that is not
finished yet (an older or hand-made one): on a finished one it writes nothing."""
OTHER_WRITERS = {
    "pack.py": "the packed store, a store of its own beside the run directories",
    "records.py": "anomaly_records.parquet, the checker's own findings beside its verdict (not evidence)",
    "summary.py": "the summary table ``analyze --summary`` writes where the user asks",
    "synthetic_runs.py": "generated run directories for the benches: a producer of runs, not a reader",
    "synthetic_txn_runs.py": "generated transactional run directories for the benches, as synthetic_runs.py",
}
LOADERS = {"evidence.py", "invariant_evidence.py"}


def _called(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            names.add(name)
    return names


def test_no_checker_module_makes_a_table_of_a_run() -> None:
    writers, finishers = {}, {}
    for path in sorted(CHECKER.rglob("*.py")):
        called = _called(path)
        name = str(path.relative_to(CHECKER))
        if called & TABLE_WRITERS:
            writers[name] = sorted(called & TABLE_WRITERS)
        if called & FINISHERS:
            finishers[name] = sorted(called & FINISHERS)
    assert set(writers) == set(OTHER_WRITERS), writers
    assert set(finishers) <= LOADERS, finishers


def test_checking_a_finished_run_reads_it_and_writes_only_the_verdict(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_invariant_run(run_dir, InvariantPlan(seed=7, plant=((HW_REGRESSION, 1),)))
    finish_record(run_dir)
    before = snapshot(run_dir)
    result = check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
    assert snapshot(run_dir) == before
    check_runs([load_run(run_dir)], PandasEngine(), ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    after = snapshot(run_dir)
    assert set(after) - set(before) == {RESULTS_FILE, ANOMALY_RECORDS_FILE}
    assert {name: after[name] for name in before} == before
    assert HW_REGRESSION in result["anomalies"]


def test_an_unfinished_run_is_finished_by_the_record_and_checks_the_same(tmp_path: Path) -> None:
    finished, raw = tmp_path / "finished", tmp_path / "raw"
    write_invariant_run(finished, InvariantPlan(seed=8, plant=((HW_REGRESSION, 1),)))
    shutil.copytree(finished, raw)
    for table in ("history.parquet", "replicas.parquet", "replica_partitions.parquet", "events.parquet"):
        (raw / table).unlink(missing_ok=True)
    finish_record(finished)
    checked = [
        check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
        for run_dir in (finished, raw)
    ]
    assert (raw / "events.parquet").is_file() and (raw / "history.parquet").is_file()
    assert checked[0]["anomalies"] == checked[1]["anomalies"]
    assert checked[0]["valid"] == checked[1]["valid"]
