"""Reading a run's stored rows on the driver: its own Parquet file, or its slice of a packed file.

Every per-run reader of the checker (the example fetches, the pandas engine, the nemesis and
event rows, the counts of small runs) reads one run's table through these functions, so that a
run in its own directory and a run in a packed store (:mod:`testbed.record.packed`) are read
alike.  The contract:

* a run is a file and, for a packed file, a :class:`testbed.record.packed.RowSlice` -- whole
  row groups -- and nothing outside its slice is read (:func:`read_run_table`, :func:`opened`);
* string columns that no filter reads and that repeat a few values (:data:`DICTIONARY_COLUMNS`)
  are read as dictionaries -- the stored encoding -- and decoded only after narrowing
  (:func:`plain`, :func:`joined`, :func:`decoded`): building a million Python-visible strings
  was half a read;
* reading rows at given positions (:func:`read_rows`) decodes one row group at a time, so a few
  example rows cost one row group's memory, not a whole column's.

Why here and nothing else: which rows an example shows (:mod:`checker.example_rules`) and
which files to read for a pass (:mod:`checker.fetch`, :mod:`checker.value_details`) change with
the checks; how a stored run is read changes only with the store's layout.  Files are read by
:data:`READ_THREADS` threads at once by the callers: pyarrow releases the GIL while it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from checker.engine import to_pandas
from checker.evidence import RunInput
from testbed.record.packed import RowSlice, open_packed, read_run

READ_THREADS = 4
DICTIONARY_COLUMNS = ("f_name", "key", "error", "node", "payload", "topic")
"""String columns read as dictionaries: never filtered on, one per row, few distinct values."""


def read_run_table(
    path: Path,
    rows: RowSlice | None,
    columns: Sequence[str],
    dictionaries: Sequence[str] = DICTIONARY_COLUMNS,
) -> pa.Table:
    """``columns`` of one run's rows: its own file whole, or its row groups of a packed file
    (``rows``, :mod:`testbed.record.packed`); ``dictionaries``: string columns read as dictionaries."""
    if rows is None:
        return pq.read_table(path, columns=list(columns), read_dictionary=list(dictionaries) or None)
    return read_run(path, rows, columns, dictionaries)


def read_runs(
    located: Sequence[tuple[Path, RowSlice | None]],
    columns: Sequence[str],
    dictionaries: Sequence[str] = DICTIONARY_COLUMNS,
) -> pa.Table:
    """``columns`` of several runs' rows, one run after another in the order given: the table
    ``pa.concat_tables([read_run_table(path, rows, columns, dictionaries) for path, rows in located])``.

    Consecutive runs of one packed file are one read of all their row groups: a run's read and its
    Arrow calls were its whole cost at 10,000 packed runs of 1 k rows (the row counts and drain
    status of such a pass spent 11-12 s in 10,000 reads).  A run directory's file is read by
    :func:`testbed.record.packed.read_run` (one thread; the callers read several files at once),
    which cost 1.0 ms per file of 10 k rows against 3.5 ms through ``pq.read_table``.
    ``located`` must not be empty.
    """
    tables: list[pa.Table] = []
    pending: tuple[Path, list[RowSlice]] | None = None

    def flush() -> None:
        if pending is None:
            return
        path, slices = pending
        groups = [group for at in slices for group in at.row_groups]
        if groups:
            parquet = open_packed(path, dictionaries)
            tables.append(parquet.read_row_groups(groups, columns=list(columns), use_threads=False))
        else:  # runs without rows: the empty table of the file's types
            tables.append(read_run(path, slices[0], columns, dictionaries))

    for path, rows in located:
        if rows is None:
            flush()
            pending = None
            # Its own file, read without Arrow's dataset layer: 1 ms per small file against 3.5.
            tables.append(read_run(path, None, columns, dictionaries))
        elif pending is not None and pending[0] == path:
            pending[1].append(rows)
        else:
            flush()
            pending = (path, [rows])
    flush()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def read_run_rows(
    path: Path,
    rows: RowSlice | None,
    positions: npt.NDArray[np.int64],
    columns: Sequence[str],
    dictionaries: Sequence[str] = (),
) -> pa.Table:
    """:func:`read_rows` of one run's rows at ``positions`` counted from its first row (see :func:`read_run_table`)."""
    if rows is None:
        return read_rows(path, positions, columns, dictionaries)
    return read_rows(open_packed(path, dictionaries), positions + rows.first_row, columns)


