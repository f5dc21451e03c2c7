"""How the Spark engine reads a pass's Parquet files: as plain files, or as a bucketed table.

Every history (and replica) file holds exactly one run, and every question the engine asks
groups by ``run_id`` first.  Spark cannot know that from plain files, so each grouped
aggregation would shuffle all its partial results (about 14 M rows for a 50 M-op
campaign) only to bring together rows that were in one file all along.

A *bucketed table* is Spark's own way of saying "rows with equal ``run_id`` are in one
file": :class:`SparkInputs` registers the pass's files as an external table ``CLUSTERED BY
(run_id)``, whose files are symbolic links, named with their bucket number, to the stored
files (nothing is copied, and the links live in a scratch directory that is removed
afterwards).  Spark then aggregates each run inside the task that reads it, with no
exchange: measured on 50 one-million-op runs, the value aggregation went from 15.9 s to
9.1 s on 2 cores.

A packed store (:mod:`testbed.record.packed`) is that layout already, written by
``tidemark store pack``: each table's directory is registered as it stands, with the bucket
count its files record -- no links, so on any master -- and filtered to the pass's runs unless
the pass is every run of it.

For run directories, when it is used, and why only then:

* only with a local master -- the links are on the driver's disk, which a cluster's
  executors cannot see (through Spark Connect, :mod:`checker.spark.remote`, the links are on the
  client's disk and the server reads them: one machine, or the engine is told ``bucketed=False``);
* only with at least two runs per core -- a bucket is read by one task, so a single big
  run would lose the parallelism of reading its row groups on several cores;
* only when every file's footer says it holds one ``run_id`` (min = max = the run's id),
  since a run split over two buckets would be counted twice.

The bucket number of a run is Spark's own ``pmod(hash(run_id), buckets)``, so the table
is exactly what Spark would have written itself.  A bucket may hold many runs' files:
small runs are packed into buckets of about :data:`BUCKET_ROWS` rows (:func:`bucket_count`),
since a task per small run made the per-task cost the whole cost of a check of thousands
of small runs.  Otherwise the plain files are read
with the declared schema; both paths give the same answers (tests run both).

The tables are registered in the catalog, which a Spark Connect server shares between its
clients' sessions and keeps after a check: :meth:`SparkInputs.close` drops them (their files,
the links or a packed store, stay).  Nothing here touches the ``SparkContext`` (a Connect client
has none): the master and its cores come from the session's configuration
(:func:`session_master`, :func:`default_parallelism`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.evidence import RunInput
from testbed.record.packed import RowSlice, bucket_count, bucket_file_name, packed_buckets, table_rows

_SPARK_TYPES = {
    "int8": "byte",
    "int16": "short",
    "int32": "int",
    "int64": "long",
    "string": "string",
    "bool": "boolean",
}
FETCH_RUNS_PER_JOB = int(os.environ.get("TM_CHUNK", "8"))
"""Per-run example fetches are unions of this many single-file scans per Spark job."""


def session_master(session: SparkSession) -> str:
    """The master of ``session``'s Spark application, read from its configuration, which a Spark
    Connect client can read too ("" when unknown)."""
    return str(session.conf.get("spark.master", "") or "")


def default_parallelism(session: SparkSession) -> int:
    """The cores a stage of ``session`` runs on at once: the ``SparkContext``'s own figure where
    there is one; through Spark Connect, ``local[N]``'s N (``local[*]``: this machine's cores --
    the links of a bucketed table already require the server to be on this machine), else
    ``spark.default.parallelism`` or 2."""
    if not _is_connect(session):
        return int(session.sparkContext.defaultParallelism)
    master = session_master(session)
    if master == "local":
        return 1
    if master.startswith("local["):
        cores = master.removeprefix("local[").split(",")[0].rstrip("]")
        return (os.cpu_count() or 1) if cores == "*" else int(cores)
    return int(session.conf.get("spark.default.parallelism", "2") or 2)


def _is_connect(session: SparkSession) -> bool:
    """Whether ``session`` is a Spark Connect client's (no SparkContext, no JVM in this process)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def arrow_frame(session: SparkSession, table: pa.Table) -> DataFrame:
    """A driver-side Arrow table as a DataFrame (a local relation in the JVM, no Python workers).

    Spark Connect infers a schema from the rows and so refuses an empty table without one; it
    is given the table's own there (:func:`pa_to_spark_schema`: the record schemas' types).
    """
    if table.num_rows == 0 and _is_connect(session):
        return session.createDataFrame(table, schema=pa_to_spark_schema(table.schema))
    return session.createDataFrame(table)


def pa_to_spark_schema(schema: pa.Schema) -> str:
    """A Spark DDL schema for one of the Arrow schemas of :mod:`testbed.record.history`."""
    return ", ".join(f"`{field.name}` {_SPARK_TYPES[str(field.type)]}" for field in schema)


class InputFile(NamedTuple):
    """One stored file of a pass, with what its footer proved at load time (:mod:`checker.evidence`)."""

    run_id: int
    path: Path
    rows: int
    one_run: bool
    """The footer proves every row has ``run_id`` (min = max): the file may be a bucket's part."""
    rows_at: RowSlice | None = None
    """The run's rows in ``path`` when that is a packed store's file (:mod:`testbed.record.packed`)."""


def history_file(run: RunInput) -> InputFile:
    """The run's history as an input file of a pass."""
    return InputFile(
        run.history_run_id, run.history_path, run.history_rows, run.history_holds_one_run, run.history_slice
    )


