"""One scan per packed file for a pass (:mod:`checker.packed_scan`): pairs match exactly by run,
batches cut at runs, and a scan reads the other columns only of the row groups holding a pick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checker import packed_scan
from checker.packed_scan import Pairs, int_values, scan, scanned
from checker.run_reads import SMALL_FILE_ROWS
from testbed.record.packed import RowSlice


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_pairs_match_a_key_only_in_its_own_run() -> None:
    pairs = Pairs(_ints(7, 7, 3), _ints(1, 2, 5))
    runs = _ints(3, 3, 3, 7, 7, 7, 9, 3)
    keys = _ints(1, 5, 2, 1, 5, 2, 1, 5)
    valid = np.array([True] * 7 + [False])
    assert pairs.holds(runs, keys, valid).tolist() == [False, True, False, True, False, True, False, False]
    assert not Pairs(_ints(), _ints()).holds(runs, keys, valid).any()


def test_pairs_take_any_ids_and_keys_in_any_order() -> None:
    big = 2**62
    pairs = Pairs(_ints(big, -big), _ints(-(2**40), 2**40))
    runs = _ints(-big, big, -big, big, big)
    keys = _ints(2**40, -(2**40), -(2**40), 2**40, 0)
    assert pairs.holds(runs, keys, np.ones(5, dtype=bool)).tolist() == [True, True, False, False, False]


def test_int_values_keep_nulls_apart() -> None:
    values, valid = int_values(pa.chunked_array([[1, None], [2**62]], pa.int64()))
    assert values.tolist() == [1, 0, 2**62]
    assert valid.tolist() == [True, False, True]


def test_batches_cut_at_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packed_scan, "PACKED_SCAN_ROWS", 10)
    runs = [RowSlice(3, 2, 12, 6), RowSlice(0, 1, 0, 4), RowSlice(1, 2, 4, 8), RowSlice(5, 1, 18, 20)]
    assert packed_scan._batches(runs) == [[0], [1, 2], [3, 4], [5]]


def test_only_small_packed_runs_are_scanned() -> None:
    assert scanned(RowSlice(0, 1, 0, SMALL_FILE_ROWS))
    assert not scanned(RowSlice(0, 9, 0, SMALL_FILE_ROWS + 1))
    assert not scanned(None)


def test_a_scan_reads_the_other_columns_of_the_groups_holding_a_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "part-00000_00000.c000.parquet"
    table = pa.table({"run_id": [1] * 4 + [2] * 4, "n": list(range(8)), "s": [f"s{i}" for i in range(8)]})
    pq.write_table(table, path, row_group_size=2)
    read: list[tuple[list[int], list[str]]] = []
    original = pq.ParquetFile.read_row_groups

    def spy(self: pq.ParquetFile, groups: list[int], columns: list[str], **kwargs: object) -> pa.Table:
        read.append((list(groups), list(columns)))
        return original(self, groups, columns=columns, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    slices = [(path, RowSlice(0, 2, 0, 4)), (path, RowSlice(2, 2, 4, 4))]

    def pick(keyed: pa.Table) -> list[np.ndarray]:
        n = keyed["n"].to_numpy()
        return [np.flatnonzero(n == 5), np.flatnonzero((n == 0) | (n == 5))]

    (first, second) = scan(slices, ["n"], pick, [["s"], ["run_id", "n"]])
    assert pa.concat_tables(first).to_pydict() == {"s": ["s5"]}
    assert pa.concat_tables(second).to_pydict() == {"run_id": [1, 2], "n": [0, 5]}
    assert read == [([0, 1, 2, 3], ["n"]), ([0, 2], ["s", "run_id", "n"])]