def open_parquet(path: Path, dictionaries: Sequence[str] = DICTIONARY_COLUMNS) -> pq.ParquetFile:
    """``path`` opened with those of ``dictionaries`` it holds read as dictionaries.

    The footer is parsed once: the second ``ParquetFile`` is given the first one's metadata,
    where asking the schema first (``pq.read_schema``) parsed it twice -- a cost that a pass of
    thousands of small runs pays per file.
    """
    plain = pq.ParquetFile(path)
    names = plain.metadata.schema.names
    chosen = [name for name in dictionaries if name in names]
    return pq.ParquetFile(path, metadata=plain.metadata, read_dictionary=chosen) if chosen else plain


def read_rows(
    source: Path | pq.ParquetFile,
    rows: npt.NDArray[np.int64],
    columns: Sequence[str],
    dictionaries: Sequence[str] = (),
) -> pa.Table:
    """``columns`` of the rows at ascending positions ``rows`` of ``source``, one row group at a time.

    Only one row group's columns are decoded at once and only the rows asked for are kept,
    so a few example rows cost one row group's memory, not a whole column's.
    ``dictionaries``: for a path, string columns to read as dictionaries (those not in the
    file are ignored); a file already open is read as it was opened.
    """
    parquet = source if isinstance(source, pq.ParquetFile) else open_parquet(source, dictionaries)
    metadata = parquet.metadata
    starts = np.cumsum([0, *(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))])
    parts = []
    for group in range(metadata.num_row_groups):
        low, high = np.searchsorted(rows, starts[group : group + 2])
        if low < high:
            chunk = parquet.read_row_group(group, columns=list(columns))
            parts.append(chunk.take(pa.array(rows[low:high] - starts[group])))
    if not parts:
        schema = parquet.schema_arrow
        return pa.schema([schema.field(name) for name in columns]).empty_table()
    return pa.concat_tables(parts)


def positions_where(mask: pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Where a (nullable) boolean mask is true."""
    return np.flatnonzero(np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool))


def decoded(table: pa.Table) -> pd.DataFrame:
    """A narrowed table as pandas, its dictionary columns decoded back to strings."""
    return to_pandas(plain(table))


def history_jobs(
    runs: list[RunInput], keys: pd.DataFrame
) -> list[tuple[Path, RowSlice | None, pd.DataFrame]]:
    """(history file, where the run's rows are in it, its run's keys) for each run that ``keys`` name."""
    ids = [run.history_run_id for run in runs]
    if not ids:
        return []
    # Only the runs asked for are grouped: a pass's other runs may be read another way.
    by_run = {int(run_id): rows for run_id, rows in keys[keys["run_id"].isin(ids)].groupby("run_id")}
    return [
        (run.history_path, run.history_slice, by_run[run.history_run_id])
        for run in runs
        if run.history_run_id in by_run
    ]


def opened(path: Path, rows: RowSlice | None) -> tuple[pq.ParquetFile, list[int], int]:
    """A run's file opened (dictionary columns as :func:`open_parquet`), the row groups holding the
    run and the file's first row of them: all of its own file, or its row groups of a packed file."""
    if rows is None:
        parquet = open_parquet(path)
        return parquet, list(range(parquet.metadata.num_row_groups)), 0
    return open_packed(path, DICTIONARY_COLUMNS), rows.row_groups, rows.first_row


def rows_of_ops(index: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Ascending positions of the rows whose ``index`` is one of ``wanted`` (unique, ascending).

    A file's ops are stored in index order (``testbed.record.history``): each op's rows are then found
    by binary search; a file out of order is searched row by row instead.
    """
    if len(index) < 2 or bool(np.all(index[1:] >= index[:-1])):
        low = np.searchsorted(index, wanted, side="left")
        high = np.searchsorted(index, wanted, side="right")
        ranges = [np.arange(a, b, dtype=np.int64) for a, b in zip(low, high, strict=True) if a < b]
        return np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(index, wanted)).astype(np.int64)


SMALL_FILE_ROWS = 100_000
"""Files of at most this many rows are read whole by the example fetches (a few MB at most)."""


def joined(tables: Sequence[pa.Table]) -> pa.Table:
    """Several files' candidate rows as one table, dictionary columns decoded.

    Tables of one schema (files' dictionaries may differ, which a chunked column allows) are
    concatenated first and decoded once: decoding per file was a tenth of fetching from
    1000 small runs.  Files that differ in which columns they hold as dictionaries are
    decoded one by one, which unifies them."""
    if all(table.schema.equals(tables[0].schema) for table in tables[1:]):
        return plain(pa.concat_tables(tables))
    return pa.concat_tables([plain(table) for table in tables], promote_options="permissive")


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded (files' dictionaries differ)."""
    return table.cast(
        pa.schema(
            [
                field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
                for field in table.schema
            ]
        )
    )
