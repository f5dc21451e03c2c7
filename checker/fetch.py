"""Fetching the few stored rows that examples show, for both engines, straight from Parquet.

The aggregations name each example by (run, op index) or (run, partition, offset); the
driver then needs those ops' full rows -- a few hundred rows out of millions.  They are
read here, on the driver, with pyarrow, one run file at a time:

* Every run numbers its ops and offsets from 0, so one filter over all files of a pass
  (what a Spark job would push down) matches row groups in every file.  Per file, the
  footer statistics of ``index`` (ops are stored in index order) and of
  ``partition``/``offset`` (replica rows are stored in log order) select only the row groups
  that hold the examples (:data:`harness.history.ROW_GROUP_ROWS` rows each).
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

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from checker.definitions import TYPE_OK
from checker.engine import HISTORY_ROW_COLUMNS, REPLICA_ROW_COLUMNS, to_pandas
from checker.evidence import RunInput
from harness.history import F_DRAIN, F_POLL, F_SEND

READ_THREADS = 4
POSITION = ["run_id", "partition", "offset"]
DICTIONARY_COLUMNS = ("f_name", "key", "error", "node", "payload")
"""String columns read as dictionaries: never filtered on, one per row, few distinct values."""


def read_table(
    path: Path,
    columns: Sequence[str] | None = None,
    filters: list[tuple[str, str, list[int]]] | None = None,
) -> pa.Table:
    """``columns`` (default all) of the rows of ``path`` matching ``filters``, strings that repeat as dictionaries."""
    names = None if columns is None else list(columns)
    return pq.read_table(path, columns=names, filters=filters, read_dictionary=DICTIONARY_COLUMNS)


def read_rows(
    path: Path, rows: npt.NDArray[np.int64], columns: Sequence[str], dictionaries: Sequence[str] = ()
) -> pa.Table:
    """``columns`` of the rows at ascending positions ``rows`` of ``path``, one row group at a time.

    Only one row group's columns are decoded at once and only the rows asked for are kept,
    so a few example rows cost one row group's memory, not a whole column's.
    ``dictionaries``: string columns to read as dictionaries (all must be in the file).
    """
    parquet = pq.ParquetFile(path, read_dictionary=list(dictionaries) or None)
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
    schema = pa.schema(
        [
            field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
            for field in table.schema
        ]
    )
    return to_pandas(table.cast(schema))


def _may_show(table: pa.Table, keys: pd.DataFrame) -> pa.ChunkedArray:
    """A superset of the rows :func:`select_example_rows` keeps: record-less, or a key's value or offset."""
    texts = pa.array(sorted({str(v) for v in keys["value_text"].dropna()}), pa.string())
    return pc.or_kleene(
        pc.or_kleene(pc.is_null(table["item"]), pc.is_in(table["value"], pa.array(_ints(keys["value"])))),
        pc.or_kleene(
            pc.is_in(table["offset"], pa.array(_ints(keys["offset"]))),
            pc.is_in(table["value_text"], texts),
        ),
    )


