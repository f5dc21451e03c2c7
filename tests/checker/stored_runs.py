"""Small stored runs, in their run directories and packed, for the tests of the driver-side reads.

:func:`small_store` writes a few runs with :func:`checker.synthetic_runs.generate_run` (planted lost
writes, duplicates and divergent replica positions in every run, as in the bench) and packs them
into few files, so that every file holds several runs: what the reads of a packed store must
keep apart.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from checker.api import load_runs
from checker.engine import to_pandas
from checker.evidence import RunInput
from checker.pack import pack_runs
from checker.packed_runs import load_packed
from checker.synthetic_runs import generate_run

RUNS = 6
ROWS = 700


def small_store(root: Path) -> tuple[list[RunInput], list[RunInput]]:
    """The same runs loaded from their directories and from their packed store (in that order)."""
    dirs = [root / "runs" / f"run-{number}" for number in range(RUNS)]
    for number, run_dir in enumerate(dirs):
        generate_run(run_dir, ROWS, seed=number + 1)
    direct = load_runs(dirs)
    pack_runs(direct, root / "packed", cores=1)
    packed = load_packed(root / "packed")
    assert all(run.history_slice is not None for run in packed), "the runs must be read from the store"
    assert len({run.history_path for run in packed}) < len(packed), "some file must hold several runs"
    return direct, packed


def history(runs: list[RunInput]) -> pd.DataFrame:
    """Every history row of ``runs``, read from their own files, as the engines' frames are."""
    return to_pandas(pa.concat_tables([pq.read_table(run.history_path) for run in runs]))


def replicas(runs: list[RunInput]) -> pd.DataFrame:
    """Every replica row of ``runs`` of their topic, read from their own files."""
    frames = []
    for run in runs:
        assert run.replicas_path is not None
        rows = to_pandas(pq.read_table(run.replicas_path))
        frames.append(rows[rows["topic"] == run.topic])
    return pd.concat(frames, ignore_index=True)


def positions(rows: pd.DataFrame) -> pd.DataFrame:
    """Keys ``run_id, partition, offset``: two stored positions of each run, other runs' than the
    other runs' (so a read that lent one run's rows to another's keys would be seen), and one
    position no run has."""
    stored = rows[["run_id", "partition", "offset"]].dropna().drop_duplicates()
    keys = []
    for number, (_, of_run) in enumerate(stored.groupby("run_id")):
        keys.append(of_run[of_run["offset"] == number + 1].head(2))
    missing = keys[0].head(1).assign(offset=10**9)
    return pd.concat([*keys, missing], ignore_index=True)


def by_run(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` sorted by run (stable: each run's rows in their order) -- how the driver reads answers."""
    return frame.sort_values("run_id", kind="stable").reset_index(drop=True)
