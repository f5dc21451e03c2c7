"""Locating example rows of many small packed runs: one scan per file for a whole pass.

The driver-side fetches (:mod:`checker.fetch`, :mod:`checker.value_details`) read a run's rows a
run at a time, and a run's fixed costs -- opening its file, a read call, a dozen Arrow calls, a
pandas group -- were most of a check of thousands of small runs: every synthetic run of the
bench has planted anomalies, so every run's rows were read, and at 10,000 packed runs of 1 k rows
the example reads took 37-48 s of a 159 s check.  The runs of a packed file are whole row groups
(:mod:`testbed.record.packed`), so here the small runs of a pass are read a file at a time:

* the row groups of the file's runs that have keys, in file order, cut at run boundaries into
  batches of at most :data:`PACKED_SCAN_ROWS` rows (the memory a read holds), one read each;
* first only the key columns (run, index or offset, value, ...); the rows they select are found
  for every run of the batch at once, by exact (run id, key) pairs -- never by a key of another
  run, since the ids of a pass are distinct and a run's rows are its own row groups;
* then the other columns, only of the row groups holding a selected row, and only those rows
  are kept.

Contract: for a run the scan serves, the rows it returns are the rows the per-run read returns
for that run, in the same order (file order); the exact rules of :mod:`checker.example_rules`
run on them unchanged, so the answers -- and ``results.json`` -- are byte-equal.  Runs of more
than :data:`checker.run_reads.SMALL_FILE_ROWS` rows keep their per-run reads, which skip row
groups by their footer statistics: for them the fixed cost per run is nothing next to the rows.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from checker.evidence import RunInput
from checker.run_reads import DICTIONARY_COLUMNS, READ_THREADS, SMALL_FILE_ROWS
from testbed.record.packed import RowSlice, open_packed

PACKED_SCAN_ROWS = 1 << 20
"""Rows of a packed file read at once by a scan: a file of about
:data:`testbed.record.packed.BUCKET_ROWS` rows is one read; a bigger one is read in batches."""

Picker = Callable[[pa.Table], Sequence[npt.NDArray[np.int64]]]
"""From a batch's key columns, the ascending positions of the rows each output table keeps."""


def scanned(located: RowSlice | None) -> bool:
    """Whether a run's rows are read by a file's scan: a small run of a packed file."""
    return located is not None and located.rows <= SMALL_FILE_ROWS


def scanned_history(runs: Sequence[RunInput], keys: pd.DataFrame) -> list[tuple[Path, RowSlice]]:
    """Where the history rows are of the runs that ``keys[run_id]`` name and a scan reads."""
    ids = set(keys["run_id"].tolist())
    return [
        (run.history_path, run.history_slice)
        for run in runs
        if run.history_slice is not None and scanned(run.history_slice) and run.history_run_id in ids
    ]