def select_example_rows(rows: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """The rule of ``Engine.fetch_ops``: record-less rows, or records matching a key."""
    renamed = keys.rename(columns={c: f"k_{c}" for c in ("partition", "value", "value_text", "offset")})
    joined = rows.merge(renamed, on=["run_id", "index"])
    same_partition = joined["partition"] == joined["k_partition"]
    matches = (
        joined["item"].isna()
        | (same_partition & (joined["value"] == joined["k_value"]))
        | (same_partition & (joined["value_text"] == joined["k_value_text"]))
        | (same_partition & (joined["offset"] == joined["k_offset"]))
    )
    chosen = joined[matches.fillna(False).astype(bool)].drop_duplicates(["run_id", "index", "item"])
    return chosen[list(HISTORY_ROW_COLUMNS)].reset_index(drop=True)


def _per_file(
    jobs: list[tuple[Path, pd.DataFrame]],
    read: Callable[[Path, pd.DataFrame], pd.DataFrame],
    columns: tuple[str, ...],
) -> pd.DataFrame:
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        frames = [frame for frame in pool.map(lambda job: read(*job), jobs) if not frame.empty]
    if not frames:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(frames, ignore_index=True)[list(columns)]


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
    table = table.filter(_key_filter(table, keys, ["run_id", "index"]))
    return select_example_rows(decoded(table.filter(_may_show(table, keys))), keys)


def at_positions(table: pa.Table, keys: pd.DataFrame, topic: str | None = None) -> pd.DataFrame:
    """Rows of ``table`` at ``keys[run_id, partition, offset]`` (and of ``topic``, for replica rows)."""
    keys = keys[POSITION].drop_duplicates()
    table = table.filter(_key_filter(table, keys, POSITION))
    if topic is not None:
        table = table.filter(pc.equal(table["topic"], topic))
    return decoded(table).merge(keys, on=POSITION)


def observations(rows: pd.DataFrame) -> pd.DataFrame:
    """Of history rows, those that observe a position: send acks and read records."""
    send_ack = (rows["f"] == F_SEND) & (rows["type"] == TYPE_OK)
    record = ((rows["f"] == F_POLL) | (rows["f"] == F_DRAIN)) & rows["item"].notna()
    return rows[(send_ack | record).astype(bool)].reset_index(drop=True)


def _history_jobs(runs: list[RunInput], keys: pd.DataFrame) -> list[tuple[Path, pd.DataFrame]]:
    """(history file, its run's keys) for each run that ``keys`` name."""
    by_run = {int(run_id): rows for run_id, rows in keys.groupby("run_id")}
    return [(run.history_path, by_run[run.history_run_id]) for run in runs if run.history_run_id in by_run]


def fetch_ops(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_ops``: the example ops' rows, never a whole drain op."""

    def read(path: Path, wanted: pd.DataFrame) -> pd.DataFrame:
        return ops_in(read_table(path, filters=[("index", "in", _ints(wanted["index"]))]), wanted)

    jobs = _history_jobs(runs, keys)
    return _per_file(jobs, read, HISTORY_ROW_COLUMNS)


VALUE_ROW_COLUMNS = ("run_id", "index", "f", "type", "partition", "offset", "value")


def value_rows(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """Every history row (:data:`VALUE_ROW_COLUMNS`) holding one of ``keys[run_id, partition, value]``.

    What the value checks aggregate for those values -- the Spark engine's examples take
    their details from here (see ``SparkEngine.value_anomalies``).  Footer statistics of
    ``value`` select the row groups: a run's values grow with time, in its sends and in
    its partitions' logs alike.
    """
    wanted_columns = ["run_id", "partition", "value"]

    def read(path: Path, wanted: pd.DataFrame) -> pd.DataFrame:
        table = read_table(path, VALUE_ROW_COLUMNS, [("value", "in", _ints(wanted["value"]))])
        return to_pandas(table).merge(wanted[wanted_columns].drop_duplicates(), on=wanted_columns)

    jobs = _history_jobs(runs, keys)
    return _per_file(jobs, read, VALUE_ROW_COLUMNS)


def _from_files(
    files: Sequence[tuple[int, Path, str | None]],
    keys: pd.DataFrame,
    columns: tuple[str, ...],
) -> pd.DataFrame:
    """Rows at ``keys[run_id, partition, offset]``, one file per run; ``topic`` narrows replica files."""
    by_run = {int(run_id): rows for run_id, rows in keys[POSITION].groupby("run_id")}
    topics = {path: topic for _, path, topic in files}

    def read(path: Path, wanted: pd.DataFrame) -> pd.DataFrame:
        filters = [(column, "in", _ints(wanted[column])) for column in ("partition", "offset")]
        return at_positions(read_table(path, filters=filters), wanted, topics[path])

    jobs = [(path, by_run[run_id]) for run_id, path, _ in files if run_id in by_run]
    return _per_file(jobs, read, columns)


def fetch_observations(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_observations``: send acks and read records at the given positions."""
    files = [(run.history_run_id, run.history_path, None) for run in runs]
    return observations(_from_files(files, keys, HISTORY_ROW_COLUMNS))


def fetch_replica_records(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_replica_records``: replica rows of the run's topic at the given positions."""
    files = [
        (run.replicas_run_id, run.replicas_path, run.topic)
        for run in runs
        if run.replicas_run_id is not None and run.replicas_path is not None
    ]
    return _from_files(files, keys, REPLICA_ROW_COLUMNS)
