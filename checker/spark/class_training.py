"""The training check that fills the Spark class archive: a program run in a child process.

:func:`checker.spark.classes.build` runs ``python -m checker.spark.class_training SCRATCH DUMP``:
a small check of synthetic runs (:mod:`checker.synthetic_runs`, every check of the catalogue)
with the Spark engine, in a driver JVM started with ``-XX:ArchiveClassesAtExit=DUMP``, which
writes the classes it loaded to ``DUMP`` as it exits.  It must be a process of its own: a JVM
writes its archive only when it exits, and the caller's JVM (if any) is already running.

Kept apart from :mod:`checker.spark.classes` because it starts a session
(:mod:`checker.spark.session`), and a session maps the archive that module describes: the
archive's facts sit below the session, the training check above it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.spark.classes import BUILD_TIMEOUT_SECONDS, TRAINING_ROWS, TRAINING_RUNS, ArchiveError
from checker.spark.engine import SparkEngine
from checker.spark.session import build_session
from checker.synthetic_runs import generate_run


def train(scratch: Path, dump: Path) -> None:
    """Check a few synthetic runs (written under ``scratch``) with the Spark engine in a JVM that
    archives its classes to ``dump`` at exit, and wait for that exit.

    :class:`~checker.spark.classes.ArchiveError` when the driver JVM was not started by this
    process (then nothing here can end it, and no archive is written).
    """
    from pyspark import SparkContext

    runs = []
    for number in range(TRAINING_RUNS):
        generate_run(scratch / f"run-{number}", TRAINING_ROWS, seed=number)
        runs.append(load_run(scratch / f"run-{number}"))
    session = build_session(
        "local[2]", local_dir=str(scratch), java_options=[f"-XX:ArchiveClassesAtExit={dump}"], archive=None
    )
    engine = SparkEngine(session)
    try:
        check_pass(engine, runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    finally:
        engine.close()
        session.stop()
    # The archive is written as the JVM exits: end it (EOF on its stdin) and wait for that.
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        raise ArchiveError("the driver JVM was not started by this process")
    gateway.shutdown()
    process.stdin.close()
    process.wait(timeout=BUILD_TIMEOUT_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The training check of the Spark class archive (run by checker.spark.classes)."
    )
    parser.add_argument("scratch", type=Path, help="a directory for the synthetic runs and Spark's files")
    parser.add_argument("dump", type=Path, help="where the driver JVM writes its class archive at exit")
    args = parser.parse_args()
    train(args.scratch, args.dump)


if __name__ == "__main__":
    main()