def scan(
    slices: Iterable[tuple[Path, RowSlice]],
    key_columns: Sequence[str],
    pick: Picker,
    columns: Sequence[Sequence[str]],
) -> list[list[pa.Table]]:
    """For each output ``o``, the ``columns[o]`` of the rows ``pick`` selects for output ``o``,
    in the runs' row groups ``slices`` (every slice of a pass: each file is read once).

    ``pick`` sees ``key_columns`` of a batch of whole runs of one file; one table per output and
    batch with rows, in file order (batches of one file in order, files in first-named order)."""
    by_file: dict[Path, list[RowSlice]] = {}
    for path, located in slices:
        by_file.setdefault(path, []).append(located)
    units = [(path, batch) for path, located in by_file.items() for batch in _batches(located)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        found = list(pool.map(lambda unit: _scan_batch(unit[0], unit[1], key_columns, pick, columns), units))
    return [[tables[output] for tables in found if tables[output].num_rows] for output in range(len(columns))]


def _batches(slices: list[RowSlice]) -> list[list[int]]:
    """The row groups of ``slices`` (runs of one file) in file order, cut at runs into batches of
    at most :data:`PACKED_SCAN_ROWS` rows (a run alone when it is bigger)."""
    batches: list[list[int]] = []
    rows = 0
    for located in sorted(slices, key=lambda at: at.first_row):
        if not batches or rows + located.rows > PACKED_SCAN_ROWS:
            batches.append([])
            rows = 0
        batches[-1].extend(located.row_groups)
        rows += located.rows
    return [batch for batch in batches if batch]


def _scan_batch(
    path: Path, groups: list[int], key_columns: Sequence[str], pick: Picker, columns: Sequence[Sequence[str]]
) -> list[pa.Table]:
    """:func:`scan` of one batch: the key columns read, then the rest of the row groups holding a pick.

    Arrow's own threads doubled the CPU time of such reads (threads here read a batch each)."""
    parquet = open_packed(path, DICTIONARY_COLUMNS)
    keyed = parquet.read_row_groups(groups, columns=list(key_columns), use_threads=False)
    picks = pick(keyed)
    sizes = np.array([parquet.metadata.row_group(g).num_rows for g in groups], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    group_of = [np.searchsorted(starts, rows, side="right") - 1 for rows in picks]
    hit = np.unique(np.concatenate(group_of)) if group_of else np.zeros(0, dtype=np.int64)
    wanted = list(dict.fromkeys(name for names in columns for name in names))
    if len(hit) == 0:
        schema = parquet.schema_arrow
        return [pa.schema([schema.field(name) for name in names]).empty_table() for names in columns]
    table = parquet.read_row_groups([groups[g] for g in hit], columns=wanted, use_threads=False)
    # Rows of the batch to rows of the groups read: each hit group's first row in the table read.
    read_start = np.zeros(len(groups), dtype=np.int64)
    read_start[hit] = np.concatenate([[0], np.cumsum(sizes[hit])[:-1]])
    return [
        table.select(list(names)).take(pa.array(rows - starts[of] + read_start[of]))
        for rows, of, names in zip(picks, group_of, columns, strict=True)
    ]


def int_values(column: pa.ChunkedArray | pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """An integer column as int64 values (nulls as 0) and where it is not null."""
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(pc.fill_null(column, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return values, valid


class Pairs:
    """A set of (run id, key) pairs, matched against a table's columns in numpy.

    Runs and keys are numbered by their sorted distinct values, so a pair is one int64
    (``run number * keys + key number``): exact whatever the ids and keys, with no hash of
    Python objects per row.  The rows of a packed file come run after run, so a run's number is
    looked up once per stretch of its rows, not once per row."""

    def __init__(self, runs: npt.NDArray[np.int64], keys: npt.NDArray[np.int64]) -> None:
        self.runs = np.unique(runs)
        self.keys = np.unique(keys)
        run_number = np.searchsorted(self.runs, runs).astype(np.int64)
        self.codes = np.unique(run_number * len(self.keys) + np.searchsorted(self.keys, keys))

    def holds(
        self, runs: npt.NDArray[np.int64], keys: npt.NDArray[np.int64], valid: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Which rows' (run, key) is a pair of the set (``valid``: the key is not null)."""
        found = np.zeros(len(runs), dtype=bool)
        if not len(runs) or not len(self.codes):
            return found
        starts = np.concatenate([[0], np.flatnonzero(runs[1:] != runs[:-1]) + 1])
        numbers = np.minimum(np.searchsorted(self.runs, runs[starts]), len(self.runs) - 1)
        lengths = np.diff(np.append(starts, len(runs)))
        rows = np.flatnonzero(np.repeat(self.runs[numbers] == runs[starts], lengths) & valid)
        run_number = np.repeat(numbers, lengths)[rows].astype(np.int64)
        key_number = np.minimum(np.searchsorted(self.keys, keys[rows]), len(self.keys) - 1)
        same_key = self.keys[key_number] == keys[rows]
        rows, codes = rows[same_key], run_number[same_key] * len(self.keys) + key_number[same_key]
        at = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        found[rows[self.codes[at] == codes]] = True
        return found
