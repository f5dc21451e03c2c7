"""Row counts, drain status, order checks and liveness of a pass of many small runs, on the driver.

Both answers need every history row, but only a few narrow columns
(:data:`checker.pandas.counts.COLUMNS`), and the value checks wait for the drain status.
As a Spark job over thousands of small files they were a scan whose cost was the files,
not the rows: each file opened and its footer parsed by a task, plus a query of its own for
a fresh JVM to plan and compile.  Measured at 1000 runs of 10 k rows: 3.5 s of wall time
and 2.9 CPU-seconds of tasks in a fresh JVM (2.2-2.7 s warm), against 0.1-0.2 ms per
column and file for pyarrow, a few threads at once.

So, when every history file holds one run (its footer proves it) and the runs are small
(:data:`SMALL_RUN_ROWS` on average), the files are read here, a chunk of about
:data:`CHUNK_ROWS` rows at a time (memory stays bounded, however many runs), and counted by
the pandas engine's own functions (:mod:`checker.pandas.counts`): one implementation of
both answers, for both engines.  A run's rows are all in its one file (or, in a packed store,
its own row groups of one file: :mod:`testbed.record.packed`), hence in one chunk,
so the chunks' answers only need concatenating.  Big runs keep the Spark job, which reads
their row groups on every core.

The order checks and the liveness figures of such a pass are answered the same way
(:func:`by_chunks`, by the pandas engine's own implementation of each), for the same reason at a
larger scale: as Spark jobs they are windows over (run, partition) -- a sort and several window
stages for every small run -- and measured at 1000 runs of 10 k rows under load they took
171 s and 201 s of a 255 s pass whose core three checks took 47 s (``bench/checker.py
--checks all``).  Both engines' implementations are held to the same answers by the parity
tests, which run the Spark jobs too (``SparkEngine.small_runs_in_spark``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from checker import run_reads
from checker.evidence import RunInput
from checker.pandas import candidates, counts
from checker.pandas.engine import PandasEngine

SMALL_RUN_ROWS = run_reads.SMALL_FILE_ROWS
"""History rows per run, on average, up to which a pass is counted here."""
CHUNK_ROWS = 1_000_000
"""Rows read and counted together: the columns of one chunk are about 27 MB."""


def applies(runs: Sequence[RunInput]) -> bool:
    """Whether the pass's counts are read here: many small runs, each alone in its file (or its row groups)."""
    return (
        bool(runs)
        and all(run.history_holds_one_run for run in runs)
        and sum(run.history_rows for run in runs) <= SMALL_RUN_ROWS * len(runs)
    )


def _chunks(runs: Sequence[RunInput]) -> list[list[RunInput]]:
    """The runs in the order of their rows in storage (:func:`_stored`), cut into chunks of about
    :data:`CHUNK_ROWS` rows (a run is never split)."""
    chunks: list[list[RunInput]] = [[]]
    rows = 0
    for run in _stored(runs):
        if chunks[-1] and rows + run.history_rows > CHUNK_ROWS:
            chunks.append([])
            rows = 0
        chunks[-1].append(run)
        rows += run.history_rows
    return chunks


def _stored(runs: Sequence[RunInput]) -> list[RunInput]:
    """``runs`` by file and, in a packed file, by first row: a packed store's index lists its runs
    by run, and a file holds the runs of one bucket, so in the pass's order a chunk's runs were
    scattered over every file and each was a read of its own; in this order a chunk is a few
    reads of consecutive row groups (:func:`checker.run_reads.read_runs`)."""
    return sorted(
        runs,
        key=lambda run: (str(run.history_path), run.history_slice.first_row if run.history_slice else 0),
    )


def _counted(chunk: list[RunInput]) -> tuple[pd.DataFrame, pd.DataFrame]:
    names = list(counts.COLUMNS)
    located = [(run.history_path, run.history_slice) for run in chunk]
    columns = candidates.Columns(run_reads.read_runs(located, names, ()))
    return counts.row_counts(columns), counts.drain_status(columns)


def by_chunks(runs: Sequence[RunInput], answer: Callable[[list[RunInput]], pd.DataFrame]) -> pd.DataFrame:
    """``answer`` of each chunk of ``runs`` (a run is never split), concatenated in run order.

    For a question whose answer is per run -- every row keyed by ``run_id``, examples cut per run
    -- so the chunks' answers are the pass's.  The chunks go one after another: memory holds one
    chunk's columns, however many runs.  They follow storage (:func:`_chunks`); the answer is put
    back in the pass's order of runs, each run's rows as answered."""
    answers = [answer(chunk) for chunk in _chunks(runs)]
    found = pd.concat(answers, ignore_index=True) if len(answers) > 1 else answers[0]
    if found.empty:
        return found
    place = {run.history_run_id: number for number, run in enumerate(runs)}
    order = np.argsort(found["run_id"].map(place).to_numpy(), kind="stable")
    return found.iloc[order].reset_index(drop=True)


def row_counts_and_drains(runs: Sequence[RunInput]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``Engine.row_counts`` and ``Engine.drain_status`` of ``runs`` (for which :func:`applies`)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=run_reads.READ_THREADS) as pool:
        answers = list(pool.map(_counted, _chunks(runs)))
    rows = pd.concat([rows for rows, _ in answers], ignore_index=True)
    drains = pd.concat([drains for _, drains in answers], ignore_index=True)
    return (
        rows.sort_values(["run_id", "f", "type", "is_record"], ignore_index=True),
        drains.sort_values(["run_id", "partition"], ignore_index=True),
    )


def order_anomalies(runs: Sequence[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
    """``Engine.order_anomalies`` of ``runs`` (for which :func:`applies`), by the pandas engine."""
    return by_chunks(runs, lambda chunk: PandasEngine().order_anomalies(chunk, checks, limit))


def liveness(runs: Sequence[RunInput], windows: pd.DataFrame, heals: pd.DataFrame) -> pd.DataFrame:
    """``Engine.liveness`` of ``runs`` (for which :func:`applies`), by the pandas engine; each
    chunk gets the fault windows and last heals of its own runs."""

    def chunk_liveness(chunk: list[RunInput]) -> pd.DataFrame:
        ids = [run.history_run_id for run in chunk]
        mine, healed = windows[windows["run_id"].isin(ids)], heals[heals["run_id"].isin(ids)]
        return PandasEngine().liveness(chunk, mine, healed)

    return by_chunks(runs, chunk_liveness).sort_values(["run_id", "partition"], ignore_index=True)
