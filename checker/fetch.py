"""Fetching the few stored rows that examples show, for both engines, straight from Parquet.

The aggregations name each example by (run, op index) or (run, partition, offset); the
driver then needs those ops' full rows -- a few hundred rows out of millions.  They are
read here, on the driver, with pyarrow, one run file at a time:

* Every run numbers its ops and offsets from 0, so one filter over all files of a pass
  (what a Spark job would push down) matches row groups in every file.  Per file, the
  footer statistics of ``index`` (ops are stored in index order) and of
  ``partition``/``offset`` (replica rows are stored in log order) select only the row groups
  that hold the examples (:data:`harness.record.history.ROW_GROUP_ROWS` rows each).
* Measured on 50 runs of 1 M ops with 10 example ops each: Spark's fetch jobs took 7-10 s
  (reading 40 M rows); these reads, four files at a time, 3-4 s.
* Within those row groups, an op's index matches *all* its rows (a drain op holds every
  record of its partition), so rows are narrowed in Arrow first -- record-less rows and
  records carrying one of the keys' values or offsets, a superset of what the keys select --
  and only those become pandas rows for the exact rule (:func:`select_example_rows`).
* String columns that no filter reads and that repeat a few values (``f_name``, ``key``, ...)
  are read as dictionaries -- the stored encoding -- and decoded after narrowing: building
  a million Python-visible strings was half the read.

Files are read by a few threads at once: pyarrow releases the GIL while it reads.
The rules themselves (:func:`ops_in`, :func:`at_positions`) take any Arrow table, so the
pandas engine applies them to the pass it holds in memory.  The driver already reads every
run's footers (:mod:`checker.evidence`), so this asks nothing new of where the files live.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from checker.definitions import TYPE_OK
from checker.engine import HISTORY_ROW_COLUMNS, OP_KEY_COLUMNS, REPLICA_ROW_COLUMNS, to_pandas
from checker.evidence import RunInput
from harness.record.history import F_DRAIN, F_POLL, F_SEND, HISTORY_SCHEMA
from harness.record.packed import RowSlice, open_packed, read_run

READ_THREADS = 4
POSITION = ["run_id", "partition", "offset"]
DICTIONARY_COLUMNS = ("f_name", "key", "error", "node", "payload", "topic")
"""String columns read as dictionaries: never filtered on, one per row, few distinct values."""


def read_run_table(
    path: Path,
    rows: RowSlice | None,
    columns: Sequence[str],
    dictionaries: Sequence[str] = DICTIONARY_COLUMNS,
) -> pa.Table:
    """``columns`` of one run's rows: its own file whole, or its row groups of a packed file
    (``rows``, :mod:`harness.record.packed`); ``dictionaries``: string columns read as dictionaries."""
    if rows is None:
        return pq.read_table(path, columns=list(columns), read_dictionary=list(dictionaries) or None)
    return read_run(path, rows, columns, dictionaries)


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


OP_FILTER_COLUMNS = ("run_id", "index", "item", "value", "offset", "value_text")
"""The columns :func:`key_rows` reads."""


def key_rows(table: pa.Table, keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions in ``table`` (:data:`OP_FILTER_COLUMNS` suffice) of a superset of the rows :func:`ops_in` keeps."""
    return _positions(pc.and_kleene(_key_filter(table, keys, ["run_id", "index"]), _may_show(table, keys)))


def position_rows(table: pa.Table, keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions in ``table`` (``run_id, partition, offset`` suffice) of a superset of the rows :func:`at_positions` keeps."""
    return _positions(_key_filter(table, keys[POSITION].drop_duplicates(), POSITION))


def _positions(mask: pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Where a (nullable) boolean mask is true."""
    return np.flatnonzero(np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool))


def decoded(table: pa.Table) -> pd.DataFrame:
    """A narrowed table as pandas, its dictionary columns decoded back to strings."""
    return to_pandas(_plain(table))


