"""The packed store (:mod:`checker.pack`, :mod:`checker.packed_runs`, :mod:`testbed.record.packed`).

What it promises: a check of a packed store writes every run's ``results.json`` byte for byte as a
check of the run directories does (both engines; the Spark one in ``tests/checker/spark``); the
packed files are Spark's bucketed layout (every run in the file of its ``pmod(hash(run_id), B)``);
packing verifies the packed rows against the run directories, and so does ``store verify`` later,
naming the run that differs; runs that cannot share one store are refused by name.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from checker.api import check_runs, load_runs
from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    DUPLICATE,
    HW_REGRESSION,
    ISR_DIVERGENCE,
    LOST_WRITE,
    STALLED,
)
from checker.engine import Engine
from checker.pack import PackError, pack_runs, verify_pack
from checker.packed_runs import load_packed, read_index, run_dir_of, stored_run_dir
from checker.pandas.engine import PandasEngine
from testbed.record.packed import HISTORY, INDEX_FILE, REPLICAS, bucket_of, packed_buckets, spark_hash_long
from testbed.record.rundir import RunDir
from tests.checker.contract_cases import CASES, write_case
from tests.checker.invariant_runs import InvariantPlan, write_invariant_run
from tests.checker.synthetic import PLANTABLE, Plan, write_run


def write_runs(root: Path) -> list[Path]:
    """Runs of every kind the checker tells apart: planted anomalies of each kind, event logs with
    planted white-box violations, and contract cases (damaged dumps, skipped evidence, ...)."""
    dirs = []
    for number, kind in enumerate(PLANTABLE):
        run_dir = root / f"plain-{number:02d}"
        write_run(run_dir, Plan(seed=500 + number, partitions=2, plant=((kind, 1),)))
        dirs.append(run_dir)
    for number, kinds in enumerate((((HW_REGRESSION, 1),), ((ISR_DIVERGENCE, 2),), ())):
        run_dir = root / f"events-{number}"
        write_invariant_run(run_dir, InvariantPlan(seed=900 + number, plant=kinds))
        dirs.append(run_dir)
    for number, case in enumerate(CASES[:12]):
        if case.skip_bad_lines:
            continue
        run_dir = root / f"case-{number:02d}"
        write_case(run_dir, case)
        dirs.append(run_dir)
    return dirs


def checked_bytes(dirs: list[Path], engine: Engine, packed: Path | None = None) -> dict[Path, bytes]:
    """Each run's ``results.json`` after checking the run directories, or the packed store."""
    for run_dir in dirs:
        RunDir(run_dir).results.unlink(missing_ok=True)
    runs = load_packed(packed) if packed is not None else load_runs(dirs)
    check_runs(runs, engine, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    return {run_dir: RunDir(run_dir).results.read_bytes() for run_dir in dirs}


def packed_store(tmp_path: Path) -> tuple[list[Path], Path]:
    dirs = write_runs(tmp_path / "runs")
    out = tmp_path / "packed"
    pack_runs(load_runs(dirs), out, cores=2)
    return dirs, out


def test_a_packed_store_checks_as_its_run_directories(tmp_path: Path) -> None:
    dirs, out = packed_store(tmp_path)
    direct = checked_bytes(dirs, PandasEngine())
    assert checked_bytes(dirs, PandasEngine(), out) == direct
    found = b"".join(direct.values())
    for kind in (LOST_WRITE, DUPLICATE, STALLED, ISR_DIVERGENCE, HW_REGRESSION):
        assert f'"{kind}"'.encode() in found, kind


def test_every_run_is_in_the_file_of_its_bucket_as_whole_row_groups(tmp_path: Path) -> None:
    dirs, out = packed_store(tmp_path)
    runs = load_packed(out)
    assert {run.run_dir for run in runs} == {run_dir.absolute() for run_dir in dirs}
    for run in runs:
        for path, rows, run_id in (
            (run.history_path, run.history_slice, run.history_run_id),
            (run.replicas_path, run.replicas_slice, run.replicas_run_id),
        ):
            if path is None or rows is None or run_id is None:
                continue
            buckets = packed_buckets(path)
            assert path.name.endswith(f"_{bucket_of(run_id, buckets):05d}.c000.parquet")
            footer = pq.read_metadata(path)
            column = footer.schema.names.index("run_id")
            for group in rows.row_groups:
                stats = footer.row_group(group).column(column).statistics
                assert (stats.min, stats.max) == (run_id, run_id)
            assert sum(footer.row_group(group).num_rows for group in rows.row_groups) == rows.rows
    # Sorted by run id within each file: a filtered read of one run touches its row groups only.
    for table in (HISTORY, REPLICAS):
        for path in (out / table).glob("*.parquet"):
            ids = pq.read_table(path, columns=["run_id"])["run_id"]
            assert pc.all(pc.greater_equal(ids[1:], ids[:-1])).as_py() if len(ids) > 1 else True


def test_the_hash_is_murmur3_of_a_long() -> None:
    # Values from Spark 3.5: SELECT hash(CAST(v AS BIGINT)) (the Spark test checks many more).
    assert spark_hash_long(0) == -1670924195
    assert spark_hash_long(1) == -1712319331
    assert all(-(2**31) <= spark_hash_long(v) < 2**31 for v in (2**63 - 1, -(2**63), -1, 123456789012345))
    assert all(0 <= bucket_of(v, 7) < 7 for v in (-5, 0, 5, 2**62))


def test_verification_names_the_run_whose_packed_rows_differ(tmp_path: Path) -> None:
    dirs, out = packed_store(tmp_path)
    assert verify_pack(out) == len(dirs)
    victim = load_packed(out)[3]
    assert victim.history_slice is not None
    path = victim.history_path
    footer = pq.read_metadata(path)
    sizes = [footer.row_group(group).num_rows for group in range(footer.num_row_groups)]
    table = pq.read_table(path)
    times = table["time"].to_pylist()
    times[victim.history_slice.first_row] += 1  # one op's time, one nanosecond later
    tampered = table.set_column(table.schema.get_field_index("time"), "time", [times])
    # Rewritten with the same row groups: the index still fits, only the content differs.
    with pq.ParquetWriter(path, tampered.schema) as writer:
        offset = 0
        for size in sizes:
            writer.write_table(tampered.slice(offset, size))
            offset += size
    with pytest.raises(
        PackError, match=re.escape(f"{victim.run_dir}: history rows packed in {path.name} differ")
    ):
        verify_pack(out)


def test_a_copied_run_directory_is_refused_by_name(tmp_path: Path) -> None:
    first = tmp_path / "runs" / "first"
    write_run(first, Plan(seed=7))
    load_runs([first])  # its Parquet files written (converted afresh, a copy would get its own run id)
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(first, copy)
    with pytest.raises(PackError, match=r"copy: .* also .*first"):
        pack_runs(load_runs([first, copy]), tmp_path / "packed")
    assert not (tmp_path / "packed" / INDEX_FILE).exists()


def test_a_store_moved_with_its_runs_still_names_them(tmp_path: Path) -> None:
    dirs, out = packed_store(tmp_path / "before")
    named = [str(row["run_dir"]) for row in read_index(out)]
    assert sorted(named) == sorted(f"../runs/{run_dir.name}" for run_dir in dirs)
    shutil.move(tmp_path / "before", tmp_path / "after")
    moved = tmp_path / "after" / "packed"
    assert verify_pack(moved) == len(dirs)  # the run directories' files are found where they now are
    assert {run.run_dir for run in load_packed(moved)} == {tmp_path / "after" / "runs" / d.name for d in dirs}


def test_runs_with_only_the_root_in_common_with_the_store_are_named_absolute() -> None:
    store = Path("/tmp/campaign/packed")
    assert stored_run_dir(Path("/srv/runs/r1"), store) == "/srv/runs/r1"
    assert stored_run_dir(Path("/tmp/campaign/runs/r1"), store) == "../runs/r1"
    assert run_dir_of({"run_dir": "../runs/r1"}, store) == Path("/tmp/campaign/runs/r1")
    assert run_dir_of({"run_dir": "/srv/runs/r1"}, store) == Path("/srv/runs/r1")
