"""A class-data-sharing archive of the Spark driver's classes, built once per environment.

A PySpark driver JVM loads about 23,000 classes -- 11,400 to start, as many again while
its first check runs (Catalyst rules, code generation, the Parquet reader) -- and parses
and verifies every one.  Since JDK 13 the JVM can write the classes an application loaded into an archive
when it exits (dynamic class-data sharing, ``-XX:ArchiveClassesAtExit``) and map them,
already parsed and verified, into later JVMs (``-XX:SharedArchiveFile``).
:func:`build` runs a small check (:mod:`checker.spark.class_training`) in a JVM that writes
such an archive; :func:`java_options` hands it to every driver JVM
that :func:`checker.spark.session.build_session` starts.

Measured on this project's 2-core VMs with ``bench/checker.py``-sized input (50 runs of
1 M ops): session start 3.9-4.2 s -> 1.9-2.5 s, the check itself 28.0-28.7 s -> 25.6-26.6 s,
and 6 fewer CPU-seconds, most of them class loading that competed with the tasks for the
two cores.

Safe by construction: the JVM checks an archive against its own build and class path and
ignores one that does not match (the session is then as slow as without it, never wrong),
so a stale archive after a JDK or PySpark upgrade costs time, not correctness; the set-up
script rebuilds it when either changes.  The archive lives in the virtualenv
(:data:`ARCHIVE`) because it belongs to that PySpark's jars.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHIVE = Path(sys.prefix) / "share" / "tidemark" / "spark-classes.jsa"
TRAINING_RUNS = 4
"""Runs of the training check: two per core, so the bucketed-table path is the one taken."""
TRAINING_ROWS = 20_000
BUILD_TIMEOUT_SECONDS = 300
TRAINING_PROGRAM = "checker.spark.class_training"
"""The module :func:`build` runs (``python -m``) as the training check: it starts a Spark session,
which maps this module's archive, so it lives above both (no import of it here)."""


class ArchiveError(Exception):
    """The archive could not be built (the reason is in the message)."""


def java_options(archive: Path = ARCHIVE) -> list[str]:
    """Driver JVM options that map ``archive`` when it exists (none otherwise).

    The JVM's own messages about a mismatched archive are switched off: ignoring one is
    the intended fallback, and they would reach the user's terminal on every session.
    """
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def build(archive: Path = ARCHIVE) -> Path:
    """Write a fresh archive to ``archive`` (atomically: a reader sees the old one or the new one).

    The training check runs in a child process, whose driver JVM writes the archive as it
    exits; :class:`ArchiveError` if it fails or writes nothing.
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidemark-classes-") as scratch:
        command = [sys.executable, "-m", TRAINING_PROGRAM, scratch, str(partial)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise ArchiveError(f"the training check took over {BUILD_TIMEOUT_SECONDS} s") from None
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ArchiveError(f"the training JVM wrote no archive (exit {done.returncode}: {detail})")
    os.replace(partial, archive)
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Build the Spark driver's class archive (see the module docstring)."
    )
    parser.add_argument(
        "--archive", type=Path, default=ARCHIVE, help=f"where to write it (default {ARCHIVE})"
    )
    args = parser.parse_args()
    try:
        print(build(args.archive))
    except ArchiveError as error:
        print(f"tidemark: Spark class archive not built: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
