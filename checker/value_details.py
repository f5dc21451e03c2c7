"""The details of the value checks' examples and the ops they show, from one read of their rows.

For the values the Spark engine's value checks picked as examples, the driver needs every
history row holding them (what the checks aggregate, for these values alone) and the rows of
the ops the examples show.  Both are read here, once, on the driver:

* every op an example shows is a send or a read *of its value*, so a file's ``index`` and
  ``value`` columns find the ops, and only the row groups holding their rows are read whole;
* a run's own file is read a row group at a time (big runs), or whole (small ones);
* packed runs are read by chunks of consecutive runs of one file (:data:`PACKED_CHUNK_ROWS`):
  per run, the read and a dozen Arrow calls were most of a check of thousands of small runs.

Why apart from :mod:`checker.fetch`: this read answers two questions at once (the details and
``Engine.fetch_ops`` for the value examples' keys) and is the Spark engine's alone; the rules
of which rows are shown stay in :mod:`checker.example_rules`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from checker.engine import HISTORY_ROW_COLUMNS, to_pandas
from checker.evidence import RunInput
from checker.example_rules import example_op_keys, ints, select_example_rows
from checker.run_reads import (
    DICTIONARY_COLUMNS,
    READ_THREADS,
    SMALL_FILE_ROWS,
    history_jobs,
    joined,
    opened,
    positions_where,
    rows_of_ops,
)
from harness.record.history import HISTORY_SCHEMA
from harness.record.packed import RowSlice, open_packed

VALUE_ROW_COLUMNS = ("run_id", "index", "f", "type", "partition", "offset", "value")
_VALUE_ROWS_SCHEMA = pa.schema([HISTORY_SCHEMA.field(name) for name in VALUE_ROW_COLUMNS])


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
        parquet, run_groups, _ = opened(path, located)
        values = pa.array(ints(wanted["value"]), pa.int64())
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
                [
                    group["index"].to_numpy()[positions_where(pc.is_in(group["value"], values))]
                    for group in keys
                ]
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

    jobs = history_jobs(runs, shown)
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
    value_rows = to_pandas(joined([rows for rows, _ in found]))
    details = aggregate(value_rows.merge(shown[columns].drop_duplicates(), on=columns))
    keys = example_op_keys(details.assign(value_text=None))
    kept = to_pandas(joined([table for _, table in found]))
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
    values = pa.array(sorted({v for _, wanted in items for v in ints(wanted["value"])}), pa.int64())
    holding = pc.is_in(table["value"], values)
    value_rows = table.select(list(VALUE_ROW_COLUMNS)).filter(holding)
    # Ops as (run, index) pairs, each run numbered within the chunk: exact, however runs' indexes overlap.
    _, run_number = np.unique(table["run_id"].to_numpy(), return_inverse=True)
    index = table["index"].to_numpy()
    op_key = run_number.astype(np.int64) * (int(index.max(initial=0)) + 1) + index
    in_ops = np.isin(op_key, op_key[positions_where(holding)])
    of_ops = table.filter(pa.array(in_ops))
    kept = of_ops.filter(pc.or_kleene(pc.is_null(of_ops["item"]), pc.is_in(of_ops["value"], values)))
    return value_rows, kept
