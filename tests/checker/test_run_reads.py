"""The reads of one stored run (:mod:`checker.run_reads`): a run reads alike from its own file and
from its slice of a packed file, rows at positions are the rows there, and dictionary columns come
back as the strings stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checker.engine import HISTORY_ROW_COLUMNS
from checker.run_reads import joined, plain, read_rows, read_run_rows, read_run_table, read_runs, rows_of_ops
from testbed.record.packed import RowSlice
from tests.checker.stored_runs import small_store


def test_a_run_reads_alike_from_its_file_and_from_its_packed_slice(tmp_path: Path) -> None:
    direct, packed = small_store(tmp_path)
    for own, slice_of in zip(direct, packed, strict=True):
        assert slice_of.history_slice is not None
        mine = plain(read_run_table(own.history_path, None, HISTORY_ROW_COLUMNS))
        theirs = plain(read_run_table(slice_of.history_path, slice_of.history_slice, HISTORY_ROW_COLUMNS))
        if sum(run.history_path == slice_of.history_path for run in packed) > 1:
            assert theirs.num_rows < pq.read_metadata(slice_of.history_path).num_rows, "its slice alone"
        assert theirs.equals(mine)
        positions = np.array([0, 3, mine.num_rows - 1], dtype=np.int64)
        rows = read_run_rows(slice_of.history_path, slice_of.history_slice, positions, ["run_id", "index"])
        assert rows.to_pylist() == mine.select(["run_id", "index"]).take(pa.array(positions)).to_pylist()


def test_several_runs_read_together_are_their_reads_one_after_another(tmp_path: Path) -> None:
    direct, packed = small_store(tmp_path)
    located = [(run.history_path, run.history_slice) for run in packed]
    assert len({path for path, _ in located}) < len(located), "some runs share a packed file"
    # Packed runs in the index's order, then backwards (a file's runs not in its order), a run
    # directory between them, and a run without rows.
    first = packed[0].history_slice
    assert first is not None
    empty = (packed[0].history_path, RowSlice(first.first_group, 0, first.first_row, 0))
    orders = [
        located,
        located[::-1],
        [located[0], (direct[1].history_path, None), *located[1:], empty],
    ]
    for order in orders:
        expected = pa.concat_tables([read_run_table(path, rows, HISTORY_ROW_COLUMNS) for path, rows in order])
        together = read_runs(order, HISTORY_ROW_COLUMNS)
        assert plain(together).equals(plain(expected))
        assert together.column_names == list(HISTORY_ROW_COLUMNS)


def test_rows_at_positions_are_read_across_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"n": list(range(10)), "s": [f"v{i % 3}" for i in range(10)]}), path, row_group_size=3
    )
    rows = read_rows(path, np.array([1, 4, 5, 9], dtype=np.int64), ["n", "s"], dictionaries=["s"])
    assert pa.types.is_dictionary(rows.schema.field("s").type)
    assert plain(rows).to_pydict() == {"n": [1, 4, 5, 9], "s": ["v1", "v1", "v2", "v0"]}
    assert read_rows(path, np.zeros(0, dtype=np.int64), ["n"]).num_rows == 0


def test_rows_of_ops_finds_every_row_of_each_op_in_order_or_not() -> None:
    wanted = np.array([2, 5], dtype=np.int64)
    ordered = np.array([1, 2, 2, 3, 5, 5, 5, 6], dtype=np.int64)
    assert rows_of_ops(ordered, wanted).tolist() == [1, 2, 4, 5, 6]
    shuffled = np.array([5, 1, 2, 6, 5, 2], dtype=np.int64)
    assert rows_of_ops(shuffled, wanted).tolist() == [0, 2, 4, 5]


def test_joined_decodes_files_whose_dictionaries_differ() -> None:
    one = pa.table({"s": pa.array(["a", "b"]).dictionary_encode()})
    other = pa.table({"s": pa.array(["c", "a"]).dictionary_encode()})
    plain_strings = pa.table({"s": pa.array(["d"])})
    assert joined([one, other]).column("s").to_pylist() == ["a", "b", "c", "a"]
    assert joined([one, plain_strings]).column("s").to_pylist() == ["a", "b", "d"]
    assert joined([one, other]).schema.field("s").type == pa.string()