def replica_file(run: RunInput) -> InputFile | None:
    """The run's replica table as an input file of a pass (None without one)."""
    if run.replicas_path is None or run.replicas_run_id is None:
        return None
    return InputFile(
        run.replicas_run_id,
        run.replicas_path,
        run.replica_rows,
        run.replicas_hold_one_run,
        run.replicas_slice,
    )


class SparkInputs:
    """The DataFrames of one engine: each distinct list of files is registered once.

    ``bucketed`` forces a layout (``True``/``False``); ``None`` chooses as described in
    the module docstring.
    """

    def __init__(self, session: SparkSession, bucketed: bool | None = None) -> None:
        self.spark = session
        self.bucketed = bucketed
        self._frames: dict[tuple[str, ...], DataFrame] = {}
        self._scratch: Path | None = None
        self._tables: list[str] = []
        self._lock = threading.Lock()  # the driver may ask from two threads at once

    @property
    def scratch(self) -> Path | None:
        """The directory of links of the bucketed tables, while there is one."""
        return self._scratch

    def close(self) -> None:
        """Drop the tables this object registered and remove the scratch directory of links (the
        stored files are never touched).  A table that cannot be dropped (the session is gone)
        is left: clean-up must not hide the error that ended a check."""
        with self._lock:
            for name in self._tables:
                with contextlib.suppress(Exception):
                    self.spark.sql(f"DROP TABLE IF EXISTS {name}")
            self._tables.clear()
            self._frames.clear()  # they read the tables just dropped
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def _wants_buckets(self, files: Sequence[InputFile]) -> bool:
        single = all(file.one_run for file in files)
        if self.bucketed is not None:
            return self.bucketed and single
        if not session_master(self.spark).startswith("local"):
            return False
        if len(files) < 2 * default_parallelism(self.spark):
            return False
        return single

    def frame(self, files: Sequence[InputFile], schema: pa.Schema) -> DataFrame:
        """All ``files`` as one DataFrame with ``schema`` (cached per file list)."""
        key = tuple(f"{file.path}:{file.run_id}" if file.rows_at else str(file.path) for file in files)
        with self._lock:
            return self._frame(key, files, schema)

    def _frame(self, key: tuple[str, ...], files: Sequence[InputFile], schema: pa.Schema) -> DataFrame:
        if key not in self._frames:
            ddl = pa_to_spark_schema(schema)
            if any(file.rows_at is not None for file in files):
                self._frames[key] = self._packed(files, ddl)
            elif self._wants_buckets(files):
                self._frames[key] = self._bucketed_table(files, ddl)
            else:
                paths = [str(file.path.resolve()) for file in files]
                self._frames[key] = self.spark.read.schema(ddl).parquet(*paths)
        return self._frames[key]

    def _packed(self, files: Sequence[InputFile], ddl: str) -> DataFrame:
        """The runs' rows of packed files: their table's directory as the bucketed table it is, or,
        for files of several tables or some of a run directory, the files read plainly; filtered to
        the pass's runs unless they are all the table holds."""
        folders = {file.path.parent.resolve() for file in files}
        whole = all(file.rows_at is not None for file in files) and len(folders) == 1
        if whole:
            (folder,) = folders
            name = f"tidemark_packed_{uuid.uuid4().hex}"
            buckets = packed_buckets(files[0].path)
            self.spark.sql(
                f"CREATE TABLE {name} ({ddl}) USING parquet CLUSTERED BY (run_id) INTO {buckets} BUCKETS "
                f"LOCATION '{folder.as_uri()}'"
            )
            self._tables.append(name)
            frame = self.spark.table(name)
            if sum(file.rows for file in files) == table_rows(folder):
                return frame  # every run of the table: nothing to filter
        else:
            paths = list(dict.fromkeys(str(file.path.resolve()) for file in files))
            frame = self.spark.read.schema(ddl).parquet(*paths)
        return frame.where(F.col("run_id").isin([file.run_id for file in files]))

    def _bucketed_table(self, files: Sequence[InputFile], ddl: str) -> DataFrame:
        buckets = bucket_count([file.rows for file in files], default_parallelism(self.spark))
        # From Arrow: a local relation in the JVM, where a list of rows would start Python workers.
        numbered = self.spark.createDataFrame(
            pa.table({"run_id": pa.array([file.run_id for file in files], pa.int64())})
        )
        bucket_of = {
            int(row[0]): int(row[1])
            for row in numbered.select("run_id", F.expr(f"pmod(hash(run_id), {buckets})")).collect()
        }
        if self._scratch is None:
            # spark.local.dir may list several directories ("/a,/b"); the first will do.
            local_dirs = self.spark.conf.get("spark.local.dir", None)
            parent = (local_dirs.split(",")[0].strip() or None) if local_dirs else None
            self._scratch = Path(tempfile.mkdtemp(prefix="tidemark-tables-", dir=parent))
        name = f"tidemark_pass_{uuid.uuid4().hex}"  # unique in the session's catalog
        location = self._scratch / name
        location.mkdir()
        for number, file in enumerate(files):
            # Spark reads the bucket number from the name: part-<n>_<bucket>.c000.parquet; the
            # files of one bucket are read by one task, one after the other.
            link = location / bucket_file_name(number, bucket_of[file.run_id])
            os.symlink(file.path.resolve(), link)
        self.spark.sql(
            f"CREATE TABLE {name} ({ddl}) USING parquet CLUSTERED BY (run_id) INTO {buckets} BUCKETS "
            f"LOCATION '{location.as_uri()}'"
        )
        self._tables.append(name)
        return self.spark.table(name)
