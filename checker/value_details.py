"""The details of the value checks' examples and the ops they show, from one read of their rows.

For the values the Spark engine's value checks picked as examples, the driver needs every
history row holding them (what the checks aggregate, for these values alone) and the rows of
the ops the examples show.  Both are read here, once, on the driver:

* every op an example shows is a send or a read *of its value*, so a file's ``index`` and
  ``value`` columns find the ops, and only the row groups holding their rows are read whole;
* a run's own file, or a big run of a packed file, is read a row group at a time (big runs),
  or whole (small ones);
* the small runs of a packed file are read by one scan of the file for the whole pass
  (:mod:`checker.packed_scan`): per run, the read and a dozen Arrow calls were most of a check
  of thousands of small runs, and by chunks of runs every column of every row was still read
  and filtered (at 10,000 packed runs of 1 k rows: 6.3 CPU-seconds, 3.8 by the scan).

Why apart from :mod:`checker.fetch`: this read answers two questions at once (the details and
``Engine.fetch_ops`` for the value examples' keys) and is the Spark engine's alone; the rules
of which rows are shown stay in :mod:`checker.example_rules`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from checker.engine import HISTORY_ROW_COLUMNS, to_pandas
from checker.evidence import RunInput
from checker.example_rules import example_op_keys, ints, select_example_rows
from checker.packed_scan import Pairs, int_values, scan, scanned, scanned_history
from checker.run_reads import (
    READ_THREADS,
    SMALL_FILE_ROWS,
    history_jobs,
    joined,
    opened,
    positions_where,
    rows_of_ops,
)
from testbed.record.history import HISTORY_SCHEMA
from testbed.record.packed import RowSlice

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
    were delta-encoded (:data:`testbed.record.history.DELTA_COLUMNS`).
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

    jobs = history_jobs([run for run in runs if not scanned(run.history_slice)], shown)
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        found = list(pool.map(lambda job: locate(*job), jobs))
    found += _scanned_values(runs, shown)
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


def _scanned_values(runs: list[RunInput], shown: pd.DataFrame) -> list[tuple[pa.Table, pa.Table]]:
    """The value rows and the shown ops' rows (as ``locate`` in :func:`value_details_with_ops`) of
    the small packed runs, a file's scan at a time (:func:`checker.packed_scan.scan`).

    Per run, the read and a dozen Arrow calls were 48 s of a 159 s check of 10,000 packed runs;
    by chunks of runs, 6.3 CPU-seconds.  Here a value is matched as its exact (run, value) pair
    (a value shown in one run may be held by another), and each op by its exact (run, index)
    pair: only the key columns are read for every row, the others for the row groups holding a
    shown row."""
    slices = scanned_history(runs, shown)
    if not slices:
        return []
    values = Pairs(shown["run_id"].to_numpy(np.int64), shown["value"].to_numpy(np.int64))

    def pick(keyed: pa.Table) -> list[npt.NDArray[np.int64]]:
        run_ids, _ = int_values(keyed["run_id"])
        value, known = int_values(keyed["value"])
        holding = values.holds(run_ids, value, known)
        index, _ = int_values(keyed["index"])
        ops = Pairs(run_ids[holding], index[holding])
        in_ops = ops.holds(run_ids, index, np.ones(len(index), dtype=bool))
        record_less = np.asarray(pc.is_null(keyed["item"]).to_numpy(zero_copy_only=False), dtype=bool)
        return [np.flatnonzero(holding), np.flatnonzero(in_ops & (record_less | holding))]

    rows, kept = scan(
        slices, ["run_id", "index", "value", "item"], pick, [VALUE_ROW_COLUMNS, HISTORY_ROW_COLUMNS]
    )
    # As the per-run reads, one answer (empty when no row holds a shown value) per scan.
    return [
        (
            pa.concat_tables(rows) if rows else _VALUE_ROWS_SCHEMA.empty_table(),
            pa.concat_tables(kept) if kept else HISTORY_SCHEMA.empty_table(),
        )
    ]
