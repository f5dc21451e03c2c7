"""Every record of the anomalies a reader must see whole: ``anomaly_records.parquet``, per run.

``results.json`` carries at most ``--examples`` examples of each anomaly: enough to read, too few
to see.  A run that lost 350 acknowledged writes must show 350 marks on its offset plot, not five
(issue 36), and which records those are is the checker's fact -- the report must not decide
loss again (one owner per fact).  So the checker writes, beside ``results.json``, the complete
set of records of the kinds in :data:`RECORD_KINDS`:

* lost-write and lost-read -- each ``(partition, value)`` the check flags (the value's
  acknowledged send, or the poll that returned it, is where a plot marks it);
* replica-divergence -- each divergent ``(partition, offset)`` position (the count of the
  anomaly is the number of these positions).

The file (:data:`RECORDS_SCHEMA`: ``kind, partition, value, offset``, the unused one null) is
written with every check, also empty, so its presence says "the complete set is known";
:func:`read_records` answers None for a run checked before it existed (a reader then falls
back to the examples and says so).

**How the engines hand the records over.** The two questions that find these anomalies
(``Engine.value_anomalies``, ``Engine.divergence``) answer with an :class:`Answer`: the example
rows, exactly as before, and the records of their kinds in :data:`RECORD_KINDS` (``run_id, kind,
partition`` and ``value`` or ``offset``).  Both engines take the records from the aggregation
that counts them -- no second pass over the history -- and the records are a frame of their own,
so the examples' columns keep their types.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from checker.definitions import LOST_READ, LOST_WRITE, REPLICA_DIVERGENCE
from checker.evidence import RunInput
from testbed.record.rundir import RunDir

VALUE_RECORD_KINDS: Final[frozenset[str]] = frozenset({LOST_WRITE, LOST_READ})
"""Kinds whose records are values (``Engine.value_anomalies``)."""
OFFSET_RECORD_KINDS: Final[frozenset[str]] = frozenset({REPLICA_DIVERGENCE})
"""Kinds whose records are offsets (``Engine.divergence``)."""
RECORD_KINDS: Final[frozenset[str]] = VALUE_RECORD_KINDS | OFFSET_RECORD_KINDS
RECORDS_SCHEMA: Final = pa.schema(
    [("kind", pa.string()), ("partition", pa.int32()), ("value", pa.int64()), ("offset", pa.int64())]
)
COLUMNS: Final = ("run_id", *RECORDS_SCHEMA.names)
"""The columns of :attr:`Answer.records`."""


class Answer(NamedTuple):
    """What ``Engine.value_anomalies`` and ``Engine.divergence`` answer."""

    examples: pd.DataFrame
    """The example rows (at most ``limit`` per run and kind), each with its kind's total."""
    records: pd.DataFrame
    """:data:`COLUMNS`: one row per record of the question's kinds in :data:`RECORD_KINDS`."""


def no_records() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def records_of(flagged: pd.DataFrame, kinds: frozenset[str], field: str) -> pd.DataFrame:
    """The rows of ``flagged`` (one per record: ``run_id, kind, partition, FIELD``) whose kind is
    one of ``kinds``, as :data:`COLUMNS`."""
    chosen = flagged.loc[flagged["kind"].isin(kinds), ["run_id", "kind", "partition", field]]
    return chosen.reindex(columns=list(COLUMNS)).reset_index(drop=True)


def run_records(
    runs: Iterable[RunInput], values: pd.DataFrame, divergence: pd.DataFrame
) -> dict[Path, pa.Table]:
    """Each run's records (run directory -> :data:`RECORDS_SCHEMA` table, sorted): its value
    records by its history's run id, its offset records by its replicas' run id."""
    by_history = {key: _table(rows) for key, rows in values.groupby("run_id")} if len(values) else {}
    by_replicas = {key: _table(rows) for key, rows in divergence.groupby("run_id")} if len(divergence) else {}
    empty = RECORDS_SCHEMA.empty_table()
    found: dict[Path, pa.Table] = {}
    for run in runs:
        parts = [by_history.get(run.history_run_id, empty), by_replicas.get(run.replicas_run_id, empty)]
        found[run.run_dir] = pa.concat_tables(parts).sort_by(
            [(name, "ascending") for name in RECORDS_SCHEMA.names]
        )
    return found


def _table(frame: pd.DataFrame) -> pa.Table:
    """Rows of :data:`COLUMNS` as a :data:`RECORDS_SCHEMA` table (missing values null, integers exact)."""
    return pa.table(
        {
            name: pa.array(
                [None if pd.isna(item) else item for item in frame[name].tolist()],
                type=RECORDS_SCHEMA.field(name).type,
            )
            for name in RECORDS_SCHEMA.names
        },
        schema=RECORDS_SCHEMA,
    )


def write_records(records: pa.Table | None, run_dir: Path) -> None:
    """Write ``anomaly_records.parquet`` atomically; None removes it (a ``results.json`` written
    without records, such as an unreadable run's, must not stand beside an older check's)."""
    target = RunDir(run_dir).anomaly_records
    if records is None:
        target.unlink(missing_ok=True)
        return
    partial = target.with_name(f".{target.name}.partial")
    pq.write_table(records.cast(RECORDS_SCHEMA), partial)
    os.replace(partial, target)


def read_records(run_dir: Path) -> pd.DataFrame | None:
    """The run's records (``kind, partition, value, offset``; nullable integers), or None when
    the run was checked before the file existed (or not at all)."""
    path = RunDir(run_dir).anomaly_records
    if not path.is_file():
        return None
    return pq.read_table(path, schema=RECORDS_SCHEMA).to_pandas(
        types_mapper={pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}.get
    )
