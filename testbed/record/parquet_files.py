"""How the record's Parquet files are written and their footers read.

Every table of a run -- ``history.parquet``, ``replicas.parquet``, ``replica_partitions.parquet``,
``events.parquet`` -- is written by :func:`write_parquet` (atomically, with the encodings of
:func:`parquet_options`) and carries ``tidemark.*`` key-value metadata
(:func:`parquet_metadata`): its kind, the format version and a random 63-bit ``run_id`` (also a
constant column, so one Spark job can group thousands of runs by an integer).  Readers check
kind and version with :func:`read_footer`, which reads nothing but the footer, so that a batch
of thousands of runs starts quickly.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from testbed.record.history_lines import HISTORY_SCHEMA_VERSION, HistoryFormatError

METADATA_PREFIX = "tidemark."


def parquet_metadata(run_id: int, kind: str, extra: dict[str, str]) -> dict[bytes, bytes]:
    base = {"schema_version": str(HISTORY_SCHEMA_VERSION), "kind": kind, "run_id": str(run_id), **extra}
    return {(METADATA_PREFIX + key).encode(): value.encode() for key, value in base.items()}


def new_run_id() -> int:
    """A random positive 63-bit id: the integer a batch check groups this run's rows by."""
    return secrets.randbits(63)


ROW_GROUP_ROWS = 1 << 18
"""Rows per Parquet row group (262,144).  The footer statistics of ``index`` (ops are stored
in index order) and of ``partition``/``offset`` (replica rows in log order) let a reader
fetch a few example rows by reading only the row groups that hold them (:mod:`checker.fetch`,
:mod:`checker.value_details`).  Measured on 50 one-million-op runs: 65,536 rows slowed DuckDB's
full scans (12.2-16.1 s against 10.4-11.9 s) without making the Spark checker faster
(46-48.5 s against 41.5-45.9 s); 1,048,576 rows gave every file a single group."""


DELTA_COLUMNS = frozenset({"index", "time", "offset", "value", "end_offset", "item", "value_int"})
"""Integer columns stored ``DELTA_BINARY_PACKED``: they grow along the rows (op indexes and
times, offsets within a partition, the workload's values), so their differences take a few
bits each.  Dictionary encoding gave up on them (every value distinct) and fell back to
plain 8-byte values.  Measured: a 20 s Docker run's history went from 219 KB to 75 KB
(replicas 97 KB to 62 KB); a generated 1 M-op history from 13.1 MB to 1.0 MB, reading one
such column with pyarrow from 16-19 ms to 5-7 ms, and a 50 M-op Spark check from 52 s to 41 s."""
PLAIN_COLUMNS = frozenset({"record_id"})
"""Integer columns of random bits (hashes): neither dictionary nor delta encoding helps."""


def write_parquet(table: pa.Table, target: Path) -> None:
    """Write atomically: a reader never sees a half-written Parquet file.

    Integer columns of :data:`DELTA_COLUMNS` are delta-encoded, those of
    :data:`PLAIN_COLUMNS` plain, every other column dictionary-encoded (few distinct values).
    """
    partial = target.with_name(target.name + ".partial")
    pq.write_table(table, partial, row_group_size=ROW_GROUP_ROWS, **parquet_options(table.schema))
    os.replace(partial, target)


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """The encodings of :func:`write_parquet` for ``schema``, as ``pq.write_table`` (or
    ``pq.ParquetWriter``) arguments: every writer of these tables uses them (:mod:`checker.pack` too)."""
    delta = [
        field.name for field in schema if field.name in DELTA_COLUMNS and pa.types.is_integer(field.type)
    ]
    dictionary = [name for name in schema.names if name not in delta and name not in PLAIN_COLUMNS]
    # The page index lets readers skip pages by min/max (e.g. fetching example ops by index).
    return {
        "compression": "snappy",
        "write_page_index": True,
        "use_dictionary": dictionary,
        "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
    }


PARQUET_LAYOUT = f"{ROW_GROUP_ROWS}-rows-delta"
"""Names the layout :func:`write_parquet` produces (a cache of generated files keys on it)."""


def read_metadata(path: Path | str, kind: str) -> dict[str, str]:
    """The ``tidemark.*`` metadata of a Parquet file, after checking its kind and version."""
    return read_footer(path, kind)[0]


def read_footer(path: Path | str, kind: str) -> tuple[dict[str, str], pq.FileMetaData]:
    """The ``tidemark.*`` metadata of a Parquet file (kind and version checked) and its whole footer.

    One footer read serves both the metadata and the column statistics a caller may need
    (:func:`holds_only`): a batch of thousands of small runs pays per file opened, and
    ``pq.read_schema`` costs several times a bare footer read.
    """
    path = Path(path)
    try:
        footer = pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid) as error:
        raise HistoryFormatError(path, None, f"not a readable Parquet file ({error})") from None
    raw = footer.metadata or {}
    meta = {
        k.decode()[len(METADATA_PREFIX) :]: v.decode()
        for k, v in raw.items()
        if k.startswith(METADATA_PREFIX.encode())
    }
    if meta.get("kind") != kind:
        raise HistoryFormatError(path, None, f"not a Tidemark {kind} file (kind {meta.get('kind')!r})")
    if meta.get("schema_version") != str(HISTORY_SCHEMA_VERSION):
        raise HistoryFormatError(
            path,
            None,
            f"schema version {meta.get('schema_version')!r} is not supported (this Tidemark reads {HISTORY_SCHEMA_VERSION})",
        )
    return meta, footer


def holds_only(footer: pq.FileMetaData, name: str, value: object) -> bool:
    """Whether the footer statistics prove every row has ``value`` in column ``name`` (no data read)."""
    try:
        column = footer.schema.names.index(name)
    except ValueError:
        return False
    for group in range(footer.num_row_groups):
        stats = footer.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return False
        if stats.min != value or stats.max != value:
            return False
    return True
