"""The index of a packed store (``runs.parquet``): its schema, and the runs it describes as RunInputs.

A packed store (:mod:`testbed.record.packed`) is checked like its run directories: every run
becomes a :class:`checker.evidence.RunInput` whose paths are the packed files and whose
``*_slice`` fields say where its rows are, while ``run_dir`` stays the original run directory
(its ``results.json`` is written there, as by a check of the directory itself).

Why an index and not the files' footers: loading thousands of runs from their own footers was
the driver's whole cost at 10,000 runs (18.9 s), so everything :func:`checker.evidence.load_run`
would have learnt from a run's files -- spec, replica nodes, missing dumps, high watermarks,
what is incomplete or not applicable -- is recorded once, when packing, one row per run, in
plain columns (JSON text for the nested ones) that DuckDB or pyarrow can query as they stand.

The index is written by :mod:`checker.pack` (with :class:`PackedRun`) and read here only: one
owner of its columns.  A store that is not a packed store of this version is an
:class:`checker.evidence.InputError` naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from checker.evidence import InputError, RunInput
from testbed.record.packed import (
    EVENTS,
    HISTORY,
    INDEX_FILE,
    PACKED_FORMAT,
    PACKED_VERSION,
    REPLICAS,
    TABLE_SCHEMAS,
    RowSlice,
    table_dir,
)

_JSON_FIELDS = (
    "spec",
    "replica_nodes",
    "missing_nodes",
    "incomplete",
    "high_watermarks",
    "not_applicable",
    "replica_log_sizes",
)
"""RunInput fields stored as JSON text."""
_PLAIN_FIELDS: list[tuple[str, pa.DataType]] = [
    ("run_dir", pa.string()),
    ("topic", pa.string()),
    ("partitions", pa.int32()),
    ("history_run_id", pa.int64()),
    ("replicas_run_id", pa.int64()),
    ("events_run_id", pa.int64()),
    ("skipped_lines", pa.int64()),
    ("replicas_hold_one_topic", pa.bool_()),
]
_PLACEMENT_FIELDS: list[tuple[str, pa.DataType]] = [
    ("file", pa.string()),
    ("first_group", pa.int32()),
    ("groups", pa.int32()),
    ("first_row", pa.int64()),
    ("rows", pa.int64()),
    ("digest", pa.string()),
]
"""Per table: the file (name within the table's directory), the run's row groups and rows in it,
and the digest of its rows (:mod:`checker.digest`); null where the run has no such table."""
INDEX_SCHEMA = pa.schema(
    [
        *_PLAIN_FIELDS,
        *[(name, pa.string()) for name in _JSON_FIELDS],
        *[(f"{table}_{name}", kind) for table in TABLE_SCHEMAS for name, kind in _PLACEMENT_FIELDS],
    ]
)


@dataclasses.dataclass(slots=True)
class PackedRun:
    """One run's index row while it is being packed."""

    fields: dict[str, Any]

    @classmethod
    def of(cls, run: RunInput, store: Path) -> PackedRun:
        """``run``'s row of the index of the packed store ``store`` (see :func:`stored_run_dir`)."""
        fields: dict[str, Any] = {name: getattr(run, name) for name, _ in _PLAIN_FIELDS}
        fields["run_dir"] = stored_run_dir(run.run_dir, store)
        fields.update({name: json.dumps(getattr(run, name)) for name in _JSON_FIELDS})
        return cls(fields)

    def place(self, table: str, file: str, rows: RowSlice, digest: str) -> None:
        """Record where the run's rows of ``table`` were written (the file's row groups are whole runs)."""
        self.fields.update(
            {
                f"{table}_file": file,
                f"{table}_first_group": rows.first_group,
                f"{table}_groups": rows.groups,
                f"{table}_first_row": rows.first_row,
                f"{table}_rows": rows.rows,
                f"{table}_digest": digest,
            }
        )

    def row(self) -> dict[str, Any]:
        return self.fields


def stored_run_dir(run_dir: Path, store: Path) -> str:
    """How the index of the packed store ``store`` names ``run_dir``: relative to the store when
    both are below a common directory other than the filesystem's root (``../runs/run-0001``),
    else absolute.

    Why: a store and its runs are made and kept together (``bench/checker.py`` packs beside the
    runs, a campaign beside its run directories), and moved or copied together -- to another
    machine, another mount, a CI workspace -- where absolute paths would name directories that are
    not there.  Runs with nothing in common with the store but ``/`` stay absolute, as before:
    a path climbing to the root says nothing more."""
    target, base = run_dir.absolute(), store.absolute()
    if os.path.commonpath([target, base]) == target.anchor:
        return str(target)
    return os.path.relpath(target, base)


def run_dir_of(row: dict[str, Any], store: Path) -> Path:
    """The run directory an index row of the store ``store`` names (relative: to the store)."""
    named = Path(str(row["run_dir"]))
    return named if named.is_absolute() else Path(os.path.normpath(store.absolute() / named))


def read_index(directory: Path) -> list[dict[str, Any]]:
    """The index rows of a packed store (its format and version checked)."""
    path = directory / INDEX_FILE
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable packed store index ({error})") from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if meta.get("tidemark.format") != PACKED_FORMAT:
        raise InputError(
            f"{path}: not a Tidemark packed store index (format {meta.get('tidemark.format')!r})"
        )
    if meta.get("tidemark.packed_version") != str(PACKED_VERSION):
        raise InputError(
            f"{path}: packed store version {meta.get('tidemark.packed_version')!r} is not supported"
            f" (this Tidemark reads {PACKED_VERSION})"
        )
    missing = [name for name in INDEX_SCHEMA.names if name not in table.column_names]
    if missing:
        raise InputError(f"{path}: index lacks column(s) {', '.join(missing)}")
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def count_runs(directory: Path) -> int:
    """How many runs a packed store holds (its index's footer; 0 when it has no readable index)."""
    try:
        return int(pq.read_metadata(directory / INDEX_FILE).num_rows)
    except (OSError, pa.ArrowException):
        return 0


def slice_of(row: dict[str, Any], table: str) -> tuple[str, RowSlice] | None:
    """Where an index row's run has its rows of ``table``: (file name, slice), or None."""
    name = row.get(f"{table}_file")
    if name is None:
        return None
    return name, RowSlice(
        row[f"{table}_first_group"], row[f"{table}_groups"], row[f"{table}_first_row"], row[f"{table}_rows"]
    )


def _located(directory: Path, row: dict[str, Any], table: str) -> tuple[Path | None, RowSlice | None]:
    found = slice_of(row, table)
    if found is None:
        return None, None
    return table_dir(directory, table) / found[0], found[1]


def load_packed(directory: Path | str) -> list[RunInput]:
    """The runs of a packed store, as :func:`checker.evidence.load_run` would have loaded their directories."""
    directory = Path(directory).absolute()
    runs = []
    for row in read_index(directory):
        parsed = {name: json.loads(row[name]) for name in _JSON_FIELDS}
        history_path, history_slice = _located(directory, row, HISTORY)
        replicas_path, replicas_slice = _located(directory, row, REPLICAS)
        events_path, events_slice = _located(directory, row, EVENTS)
        if history_path is None or history_slice is None:
            raise InputError(
                f"{directory / INDEX_FILE}: run {run_dir_of(row, directory)} has no packed history"
            )
        runs.append(
            RunInput(
                run_dir=run_dir_of(row, directory),
                spec=parsed["spec"],
                topic=row["topic"],
                partitions=row["partitions"],
                history_path=history_path,
                history_run_id=row["history_run_id"],
                skipped_lines=row["skipped_lines"],
                replicas_path=replicas_path,
                replicas_run_id=row["replicas_run_id"],
                replica_nodes=parsed["replica_nodes"],
                missing_nodes=parsed["missing_nodes"],
                incomplete=parsed["incomplete"],
                high_watermarks={
                    node: {int(p): mark for p, mark in marks.items()}
                    for node, marks in parsed["high_watermarks"].items()
                },
                not_applicable=parsed["not_applicable"],
                events_path=events_path,
                events_run_id=row["events_run_id"],
                history_rows=history_slice.rows,
                replica_rows=0 if replicas_slice is None else replicas_slice.rows,
                history_holds_one_run=True,
                replicas_hold_one_run=replicas_slice is not None,
                replicas_hold_one_topic=row["replicas_hold_one_topic"],
                replica_log_sizes=parsed["replica_log_sizes"],
                history_slice=history_slice,
                replicas_slice=replicas_slice,
                events_slice=events_slice,
            )
        )
    return runs
