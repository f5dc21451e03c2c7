"""Packing loaded runs into a packed store (:mod:`testbed.record.packed`), and verifying one.

:func:`pack_runs` takes runs as :func:`checker.api.load_runs` made them -- so every history,
replica and event table exists in Parquet, converted from the JSON lines and dumps where
needed -- and writes each table's rows into one file per bucket, each run's rows whole row
groups, sorted by run id, plus the index (``runs.parquet``,
:mod:`checker.packed_runs` reads it back into :class:`checker.evidence.RunInput`).  The run
directories are only read.

Nothing is taken on trust: before the index is written, every run's rows are read back from the
packed files and compared, run by run and table by table, with the run directory's own file --
row count and a content digest (:mod:`checker.digest`, computed from the run directory's rows as
they were packed) -- and :class:`PackError` names the run and table that differ.
:func:`verify_pack` (``tidemark store verify``) checks a store packed earlier the same way and
reads the run directories' files again too, so it also names a run directory changed since.

Refused, with the run named: two runs with one run id (a copied run directory: in one bucketed
table they would be one run), and a run file holding other runs' rows (written by hand).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checker.digest import Digests, content_digest
from checker.evidence import RunInput
from checker.packed_runs import INDEX_SCHEMA, PackedRun, read_index, run_dir_of, slice_of
from testbed.record.history import ROW_GROUP_ROWS, parquet_options
from testbed.record.packed import (
    BUCKETS_KEY,
    EVENTS,
    HISTORY,
    INDEX_FILE,
    PACKED_FORMAT,
    PACKED_VERSION,
    REPLICA_PARTITIONS,
    REPLICAS,
    TABLE_SCHEMAS,
    RowSlice,
    bucket_count,
    bucket_file_name,
    bucket_of,
    table_dir,
)
from testbed.record.rundir import RunDir


class PackError(Exception):
    """Runs that cannot be packed, or a packed store that does not match its runs: the message names them."""


@dataclasses.dataclass(frozen=True, slots=True)
class PackSummary:
    runs: int
    buckets: int
    rows: dict[str, int]
    """Rows written per table."""


def _sources(run: RunInput) -> dict[str, tuple[Path, int] | None]:
    """Each table's file in the run directory and the run id its rows carry (None: no such table)."""
    return {
        HISTORY: (run.history_path, run.history_run_id),
        REPLICAS: None
        if run.replicas_path is None or run.replicas_run_id is None
        else (
            run.replicas_path,
            run.replicas_run_id,
        ),
        REPLICA_PARTITIONS: None
        if run.replicas_path is None or run.replicas_run_id is None
        else (
            RunDir(run.run_dir).replica_partitions,
            run.replicas_run_id,
        ),
        EVENTS: None
        if run.events_path is None or run.events_run_id is None
        else (
            run.events_path,
            run.events_run_id,
        ),
    }


def _check_packable(runs: Sequence[RunInput]) -> None:
    if not runs:
        raise PackError("no runs to pack")
    for table in TABLE_SCHEMAS:
        seen: dict[int, Path] = {}
        for run in runs:
            source = _sources(run)[table]
            if source is None:
                continue
            if source[1] in seen:
                raise PackError(
                    f"{run.run_dir}: run id {source[1]} of its {table} is also {seen[source[1]]}'s"
                    " (a copied run directory?); pack them apart"
                )
            seen[source[1]] = run.run_dir
    for run in runs:
        if run.history_slice is not None or run.replicas_slice is not None or run.events_slice is not None:
            raise PackError(f"{run.run_dir}: already packed; pack run directories")
        if not run.history_holds_one_run or (run.replicas_path is not None and not run.replicas_hold_one_run):
            raise PackError(f"{run.run_dir}: a table of the run holds rows of other run ids")


def _source_table(run: RunInput, table: str, path: Path, run_id: int) -> pa.Table:
    """A run directory's table with the packed schema (no per-run metadata), its rows checked to be the run's."""
    schema = TABLE_SCHEMAS[table]
    try:
        rows = pq.ParquetFile(path).read(use_threads=False)
        rows = rows.select(schema.names).cast(schema)
    except (OSError, KeyError, pa.ArrowException) as error:
        raise PackError(f"{run.run_dir}: {path.name} does not have the {table} schema ({error})") from None
    ids = rows.column("run_id")
    if rows.num_rows and (
        ids.null_count or pa.compute.min_max(ids).as_py() != {"min": run_id, "max": run_id}
    ):
        raise PackError(f"{run.run_dir}: {path.name} holds rows of other run ids than {run_id}")
    return rows


