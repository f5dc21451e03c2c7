"""``anomaly_records.parquet``: every lost and divergent record the checker found, not only the examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from checker.api import check_runs
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, LOST_READ, LOST_WRITE, REPLICA_DIVERGENCE
from checker.driver import write_results
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.records import RECORD_KINDS, read_records
from tests.checker.synthetic import Plan, write_run

MANY = {LOST_WRITE: 12, LOST_READ: 7, REPLICA_DIVERGENCE: 9}
"""More of each than the examples show (``DEFAULT_EXAMPLE_LIMIT``)."""


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("records") / "run"
    planted = write_run(
        run_dir, Plan(seed=3, partitions=2, values_per_partition=16, plant=tuple(MANY.items()))
    )
    assert {kind: planted[kind] for kind in MANY} == MANY
    (result,) = check_runs([load_run(run_dir)], PandasEngine(), ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    return run_dir, result


def test_every_record_of_the_marked_kinds_is_written_not_only_the_examples(
    lossy: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, result = lossy
    records = read_records(run_dir)
    assert records is not None
    assert records.groupby("kind").size().to_dict() == MANY
    for kind in MANY:
        assert result["anomalies"][kind]["count"] == MANY[kind] > len(result["anomalies"][kind]["examples"])
    assert set(records["kind"]) <= RECORD_KINDS


def test_the_records_are_the_checkers_own_findings(lossy: tuple[Path, dict[str, Any]]) -> None:
    """Each example of a lost value names a record; each divergent example's first offset is one."""
    run_dir, result = lossy
    records = read_records(run_dir)
    assert records is not None
    for kind, field in ((LOST_WRITE, "value"), (LOST_READ, "value"), (REPLICA_DIVERGENCE, "offset")):
        mine = records[records["kind"] == kind]
        found = set(zip(mine["partition"].astype(int), mine[field].astype(int), strict=True))
        shown = {(e["partition"], e[field]) for e in result["anomalies"][kind]["examples"]}
        assert shown <= found, kind
        assert mine[field].notna().all() and mine["value" if field == "offset" else "offset"].isna().all()
    assert not records.duplicated().any()


def test_a_clean_run_gets_an_empty_file_and_a_results_file_without_records_removes_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, Plan(seed=4))
    (result,) = check_runs([load_run(run_dir)], PandasEngine(), ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    records = read_records(run_dir)
    assert records is not None and records.empty and result["anomalies"] == {}
    write_results(json.loads((run_dir / "results.json").read_text()), run_dir)  # e.g. an unreadable run's
    assert read_records(run_dir) is None, "no records file may stand beside a results.json it is not from"


def test_records_read_back_with_integer_types(lossy: tuple[Path, dict[str, Any]]) -> None:
    records = read_records(lossy[0])
    assert records is not None
    assert isinstance(records["value"].dtype, pd.Int64Dtype) and isinstance(
        records["offset"].dtype, pd.Int64Dtype
    )
