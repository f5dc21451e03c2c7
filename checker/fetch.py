"""``Engine.fetch_ops``, ``fetch_observations`` and ``fetch_replica_records``, read on the driver.

The examples of a pass name a few hundred rows out of millions; both engines answer these
questions here, with pyarrow, from the runs' files, a run's file (or its slice of a packed
file) at a time, :data:`checker.run_reads.READ_THREADS` files at once:

* Every run numbers its ops and offsets from 0, so one filter over all files of a pass (what a
  Spark job would push down) matches row groups in every file.  Per file, the footer
  statistics of ``index`` (ops are stored in index order) and of ``partition``/``offset``
  (replica rows are stored in log order) select only the row groups that hold the examples
  (:data:`testbed.record.history.ROW_GROUP_ROWS` rows each).
* Measured on 50 runs of 1 M ops with 10 example ops each: Spark's fetch jobs took 7-10 s
  (reading 40 M rows); these reads, four files at a time, 3-4 s.
* Each file's candidates stay in Arrow (a superset, :mod:`checker.example_rules`); the exact
  rule runs once over the whole pass's candidates, since its pandas steps cost milliseconds per
  call -- per file, the whole cost of fetching from thousands of small runs.
* The small runs of a packed file are not read a run at a time but by one scan of the file for
  the whole pass (:mod:`checker.packed_scan`): measured at 10,000 packed runs of 1 k rows, the
  replica records of their 10,000 examples took 6.2 CPU-seconds a run at a time, 1.8 so.

The driver already reads every run's footers (:mod:`checker.evidence`), so this asks nothing
new of where the files live.  The value checks' examples fetch their ops with their details
(:mod:`checker.value_details`); this module serves the rest.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from checker.engine import HISTORY_ROW_COLUMNS, REPLICA_ROW_COLUMNS, to_pandas
from checker.evidence import RunInput
from checker.example_rules import (
    OP_FILTER_COLUMNS,
    POSITION,
    at_positions,
    ints,
    may_show,
    observations,
    op_superset,
    select_example_rows,
)
from checker.packed_scan import Pairs, int_values, scan, scanned, scanned_history
from checker.run_reads import (
    READ_THREADS,
    SMALL_FILE_ROWS,
    history_jobs,
    joined,
    opened,
    positions_where,
    read_rows,
    rows_of_ops,
)
from testbed.record.packed import RowSlice


def fetch_ops(runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_ops``: the example ops' rows, never a whole drain op.

    Each file gives its candidate rows in Arrow (:func:`_op_candidates`; the small runs of a
    packed file, its scan: :func:`_scanned_ops`); the exact rule (:func:`select_example_rows`)
    runs once over all of them, as for positions.
    """
    jobs = history_jobs([run for run in runs if not scanned(run.history_slice)], keys)
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        tables = [table for table in pool.map(lambda job: _op_candidates(*job), jobs) if table.num_rows]
    tables += _scanned_ops(runs, keys)
    if not tables:
        return pd.DataFrame(columns=list(HISTORY_ROW_COLUMNS))
    return select_example_rows(to_pandas(joined(tables)), keys)


def _scanned_ops(runs: list[RunInput], keys: pd.DataFrame) -> list[pa.Table]:
    """:func:`_op_candidates` of the small packed runs, one scan per file (:mod:`checker.packed_scan`):
    the rows of the keys' exact (run, index) pairs that :func:`may_show` allows."""
    slices = scanned_history(runs, keys)
    if not slices:
        return []
    known = keys[keys["index"].notna()]
    ops = Pairs(known["run_id"].to_numpy(np.int64), known["index"].to_numpy(np.int64))

    def pick(keyed: pa.Table) -> list[npt.NDArray[np.int64]]:
        run_ids, _ = int_values(keyed["run_id"])
        index, valid = int_values(keyed["index"])
        of_ops = np.flatnonzero(ops.holds(run_ids, index, valid))
        return [of_ops[positions_where(may_show(keyed.take(pa.array(of_ops)), keys))]]

    (tables,) = scan(slices, OP_FILTER_COLUMNS, pick, [HISTORY_ROW_COLUMNS])
    return tables


def _op_candidates(path: Path, located: RowSlice | None, wanted: pd.DataFrame) -> pa.Table:
    """A superset of the rows of ``path`` that :func:`ops_in` keeps for ``wanted``, in Arrow.

    Ops are stored in index order, so the footer's ``index`` statistics skip the row groups
    that hold none of the ops, and :func:`rows_of_ops` finds their rows in the others; only
    those rows are read whole.  (``pq.read_table`` with a filter did the same through the
    dataset machinery, at ten times the fixed cost per file.)
    """
    parquet, groups, start = opened(path, located)
    metadata = parquet.metadata
    indexes = np.array(ints(wanted["index"]), dtype=np.int64)
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
    return op_superset(read_rows(parquet, rows, HISTORY_ROW_COLUMNS), wanted)


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
    parquet, run_groups, _ = opened(path, located)
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
        local = positions_where(
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
        (path, located, by_run[run_id], topic)
        for run_id, path, located, topic in files
        if run_id in by_run and not scanned(located)
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        tables = [
            table
            for table in pool.map(lambda job: _candidates_at(job[0], job[1], job[2], columns, job[3]), jobs)
            if table.num_rows
        ]
    tables += _scanned_at([file for file in files if file[0] in by_run and scanned(file[2])], keys, columns)
    if not tables:
        return pd.DataFrame(columns=list(columns))
    return at_positions(joined(tables), keys)[list(columns)]


def _scanned_at(
    files: Sequence[tuple[int, Path, RowSlice | None, str | None]],
    keys: pd.DataFrame,
    columns: tuple[str, ...],
) -> list[pa.Table]:
    """:func:`_candidates_at` of small packed runs, one scan per file (:mod:`checker.packed_scan`):
    the rows of the keys' exact (run, offset) pairs, and of their run's topic."""
    if not files:
        return []
    known = keys[POSITION].dropna()
    at = Pairs(known["run_id"].to_numpy(np.int64), known["offset"].to_numpy(np.int64))
    topics: dict[str, list[int]] = {}
    for run_id, _, _, topic in files:
        if topic is not None:
            topics.setdefault(topic, []).append(run_id)
    with_topic = ["topic"] if topics else []

    def pick(keyed: pa.Table) -> list[npt.NDArray[np.int64]]:
        run_ids, _ = int_values(keyed["run_id"])
        offset, valid = int_values(keyed["offset"])
        rows = np.flatnonzero(at.holds(run_ids, offset, valid))
        if topics:
            of_rows = keyed["topic"].take(pa.array(rows))
            own = np.zeros(len(rows), dtype=bool)
            for topic, ids in topics.items():
                own |= np.isin(run_ids[rows], ids) & _true(pc.equal(of_rows, topic))
            rows = rows[own]
        return [rows]

    wanted = [*columns, *(name for name in with_topic if name not in columns)]
    located = [(path, at_slice) for _, path, at_slice, _ in files if at_slice is not None]
    (tables,) = scan(located, ["run_id", "offset", *with_topic], pick, [wanted])
    return tables


def _true(mask: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.bool_]:
    """A (nullable) boolean mask as numpy, null as false."""
    return np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


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