def _write_bucket(target: Path, tables: list[pa.Table], schema: pa.Schema, buckets: int) -> list[RowSlice]:
    """Write the runs' ``tables`` in order, each starting a row group; where each one's rows went."""
    partial = target.with_name(target.name + ".partial")
    described = schema.with_metadata({BUCKETS_KEY: str(buckets)})
    with pq.ParquetWriter(partial, described, **parquet_options(schema)) as writer:
        for rows in tables:
            if rows.num_rows:
                writer.write_table(
                    rows.replace_schema_metadata(described.metadata), row_group_size=ROW_GROUP_ROWS
                )
    footer = pq.read_metadata(partial)
    sizes = [footer.row_group(g).num_rows for g in range(footer.num_row_groups)]
    placed, group, row = [], 0, 0
    for rows in tables:
        first, left = group, rows.num_rows
        while left > 0:
            left -= sizes[group]
            group += 1
        if left != 0:
            raise PackError(f"{target}: row groups do not follow run boundaries")
        placed.append(RowSlice(first, group - first, row, rows.num_rows))
        row += rows.num_rows
    os.replace(partial, target)
    return placed


def pack_runs(
    runs: Sequence[RunInput],
    out: Path,
    cores: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> PackSummary:
    """Pack ``runs`` (loaded by :func:`checker.api.load_runs`) into the new directory ``out``, then verify it.

    ``cores``: for the bucket count (:func:`testbed.record.packed.bucket_count`), default this
    machine's.  ``out`` must not exist or be empty; on any error it is left without an index
    (so never mistaken for a packed store)."""
    _check_packable(runs)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PackError(f"{out}: exists and is not an empty directory")
    buckets = bucket_count([run.history_rows for run in runs], cores or os.cpu_count() or 1)
    packed = [PackedRun.of(run, out) for run in runs]
    written: dict[str, int] = {}
    for table, schema in TABLE_SCHEMAS.items():
        members = [(number, _sources(run)[table]) for number, run in enumerate(runs)]
        present = [(number, source) for number, source in members if source is not None]
        if not present:
            continue
        folder = table_dir(out, table)
        folder.mkdir(parents=True, exist_ok=True)
        by_bucket: dict[int, list[tuple[int, Path, int]]] = {}
        for number, (path, run_id) in present:
            by_bucket.setdefault(bucket_of(run_id, buckets), []).append((number, path, run_id))
        for bucket, members_of in sorted(by_bucket.items()):
            members_of.sort(key=lambda member: member[2])
            tables = [_source_table(runs[n], table, path, run_id) for n, path, run_id in members_of]
            name = bucket_file_name(bucket, bucket)
            placed = _write_bucket(folder / name, tables, schema, buckets)
            # Digested from the run directories' rows, all of the bucket's at once (checker.digest).
            digests = Digests(pa.concat_tables(tables))
            for (number, _, _), where in zip(members_of, placed, strict=True):
                packed[number].place(
                    table, name, where, digests.of(where.first_row, where.first_row + where.rows)
                )
            written[table] = written.get(table, 0) + sum(rows.num_rows for rows in tables)
            if progress is not None:
                progress(f"{table} bucket {bucket}: {len(members_of)} run(s)")
    index = pa.Table.from_pylist([run.row() for run in packed], schema=INDEX_SCHEMA)
    index = index.replace_schema_metadata(
        {
            "tidemark.format": PACKED_FORMAT,
            "tidemark.packed_version": str(PACKED_VERSION),
            BUCKETS_KEY: str(buckets),
        }
    )
    verify_rows(out, [run.row() for run in packed], sources=False)
    partial = out / (INDEX_FILE + ".partial")
    pq.write_table(index, partial)
    os.replace(partial, out / INDEX_FILE)
    return PackSummary(len(runs), buckets, written)


VERIFY_THREADS = 2
"""Packed files verified at once: reading, decoding and hashing release the GIL."""
VERIFY_CHUNK_ROWS = 1 << 20
"""Rows of a packed file read and digested together (consecutive runs, never split)."""


def verify_rows(out: Path, rows: Sequence[dict[str, Any]], *, sources: bool = True) -> None:
    """Compare every run's packed rows with its run directory's files (see the module docstring).

    Each packed file is read once, :data:`VERIFY_CHUNK_ROWS` rows of whole runs at a time, and
    every run's rows there are checked against the index: its row groups, row count and digest.
    ``sources`` also compares the index with the run directories' files as they are now, run by
    run; packing does not, having just made the digests from those files' rows."""
    files: dict[tuple[str, str], list[tuple[dict[str, Any], RowSlice]]] = {}
    for row in rows:
        for table in TABLE_SCHEMAS:
            located = slice_of(row, table)
            if located is not None:
                files.setdefault((table, located[0]), []).append((row, located[1]))

    def verify(key: tuple[str, str]) -> None:
        table, name = key
        path = table_dir(out, table) / name
        footer = pq.read_metadata(path)
        starts = np.cumsum([0, *(footer.row_group(g).num_rows for g in range(footer.num_row_groups))])
        runs = sorted(files[key], key=lambda run: run[1].first_row)
        for chunk in _chunks(runs):
            first, last = chunk[0][1], chunk[-1][1]
            groups = list(range(first.first_group, last.first_group + last.groups))
            read = pq.ParquetFile(path, metadata=footer).read_row_groups(groups, use_threads=False)
            # Cast: nested fields come back under Parquet's names (list<element>), not Arrow's (list<item>).
            digests = Digests(read.cast(TABLE_SCHEMAS[table]))
            base = int(starts[first.first_group]) if groups else first.first_row
            for row, at in chunk:
                end = at.first_group + at.groups
                fits = end <= footer.num_row_groups and (
                    int(starts[at.first_group]) == at.first_row and int(starts[end]) - at.first_row == at.rows
                )
                low = at.first_row - base
                if (
                    not fits
                    or low + at.rows > digests.rows
                    or digests.of(low, low + at.rows) != row[f"{table}_digest"]
                ):
                    raise PackError(
                        f"{run_dir_of(row, out)}: {table} rows packed in {name} differ from the run directory's"
                        f" (index: {at.rows} row(s) from row {at.first_row})"
                    )
                if sources:
                    _verify_source(run_dir_of(row, out), table, row, at.rows)

    with concurrent.futures.ThreadPoolExecutor(max_workers=VERIFY_THREADS) as pool:
        list(pool.map(verify, sorted(files)))


def _chunks(runs: list[tuple[dict[str, Any], RowSlice]]) -> list[list[tuple[dict[str, Any], RowSlice]]]:
    """Runs in file order, cut into chunks of about :data:`VERIFY_CHUNK_ROWS` rows."""
    chunks: list[list[tuple[dict[str, Any], RowSlice]]] = [[]]
    rows = 0
    for run in runs:
        if chunks[-1] and rows + run[1].rows > VERIFY_CHUNK_ROWS:
            chunks.append([])
            rows = 0
        chunks[-1].append(run)
        rows += run[1].rows
    return chunks


def _verify_source(run_dir: Path, table: str, row: dict[str, Any], packed_rows: int) -> None:
    """The run directory's file of ``table`` still holds the rows packed (count and digest)."""
    source = _source_path(run_dir, table)
    if not source.is_file():
        raise PackError(f"{run_dir}: its {table} is packed but the run directory has no such file")
    original = pq.ParquetFile(source).read(use_threads=False)
    original = original.select(TABLE_SCHEMAS[table].names).cast(TABLE_SCHEMAS[table])
    if original.num_rows != packed_rows:
        raise PackError(
            f"{run_dir}: {table} has {original.num_rows} row(s) in the run directory, {packed_rows} packed"
        )
    if content_digest(original) != row[f"{table}_digest"]:
        raise PackError(f"{run_dir}: {table} rows of the run directory differ from those packed")


def _source_path(run_dir: Path, table: str) -> Path:
    directory = RunDir(run_dir)
    return {
        HISTORY: directory.history_parquet,
        REPLICAS: directory.replicas,
        REPLICA_PARTITIONS: directory.replica_partitions,
        EVENTS: directory.events,
    }[table]


def verify_pack(out: Path) -> int:
    """Verify a packed store against its run directories (see the module docstring); the runs checked."""
    rows = read_index(out)
    verify_rows(out, rows)
    return len(rows)


def remove_partial(out: Path) -> None:
    """Remove a store whose packing failed (it has no index): nothing half-written stays behind."""
    if out.is_dir() and not (out / INDEX_FILE).exists():
        shutil.rmtree(out)
