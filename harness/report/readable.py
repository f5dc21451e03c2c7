"""Whether a run's Parquet tables can be read at all, asked before a page reads them.

A run directory copied halfway, or a disk that filled while the checker wrote, leaves a
``history.parquet`` cut short.  Reading one raises from deep inside pyarrow; the report pages
ask first and mark the run unreadable instead: the run page shows what it can without the
tables, the index flags the row, and ``tidemark report`` names the file in one line.

The test is the Parquet format's own frame -- a file starts and ends with the magic ``PAR1`` --
read as 8 bytes per file, so an index of thousands of runs stays cheap.  A file whose frame is
whole but whose inside is damaged is caught where it is read (:class:`pyarrow.ArrowException`)
and reported the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from testbed.record.rundir import RunDir

PARQUET_MAGIC: Final = b"PAR1"
UNREADABLE: Final = "unreadable"


def run_tables(run_dir: Path) -> list[Path]:
    """The Parquet tables a run directory may hold (history, replicas, replica partitions, events,
    the checker's anomaly records)."""
    directory = RunDir(run_dir)
    return [
        directory.history_parquet,
        directory.replicas,
        directory.replica_partitions,
        directory.events,
        directory.anomaly_records,
    ]


def unreadable_tables(run_dir: Path) -> list[str]:
    """One line per table of ``run_dir`` that exists but is not a whole Parquet file (naming the
    file and why); empty when every table present is framed as Parquet."""
    problems = []
    for path in run_tables(run_dir):
        try:
            with path.open("rb") as file:
                head = file.read(4)
                size = file.seek(0, 2)
                file.seek(max(size - 4, 0))
                tail = file.read(4)
        except FileNotFoundError:
            continue
        except OSError as error:
            problems.append(f"{path}: cannot read ({error.strerror or error})")
            continue
        if size < 12 or head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
            problems.append(f"{path}: not a whole Parquet file ({size} bytes; truncated or corrupt)")
    return problems
