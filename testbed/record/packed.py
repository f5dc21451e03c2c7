"""The packed store: many runs' tables in a few Parquet files, for batch analysis.

A store of thousands of small runs is thousands of small files per table, and every reader
(Spark most of all) pays per file: measured at 1000 runs of 10 k rows, Spark's core checks
over the run directories took 10.7-12x DuckDB's time, against 2.4-2.6x over the same rows in
about ten files.  ``tidemark store pack`` (:mod:`checker.pack`) therefore writes, next to the
run directories (which it never modifies), one Parquet dataset per table::

    PACKED_DIR/
      runs.parquet                     the index: one row per run (INDEX_FILE)
      history/part-00000_00003.c000.parquet
      replicas/...   replica_partitions/...   events/...   (the tables some run has)

This module owns that layout -- the directory and file names, how a run's rows are located in
a file (:class:`RowSlice`) and read back (:func:`read_slice`), and which file holds a run
(:func:`bucket_of`) -- so the writer, the checker and the bench can never disagree about it.

Why this shape:

* **Spark's own bucketed layout.**  The file of bucket ``b`` holds exactly the runs with
  ``pmod(hash(run_id), B) == b`` -- Spark's Murmur3 hash of a long with seed 42
  (:func:`spark_hash_long`, tested against Spark's ``hash()``) -- and is named as Spark names a
  bucket's file (:func:`bucket_file_name`).  So Spark registers a table's directory as a table
  ``CLUSTERED BY (run_id) INTO B BUCKETS`` as it stands: every grouped aggregation by run then
  needs no shuffle, with no links made per run.  Plain Parquet all the same: pyarrow and DuckDB
  read the directories (or the index) without Tidemark.
* **A run is whole row groups.**  Each run's rows are consecutive, sorted by ``run_id`` within
  the file, and start a new row group (a run bigger than
  :data:`testbed.record.history.ROW_GROUP_ROWS` spans several).  The index records each run's
  first row group and row count per table, so reading one run reads its row groups alone --
  what the checker's per-run readers (example fetches, nemesis rows, the counts of small runs)
  need -- and row group statistics prove which run a group holds.
* **The index carries what loading a run needs** (its spec, topic, replica nodes, missing
  dumps, high watermarks, ...), so a check of a packed store opens one small file, not a footer
  per run (measured: 18.9 s of footer loading on the driver at 10,000 runs).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from testbed.record.event_table import EVENTS_SCHEMA
from testbed.record.history import HISTORY_SCHEMA
from testbed.record.replicas import REPLICA_PARTITIONS_SCHEMA, REPLICAS_SCHEMA

INDEX_FILE: Final = "runs.parquet"
"""The index of a packed store; a directory holding it is a packed store (:func:`is_packed`)."""
HISTORY: Final = "history"
REPLICAS: Final = "replicas"
REPLICA_PARTITIONS: Final = "replica_partitions"
EVENTS: Final = "events"
TABLE_SCHEMAS: Final[dict[str, pa.Schema]] = {
    HISTORY: HISTORY_SCHEMA,
    REPLICAS: REPLICAS_SCHEMA,
    REPLICA_PARTITIONS: REPLICA_PARTITIONS_SCHEMA,
    EVENTS: EVENTS_SCHEMA,
}
"""Each packed table (its directory's name) and the schema of its files."""
PACKED_FORMAT: Final = "tidemark-packed"
PACKED_VERSION: Final = 1
"""``tidemark.format`` and ``tidemark.packed_version`` in the index's metadata."""

BUCKET_ROWS: Final = 1_000_000
"""History rows per bucket that make a task's worth of work.

One bucket is read by one Spark task, and a task costs a fixed 10-50 ms (scheduling, a Parquet
reader per file, generated code set up).  With a bucket per run, 1000 runs of 10 k rows meant
1000 tasks per question for 10 M rows in all; in buckets of at least this many rows, every task
does enough work to dwarf its fixed cost.  At 50 runs of 1 M rows it keeps one run per bucket,
the layout measured best there."""
MIN_BUCKETS_PER_CORE: Final = 4
"""Buckets per core at the least (when there are enough runs), so that runs of unequal size and
the hash placement still leave no core idle at the end."""


def bucket_count(rows: Sequence[int], cores: int) -> int:
    """How many buckets a bucketed table of runs (or files) of ``rows`` rows gets: see :data:`BUCKET_ROWS`."""
    wanted = max(-(-sum(rows) // BUCKET_ROWS), MIN_BUCKETS_PER_CORE * cores)
    return max(1, min(len(rows), wanted))


BUCKETS_KEY: Final = "tidemark.buckets"
"""The metadata key of every packed file (and the index) giving its table's bucket count."""


def packed_buckets(path: Path) -> int:
    """The bucket count of the packed table ``path`` is a file of (its footer's :data:`BUCKETS_KEY`)."""
    footer = open_packed(path).metadata
    return int((footer.metadata or {})[BUCKETS_KEY.encode()])


def table_rows(directory: Path) -> int:
    """Rows in all the files of a packed table's directory (their cached footers)."""
    return sum(open_packed(path).metadata.num_rows for path in sorted(directory.glob("part-*.parquet")))


def bucket_file_name(number: int, bucket: int) -> str:
    """The name Spark gives (and reads the bucket number from) a bucketed table's file."""
    return f"part-{number:05d}_{bucket:05d}.c000.parquet"


_MASK: Final = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix(h1: int, word: int) -> int:
    k1 = _rotl((word * 0xCC9E2D51) & _MASK, 15) * 0x1B873593 & _MASK
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a ``bigint`` (``Murmur3_x86_32.hashLong``): a signed 32-bit int."""
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix(_mix(seed & _MASK, bits & _MASK), bits >> 32)
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def bucket_of(run_id: int, buckets: int) -> int:
    """Spark's ``pmod(hash(run_id), buckets)``: the bucket (file) holding the run."""
    return spark_hash_long(run_id) % buckets


@dataclasses.dataclass(frozen=True, slots=True)
class RowSlice:
    """One run's rows in a packed file: row groups ``first_group`` .. ``first_group + groups - 1``,
    which are rows ``first_row`` .. ``first_row + rows - 1`` of the file."""

    first_group: int
    groups: int
    first_row: int
    rows: int

    @property
    def row_groups(self) -> list[int]:
        return list(range(self.first_group, self.first_group + self.groups))


def is_packed(path: Path) -> bool:
    """Whether ``path`` is a packed store (it holds :data:`INDEX_FILE`)."""
    return (path / INDEX_FILE).is_file()


@functools.lru_cache(maxsize=64)
def _footer(path: str, mtime_ns: int, size: int) -> pq.FileMetaData:
    """A packed file's footer, parsed once (keyed by mtime and size: a file packed again is read again)."""
    del mtime_ns, size
    return pq.read_metadata(path)


def open_packed(path: Path, dictionaries: Sequence[str] = ()) -> pq.ParquetFile:
    """A packed file opened with its cached footer; ``dictionaries``: string columns it holds to read as dictionaries.

    A packed file's footer describes every row group of hundreds of runs: parsed once per
    process, not once per run read from it."""
    stat = path.stat()
    footer = _footer(str(path), stat.st_mtime_ns, stat.st_size)
    chosen = [name for name in dictionaries if name in footer.schema.names]
    return pq.ParquetFile(path, metadata=footer, read_dictionary=chosen or None)


def read_run(
    path: Path,
    rows: RowSlice | None,
    columns: Sequence[str] | None = None,
    dictionaries: Sequence[str] = (),
) -> pa.Table:
    """``columns`` (default all) of one run's rows of a table: the whole file (``rows`` None: a run
    directory's own file) or the run's row groups of a packed file, nothing else.

    ``dictionaries``: string columns to read as dictionaries (those the file lacks are ignored)."""
    names = None if columns is None else list(columns)
    if rows is None:
        plain = pq.ParquetFile(path)
        chosen = [name for name in dictionaries if name in plain.metadata.schema.names]
        opened = pq.ParquetFile(path, metadata=plain.metadata, read_dictionary=chosen) if chosen else plain
        return opened.read(columns=names, use_threads=False)
    parquet = open_packed(path, dictionaries)
    if not rows.groups:
        schema = parquet.schema_arrow
        return (schema if names is None else pa.schema([schema.field(n) for n in names])).empty_table()
    return parquet.read_row_groups(rows.row_groups, columns=names, use_threads=False)


def table_dir(directory: Path, table: str) -> Path:
    """Where a packed table's files are: ``directory/<table>``."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"not a packed table: {table!r}")
    return directory / table
