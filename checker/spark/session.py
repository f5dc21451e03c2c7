"""One SparkSession per batch, configured for an embedded ``local[*]`` run or a cluster.

Why these settings (measured on 2-core machines, see FIELD-NOTES.md): the workers must use
this interpreter (``PYSPARK_PYTHON``), the driver must bind to loopback when local
(``SPARK_LOCAL_IP``), the UI and console progress bars cost start time and clutter, a
small ``spark.sql.shuffle.partitions`` avoids hundreds of tiny tasks on small inputs
(adaptive execution coalesces further), and scratch files go under a private temp
directory that is removed with the session.  Starting a session costs 2-12 s, so a batch
of runs shares one.

The driver JVM gets two more things.  The class archive of :mod:`checker.spark.classes`.
And later optimisation by the JIT (:data:`JIT_OPTIONS`): a check keeps both cores busy
with tasks, and the JIT's second-tier (C2) compiler competes with them for the same two
cores.  It used to compile ~18,000 methods for 18 CPU-seconds during a 50 M-op check,
most of them query-planning and serialisation code that is hot only briefly.  With C2
waiting for three times as many calls, the tasks' hot loops are still compiled, and
measured (``bench/checker.py`` scale, 2 rounds each) the check took 23.1-23.8 s instead
of 24.1-25.1 s, with 12.8-15.4 s of JIT time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from checker.spark import classes as spark_classes

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "3g"
JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=15000",
    "-XX:Tier4CompileThreshold=20000",
    "-XX:Tier4BackEdgeThreshold=120000",
)
"""C2 compilation after 3x HotSpot's default calls and loop iterations (see the module docstring)."""
LOCAL_MAX_PARTITION_BYTES = 16 << 20
"""Scan split size for local runs.  Spark's 128 MB default packs ~10 one-run history files
into one task: on 2 cores 50 runs became 5 tasks (the last wave on one core) whose partial
aggregation maps held millions of keys each.  16 MB gives about one task per run file."""


STATIC_SETTINGS = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
"""Settings of the driver itself (fixed when it starts): no UI, no console progress bars."""


def session_settings(local: bool) -> dict[str, str]:
    """The session's SQL settings (all of them runtime settings, so a Spark Connect client sets
    them on its server-side session too: :mod:`checker.spark.remote`); ``local``: the master is
    ``local[...]``, whose few cores want few shuffle partitions and small scan splits."""
    settings = {
        "spark.sql.shuffle.partitions": "8" if local else "200",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.parquet.pushdown.inFilterThreshold": "1000",
        "spark.sql.session.timeZone": "UTC",
    }
    if local:
        settings["spark.sql.files.maxPartitionBytes"] = str(LOCAL_MAX_PARTITION_BYTES)
    return settings


def driver_java_options(
    archive: Path | None = spark_classes.ARCHIVE, java_options: Sequence[str] = ()
) -> list[str]:
    """The driver JVM's options: parallel GC, :data:`JIT_OPTIONS`, the class archive (when
    ``archive`` exists) and ``java_options`` -- for an embedded session's driver and for a
    Spark Connect server's (:mod:`checker.spark.connect_server`), which is a driver too."""
    shared = spark_classes.java_options(archive) if archive is not None else []
    return ["-XX:+UseParallelGC", *JIT_OPTIONS, *shared, *java_options]


def build_session(
    master: str | None = DEFAULT_MASTER,
    *,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    local_dir: str | None = None,
    java_options: Sequence[str] = (),
    archive: Path | None = spark_classes.ARCHIVE,
) -> Any:
    """A new (or, under ``spark-submit`` with ``master=None``, the submitted) SparkSession.

    ``java_options`` are added to the driver JVM's; ``archive`` is the class archive it maps
    when that file exists (:mod:`checker.spark.classes`; ``None``: none).  Neither applies
    under ``spark-submit``, whose driver JVM is already running.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("tidemark-check")
    if master is not None:
        builder = builder.master(master).config("spark.driver.memory", driver_memory)
    if local_dir is not None:
        builder = builder.config("spark.local.dir", local_dir)
    local = master is not None and master.startswith("local")
    settings = {**STATIC_SETTINGS, **session_settings(local)}
    if master is not None:
        settings["spark.driver.extraJavaOptions"] = " ".join(driver_java_options(archive, java_options))
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def spark_session(
    master: str | None = DEFAULT_MASTER, *, driver_memory: str = DEFAULT_DRIVER_MEMORY
) -> Iterator[Any]:
    """A session with a private scratch directory; both are gone when the block ends."""
    scratch = tempfile.mkdtemp(prefix="tidemark-spark-")
    session = build_session(master, driver_memory=driver_memory, local_dir=scratch)
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(scratch, ignore_errors=True)