def _may_show(table: pa.Table, keys: pd.DataFrame) -> pa.ChunkedArray:
    """A superset of the rows :func:`select_example_rows` keeps: record-less, or a key's value or offset
    (or a null value, when a key asks for one)."""
    texts = pa.array(sorted({str(v) for v in keys["value_text"].dropna()}), pa.string())
    shown = pc.or_kleene(
        pc.or_kleene(pc.is_null(table["item"]), pc.is_in(table["value"], pa.array(_ints(keys["value"])))),
        pc.or_kleene(
            pc.is_in(table["offset"], pa.array(_ints(keys["offset"]))),
            pc.is_in(table["value_text"], texts),
        ),
    )
    if bool(keys["null_value"].fillna(False).any()):
        shown = pc.or_kleene(
            shown, pc.and_kleene(pc.is_null(table["value"]), pc.is_null(table["value_text"]))
        )
    return shown


def select_example_rows(rows: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """The rule of ``Engine.fetch_ops``: record-less rows, or records matching a key."""
    renamed = keys.rename(
        columns={c: f"k_{c}" for c in ("partition", "value", "value_text", "offset", "null_value")}
    )
    joined = rows.merge(renamed, on=["run_id", "index"])
    same_partition = joined["partition"] == joined["k_partition"]
    null_value = joined["value"].isna() & joined["value_text"].isna() & joined["k_null_value"].fillna(False)
    matches = (
        joined["item"].isna()
        | (same_partition & (joined["value"] == joined["k_value"]))
        | (same_partition & (joined["value_text"] == joined["k_value_text"]))
        | (same_partition & (joined["offset"] == joined["k_offset"]))
        | (same_partition & null_value.astype(bool))
    )
    chosen = joined[matches.fillna(False).astype(bool)].drop_duplicates(["run_id", "index", "item"])
    return chosen[list(HISTORY_ROW_COLUMNS)].reset_index(drop=True)


def _ints(column: pd.Series) -> list[int]:
    return sorted({int(v) for v in column.dropna()})


def _key_filter(table: pa.Table, keys: pd.DataFrame, columns: Sequence[str]) -> pa.ChunkedArray:
    """Rows whose every one of ``columns`` holds some key's value: a superset of the keyed rows."""
    wanted = [pc.is_in(table[column], pa.array(_ints(keys[column]))) for column in columns]
    mask = wanted[0]
    for more in wanted[1:]:
        mask = pc.and_kleene(mask, more)
    return mask


def ops_in(table: pa.Table, keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_ops`` on rows already read (a file's rows, or a whole pass in memory)."""
    return select_example_rows(decoded(_op_superset(table, keys)), keys)


def _op_superset(table: pa.Table, keys: pd.DataFrame) -> pa.Table:
    """The rows of ``table`` of the keys' ops that may be shown: a superset of what
    :func:`select_example_rows` keeps, narrowed in Arrow."""
    table = table.filter(_key_filter(table, keys, ["run_id", "index"]))
    return table.filter(_may_show(table, keys))


def at_positions(table: pa.Table, keys: pd.DataFrame, topic: str | None = None) -> pd.DataFrame:
    """Rows of ``table`` at ``keys[run_id, partition, offset]`` (and of ``topic``, for replica rows)."""
    keys = keys[POSITION].drop_duplicates()
    table = table.filter(_key_filter(table, keys, POSITION))
    if topic is not None:
        table = table.filter(pc.equal(table["topic"], topic))
    return decoded(table).merge(keys, on=POSITION)


def observations(rows: pd.DataFrame) -> pd.DataFrame:
    """Of history rows, those that observe a position: send acks with a known offset (>= 0) and read records."""
    send_ack = (rows["f"] == F_SEND) & (rows["type"] == TYPE_OK) & (rows["offset"] >= 0).fillna(False)
    record = ((rows["f"] == F_POLL) | (rows["f"] == F_DRAIN)) & rows["item"].notna()
    return rows[(send_ack | record).astype(bool)].reset_index(drop=True)


def _history_jobs(
    runs: list[RunInput], keys: pd.DataFrame
) -> list[tuple[Path, RowSlice | None, pd.DataFrame]]:
    """(history file, where the run's rows are in it, its run's keys) for each run that ``keys`` name."""
    by_run = {int(run_id): rows for run_id, rows in keys.groupby("run_id")}
    return [
        (run.history_path, run.history_slice, by_run[run.history_run_id])
        for run in runs
        if run.history_run_id in by_run
    ]


def _opened(path: Path, rows: RowSlice | None) -> tuple[pq.ParquetFile, list[int], int]:
    """A run's file opened (dictionary columns as :func:`open_parquet`), the row groups holding the
    run and the file's first row of them: all of its own file, or its row groups of a packed file."""
    if rows is None:
        parquet = open_parquet(path)
        return parquet, list(range(parquet.metadata.num_row_groups)), 0
    return open_packed(path, DICTIONARY_COLUMNS), rows.row_groups, rows.first_row


def fetch_ops(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_ops``: the example ops' rows, never a whole drain op.

    Each file gives its candidate rows in Arrow (:func:`_op_candidates`); the exact rule
    (:func:`select_example_rows`) runs once over all of them, as for positions.
    """
    jobs = _history_jobs(runs, keys)
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        tables = [table for table in pool.map(lambda job: _op_candidates(*job), jobs) if table.num_rows]
    if not tables:
        return pd.DataFrame(columns=list(HISTORY_ROW_COLUMNS))
    return select_example_rows(to_pandas(_joined(tables)), keys)


def _op_candidates(path: Path, located: RowSlice | None, wanted: pd.DataFrame) -> pa.Table:
    """A superset of the rows of ``path`` that :func:`ops_in` keeps for ``wanted``, in Arrow.

    Ops are stored in index order, so the footer's ``index`` statistics skip the row groups
    that hold none of the ops, and :func:`rows_of_ops` finds their rows in the others; only
    those rows are read whole.  (``pq.read_table`` with a filter did the same through the
    dataset machinery, at ten times the fixed cost per file.)
    """
    parquet, groups, start = _opened(path, located)
    metadata = parquet.metadata
    indexes = np.array(_ints(wanted["index"]), dtype=np.int64)
    column = metadata.schema.names.index("index")
    found = []
    for group in groups:
        stats = metadata.row_group(group).column(column).statistics
        size = metadata.row_group(group).num_rows
        in_range = (
            stats is None
            or not stats.has_min_max
            or bool(np.any((indexes >= stats.min) & (indexes <= stats.max)))
        )
        if in_range:
            index = parquet.read_row_group(group, columns=["index"], use_threads=False)["index"]
            found.append(rows_of_ops(index.to_numpy(), indexes) + start)
        start += size
    rows = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    return _op_superset(read_rows(parquet, rows, HISTORY_ROW_COLUMNS), wanted)


OP_KEY_TYPES = {
    "run_id": "int64",
    "index": "int64",
    "partition": "Int32",
    "value": "Int64",
    "value_text": object,
    "offset": "Int64",
    "null_value": bool,
}


def example_op_keys(
    values: pd.DataFrame, orders: pd.DataFrame | None = None, groups: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Which ops, and which of their records, examples show (the keys of ``Engine.fetch_ops``).

    A value-check example (``values``: ``run_id, send_index, read_index, partition, value,
    value_text``) shows its send and the records of its value in its first read (a value that
    is neither integer nor text is a null: its key asks for the null-value records, so that
    the read shows what was read rather than nothing); an order
    example (``orders``: ``run_id, index, prev_index, partition, offset, prev_offset,
    invoke_index``) the records at both offsets in both reads (a send op is record-less:
    all of it), and the invoke at ``invoke_index`` when there is one; a group example
    (``groups``: ``run_id, index, prev_index, partition, offset, prev_offset``) the same,
    without an invoke (a commit op is record-less: all of it).
    """
    missing = pd.NA
    parts = []
    if not values.empty:
        parts.append(
            pd.DataFrame({"run_id": values["run_id"], "index": values["send_index"]}).assign(
                partition=missing, value=missing, value_text=None, offset=missing, null_value=False
            )
        )
        parts.append(
            pd.DataFrame(
                {
                    "run_id": values["run_id"],
                    "index": values["read_index"],
                    "partition": values["partition"],
                    "value": values["value"],
                    "value_text": values["value_text"],
                    "null_value": (values["value"].isna() & values["value_text"].isna()).astype(bool),
                }
            ).assign(offset=missing)
        )
    for compared in (orders, groups):
        if compared is None or compared.empty:
            continue
        for index, offset in (("index", "offset"), ("prev_index", "prev_offset")):
            parts.append(
                pd.DataFrame(
                    {
                        "run_id": compared["run_id"],
                        "index": compared[index],
                        "partition": compared["partition"],
                        "offset": compared[offset],
                    }
                ).assign(value=missing, value_text=None, null_value=False)
            )
        if "invoke_index" in compared:
            parts.append(
                pd.DataFrame({"run_id": compared["run_id"], "index": compared["invoke_index"]}).assign(
                    partition=missing, value=missing, value_text=None, offset=missing, null_value=False
                )
            )
    if not parts:
        return pd.DataFrame({name: pd.Series(dtype=kind) for name, kind in OP_KEY_TYPES.items()})
    # Typed before the concatenation: all-missing columns then keep their type.
    typed = [part[list(OP_KEY_COLUMNS)].astype({**OP_KEY_TYPES, "index": "Int64"}) for part in parts]
    keys = pd.concat(typed, ignore_index=True)
    return keys[keys["index"].notna()].astype(OP_KEY_TYPES).reset_index(drop=True)


VALUE_ROW_COLUMNS = ("run_id", "index", "f", "type", "partition", "offset", "value")
_VALUE_ROWS_SCHEMA = pa.schema([HISTORY_SCHEMA.field(name) for name in VALUE_ROW_COLUMNS])


def rows_of_ops(index: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Ascending positions of the rows whose ``index`` is one of ``wanted`` (unique, ascending).

    A file's ops are stored in index order (``harness.record.history``): each op's rows are then found
    by binary search; a file out of order is searched row by row instead.
    """
    if len(index) < 2 or bool(np.all(index[1:] >= index[:-1])):
        low = np.searchsorted(index, wanted, side="left")
        high = np.searchsorted(index, wanted, side="right")
        ranges = [np.arange(a, b, dtype=np.int64) for a, b in zip(low, high, strict=True) if a < b]
        return np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(index, wanted)).astype(np.int64)


def value_details_with_ops(
    runs: list[RunInput], shown: pd.DataFrame, aggregate: Callable[[pd.DataFrame], pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """For the values ``shown[run_id, partition, value]`` of integer value-check examples:

    * ``aggregate`` of every history row (:data:`VALUE_ROW_COLUMNS`) holding one of them --
      what the value checks aggregate, for these values alone (the Spark engine's examples
      take their details from here, see ``SparkEngine.value_anomalies``);
    * the keys of the ops their examples show (:func:`example_op_keys`), and
    * those ops' rows, as ``Engine.fetch_ops`` answers for those keys.

    Every op an example shows is a send or a read *of its value*: its index is among those of
    the value's rows, and the rows it shows are record-less or hold the value.  So each file's
    ``index`` and ``value`` columns find the ops, and then only the row groups holding their
    rows are read, once, for both answers -- where the details and the ops used to read every
    row group once each, with filters over every row.  Measured on 50 runs of 1 M ops: 7.0
    CPU-seconds against 9.2 (2.8 + 6.4), and 10.9 against 13.4 before the history files
    were delta-encoded (:data:`harness.record.history.DELTA_COLUMNS`).
    """
    columns = ["run_id", "partition", "value"]

    def locate(path: Path, located: RowSlice | None, wanted: pd.DataFrame) -> tuple[pa.Table, pa.Table]:
        # Arrow's own threads doubled the CPU time of these reads (one thread per file here),
        # and a row group at a time keeps the memory touched small.
        parquet, run_groups, _ = _opened(path, located)
        values = pa.array(_ints(wanted["value"]), pa.int64())
        # A small run is read whole, once (as one group): reading its key columns first
        # and its row group again cost more than it saved.
        run_rows = parquet.metadata.num_rows if located is None else located.rows
        whole = (
            [parquet.read_row_groups(run_groups, use_threads=False)] if run_rows <= SMALL_FILE_ROWS else []
        )
        groups = range(len(whole) or len(run_groups))
        # First the ops: the indexes of the rows that hold the values.
        keys = whole or [
            parquet.read_row_group(run_groups[g], columns=["index", "value"], use_threads=False)
            for g in groups
        ]
        indexes = np.unique(
            np.concatenate(
                [group["index"].to_numpy()[_positions(pc.is_in(group["value"], values))] for group in keys]
            )
        )
        rows, kept = [], []
        for group in groups:
            in_ops = rows_of_ops(keys[group]["index"].to_numpy(), indexes)
            if len(in_ops) == 0:
                continue
            table = whole[group] if whole else parquet.read_row_group(run_groups[group], use_threads=False)
            holding = pc.is_in(table["value"], values)
            rows.append(table.select(list(VALUE_ROW_COLUMNS)).filter(holding))
            of_ops = table.take(pa.array(in_ops))
            kept.append(
                of_ops.filter(pc.or_kleene(pc.is_null(of_ops["item"]), pc.is_in(of_ops["value"], values)))
            )
        value_rows = pa.concat_tables(rows) if rows else _VALUE_ROWS_SCHEMA.empty_table()
        shown_rows = pa.concat_tables(kept) if kept else parquet.schema_arrow.empty_table()
        return value_rows, shown_rows

    jobs = _history_jobs(runs, shown)
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        found = list(pool.map(lambda job: locate(*job), [job for job in jobs if job[1] is None]))
        chunks = _packed_chunks([(path, at, wanted) for path, at, wanted in jobs if at is not None])
        found += pool.map(_locate_chunk, chunks)
    if not found:
        no_rows = pd.DataFrame(columns=list(HISTORY_ROW_COLUMNS))
        return aggregate(no_rows), example_op_keys(pd.DataFrame()), no_rows
    # One pandas step for the whole pass: per file, its fixed cost was most of the fetch
    # from thousands of small runs.  The rows of a file hold only its own run's values, but
    # one value may be shown in one run and merely present in another: the merge keeps the shown.
    value_rows = to_pandas(_joined([rows for rows, _ in found]))
    details = aggregate(value_rows.merge(shown[columns].drop_duplicates(), on=columns))
    keys = example_op_keys(details.assign(value_text=None))
    kept = to_pandas(_joined([table for _, table in found]))
    return details, keys, select_example_rows(kept, keys)


PACKED_CHUNK_ROWS = 1 << 20
"""Rows of a packed file read together for the value details of the runs in it."""


def _packed_chunks(
    jobs: list[tuple[Path, RowSlice, pd.DataFrame]],
) -> list[tuple[Path, list[tuple[RowSlice, pd.DataFrame]]]]:
    """Packed runs' jobs by file, in file order, cut into chunks of about :data:`PACKED_CHUNK_ROWS` rows."""
    by_file: dict[Path, list[tuple[RowSlice, pd.DataFrame]]] = {}
    for path, at, wanted in jobs:
        by_file.setdefault(path, []).append((at, wanted))
    chunks: list[tuple[Path, list[tuple[RowSlice, pd.DataFrame]]]] = []
    for path, items in by_file.items():
        items.sort(key=lambda item: item[0].first_row)
        rows = 0
        for item in items:
            if not chunks or chunks[-1][0] != path or rows + item[0].rows > PACKED_CHUNK_ROWS:
                chunks.append((path, []))
                rows = 0
            chunks[-1][1].append(item)
            rows += item[0].rows
    return chunks


def _locate_chunk(chunk: tuple[Path, list[tuple[RowSlice, pd.DataFrame]]]) -> tuple[pa.Table, pa.Table]:
    """The value rows and the shown ops' rows (as ``locate`` in :func:`value_details_with_ops`) of
    several runs of one packed file, from one read of their row groups.

    Per run, the read and a dozen Arrow calls were 48 s of a 159 s check of 10,000 packed runs.
    Here the values are matched for the whole chunk (a value shown in one run may be held by
    another: the caller's merges keep each run's own), and each op is found by its exact (run,
    index) pair."""
    path, items = chunk
    groups = [group for at, _ in items for group in at.row_groups]
    table = open_packed(path, DICTIONARY_COLUMNS).read_row_groups(groups, use_threads=False)
    values = pa.array(sorted({v for _, wanted in items for v in _ints(wanted["value"])}), pa.int64())
    holding = pc.is_in(table["value"], values)
    value_rows = table.select(list(VALUE_ROW_COLUMNS)).filter(holding)
    # Ops as (run, index) pairs, each run numbered within the chunk: exact, however runs' indexes overlap.
    _, run_number = np.unique(table["run_id"].to_numpy(), return_inverse=True)
    index = table["index"].to_numpy()
    op_key = run_number.astype(np.int64) * (int(index.max(initial=0)) + 1) + index
    in_ops = np.isin(op_key, op_key[_positions(holding)])
    of_ops = table.filter(pa.array(in_ops))
    kept = of_ops.filter(pc.or_kleene(pc.is_null(of_ops["item"]), pc.is_in(of_ops["value"], values)))
    return value_rows, kept


def _may_hold(group: pq.RowGroupMetaData, names: list[str], positions: list[tuple[int, int]]) -> bool:
    """Whether the footer statistics of a row group allow one of the (partition, offset) ``positions``."""
    bounds = []
    for column in (group.column(names.index("partition")), group.column(names.index("offset"))):
        stats = column.statistics
        if stats is None or not stats.has_min_max:
            return True
        bounds.append((stats.min, stats.max))
    (low_p, high_p), (low_o, high_o) = bounds
    return any(low_p <= p <= high_p and low_o <= o <= high_o for p, o in positions)


class _Positions(NamedTuple):
    """The distinct (partition, offset) positions one run's keys name (ascending, from :func:`_positions_by_run`)."""

    run_id: int
    partitions: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]


def _positions_by_run(keys: pd.DataFrame) -> dict[int, _Positions]:
    """``keys[run_id, partition, offset]`` cut into runs, once for the pass.

    The keys are sorted and split in numpy: a pandas group and three pandas column reads
    per file cost as much as reading a small run's file (0.5 s of 1.7 at 1000 runs)."""
    known = keys[POSITION].dropna().drop_duplicates().sort_values(POSITION)
    runs, partitions, offsets = (known[name].to_numpy(np.int64) for name in POSITION)
    cuts = np.flatnonzero(np.diff(runs)) + 1
    return {
        int(run[0]): _Positions(int(run[0]), part, offset)
        for run, part, offset in zip(
            np.split(runs, cuts), np.split(partitions, cuts), np.split(offsets, cuts), strict=True
        )
        if len(run)
    }


def _candidates_at(
    path: Path, located: RowSlice | None, wanted: _Positions, columns: Sequence[str], topic: str | None = None
) -> pa.Table:
    """A superset of the rows of ``path`` at ``wanted``'s positions (and of ``topic``), in Arrow.

    The position columns are read first, in the row groups their footer statistics allow;
    the other columns only in the row groups that hold a match.  Measured on 50 replica
    dumps of 857 K rows, 5 positions each: 2.9 CPU-seconds this way, 5.0 when every column of
    the allowed row groups was read and filtered.  The file is opened once, and the rows stay
    in Arrow: the exact match (:func:`at_positions`) runs once over every file's candidates,
    since its pandas steps cost milliseconds per call -- per file, the whole cost of fetching
    from thousands of small runs.
    """
    parquet, run_groups, _ = _opened(path, located)
    metadata = parquet.metadata
    wanted_columns = [*columns, *(["topic"] if topic is not None and "topic" not in columns else [])]
    if (metadata.num_rows if located is None else located.rows) <= SMALL_FILE_ROWS:
        # A small run: reading its columns whole is a handful of Arrow calls, where
        # choosing row groups and rows first cost milliseconds of Python per file.
        table = parquet.read_row_groups(
            run_groups, columns=list(dict.fromkeys([*wanted_columns, *POSITION])), use_threads=False
        )
        return _narrowed(table, wanted, wanted_columns, topic)
    names = metadata.schema.names
    positions = list({(int(p), int(o)) for p, o in zip(wanted.partitions, wanted.offsets, strict=True)})
    groups = [g for g in run_groups if _may_hold(metadata.row_group(g), names, positions)]
    sizes = np.array([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)], dtype=np.int64)
    first_row = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.zeros(0, dtype=np.int64)
    if groups:
        keyed = parquet.read_row_groups(groups, columns=["partition", "offset"])
        local = _positions(
            pc.and_kleene(
                pc.is_in(keyed["partition"], pa.array(sorted({p for p, _ in positions}))),
                pc.is_in(keyed["offset"], pa.array(sorted({o for _, o in positions}))),
            )
        )
        # Positions in the concatenation of the groups read, back to rows of the file.
        read_starts = np.concatenate([[0], np.cumsum(sizes[groups])])
        group_of = np.searchsorted(read_starts, local, side="right") - 1
        rows = local - read_starts[group_of] + first_row[np.array(groups)[group_of]]
    table = read_rows(parquet, rows, list(dict.fromkeys([*wanted_columns, *POSITION])))
    return _narrowed(table, wanted, wanted_columns, topic)


SMALL_FILE_ROWS = 100_000
"""Files of at most this many rows are read whole by the example fetches (a few MB at most)."""


def _narrowed(table: pa.Table, wanted: _Positions, columns: Sequence[str], topic: str | None) -> pa.Table:
    """``columns`` of the rows of ``table`` of ``wanted``'s run at one of its offsets (a superset of
    its positions: :func:`at_positions` matches them exactly), and of ``topic``.

    Only this file's run's keys: a file whose footer does not prove it holds one run (made by
    hand, or by an older writer) must not lend its rows to another run's keys."""
    mask = pc.and_kleene(
        pc.equal(table["run_id"], wanted.run_id),
        pc.is_in(table["offset"], pa.array(np.unique(wanted.offsets))),
    )
    if topic is not None:
        mask = pc.and_kleene(mask, pc.equal(table["topic"], topic))
    return table.filter(mask).select(list(columns))


def _from_files(
    files: Sequence[tuple[int, Path, RowSlice | None, str | None]],
    keys: pd.DataFrame,
    columns: tuple[str, ...],
) -> pd.DataFrame:
    """Rows at ``keys[run_id, partition, offset]``, one file (or slice of one) per run; ``topic``
    narrows replica files."""
    by_run = _positions_by_run(keys)
    jobs = [
        (path, located, by_run[run_id], topic) for run_id, path, located, topic in files if run_id in by_run
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        tables = [
            table
            for table in pool.map(lambda job: _candidates_at(job[0], job[1], job[2], columns, job[3]), jobs)
            if table.num_rows
        ]
    if not tables:
        return pd.DataFrame(columns=list(columns))
    return at_positions(_joined(tables), keys)[list(columns)]


def _joined(tables: Sequence[pa.Table]) -> pa.Table:
    """Several files' candidate rows as one table, dictionary columns decoded.

    Tables of one schema (files' dictionaries may differ, which a chunked column allows) are
    concatenated first and decoded once: decoding per file was a tenth of fetching from
    1000 small runs.  Files that differ in which columns they hold as dictionaries are
    decoded one by one, which unifies them."""
    if all(table.schema.equals(tables[0].schema) for table in tables[1:]):
        return _plain(pa.concat_tables(tables))
    return pa.concat_tables([_plain(table) for table in tables], promote_options="permissive")


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded (files' dictionaries differ)."""
    return table.cast(
        pa.schema(
            [
                field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
                for field in table.schema
            ]
        )
    )


def fetch_observations(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_observations``: send acks and read records at the given positions."""
    files = [(run.history_run_id, run.history_path, run.history_slice, None) for run in runs]
    return observations(_from_files(files, keys, HISTORY_ROW_COLUMNS))


def fetch_replica_records(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_replica_records``: replica rows of the run's topic at the given positions."""
    files = [
        (run.replicas_run_id, run.replicas_path, run.replicas_slice, run.topic)
        for run in runs
        if run.replicas_run_id is not None and run.replicas_path is not None
    ]
    return _from_files(files, keys, REPLICA_ROW_COLUMNS)
