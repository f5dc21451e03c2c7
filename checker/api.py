"""The checker's API for the rest of Tidemark: find runs, open an engine, check runs.

The runner (one run, checked as it finishes), the campaign (every run of a matrix in one
Spark job) and the ``tidemark check``/``analyze`` commands all go through these functions,
so a run is checked the same way whoever asks -- from its run directory or from a packed
store (:mod:`testbed.record.packed`, made by :mod:`checker.pack`), whose runs' results are
written to their run directories all the same.  Bad evidence raises
:class:`checker.evidence.InputError` (from :func:`checker.evidence.load_run`), a path that
names no run raises :class:`testbed.record.rundir.RunDirectoryError`; callers decide
whether that is a usage error (the CLI) or a problem recorded with the run (the runner).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from checker.definitions import DEFAULT_LIVENESS, Liveness
from checker.driver import check_pass, write_results
from checker.engine import Engine
from checker.evidence import RunInput, load_run, split_passes
from checker.packed_runs import load_packed
from checker.spark.session import DEFAULT_DRIVER_MEMORY
from testbed.record.packed import is_packed
from testbed.record.rundir import find_run_dirs


def resolve_runs(arguments: Sequence[str]) -> list[Path]:
    """Run directories named by ``arguments`` (run dirs, directories of runs, globs), each once."""
    return find_run_dirs(arguments)


def resolve_sources(arguments: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """The run directories and the packed stores (:mod:`testbed.record.packed`) ``arguments`` name.

    A packed store is named as itself (the directory holding ``runs.parquet``), never searched
    for run directories; every other argument is as for :func:`resolve_runs`."""
    packed: list[Path] = []
    others: list[str] = []
    for argument in arguments:
        if is_packed(Path(argument)):
            packed.append(Path(argument))
        else:
            others.append(argument)
    return (resolve_runs(others) if others else []), list(dict.fromkeys(packed))


@contextlib.contextmanager
def open_engine(
    kind: str,
    master: str | None = None,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    remote: str | None = None,
) -> Iterator[Engine]:
    """A checker engine: ``pandas`` (in process) or ``spark`` -- a session on ``master`` (default
    local), or, with ``remote`` (``sc://HOST:PORT``), on that Spark Connect server
    (:mod:`checker.spark.remote`: :class:`~checker.spark.remote.RemoteError` for a bad address,
    :class:`~checker.spark.remote.ServerUnreachable` when nothing answers there)."""
    if kind == "pandas":
        from checker.pandas.engine import PandasEngine

        yield PandasEngine()
        return
    from checker.spark.engine import SparkEngine
    from checker.spark.session import DEFAULT_MASTER, spark_session

    if remote is not None:
        from checker.spark.remote import links_visible, parse_remote, remote_session

        address = parse_remote(remote)
        opened = remote_session(address)
        layout = None if links_visible(address) else False  # no bucketed table's links on its disk
    else:
        opened = spark_session(master or DEFAULT_MASTER, driver_memory=driver_memory)
        layout = None
    with opened as session:
        engine = SparkEngine(session, bucketed=layout)
        try:
            yield engine
        finally:
            engine.close()


LOAD_THREADS = 4
"""Runs loaded at once: a run's loading is mostly footer reads, which release the GIL."""


class CheckProgress(Protocol):
    """What a long batch check reports as it goes (the CLI draws it; tests may count it)."""

    def run_loaded(self, run_dir: Path) -> None:
        """One more run's evidence was validated (and converted where needed).

        Every method is called from one thread at a time (:func:`load_runs` loads from
        several threads and serialises these calls), but not always the same thread.
        """

    def pass_started(self, number: int, passes: int, runs: int) -> None:
        """Pass ``number`` (from 1) of ``passes`` starts, over ``runs`` runs."""

    def answered(self, question: str) -> None:
        """One of :data:`checker.driver.QUESTIONS` was answered for the current pass."""

    def results_written(self, runs: int) -> None:
        """``runs`` more ``results.json`` files were written."""


def load_runs(
    run_dirs: Sequence[Path], *, skip_bad_lines: bool = False, progress: CheckProgress | None = None
) -> list[RunInput]:
    """:func:`checker.evidence.load_run` of every directory, in order, :data:`LOAD_THREADS` at a time.

    Raises the :class:`checker.evidence.InputError` of the first bad run in input order (the
    others loaded meanwhile are only read or converted, never damaged).
    """

    reporting = threading.Lock()

    def load(run_dir: Path) -> RunInput:
        run = load_run(run_dir, skip_bad_lines=skip_bad_lines)
        if progress is not None:
            with reporting:
                progress.run_loaded(run_dir)
        return run

    if len(run_dirs) < 2:
        return [load(run_dir) for run_dir in run_dirs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        return list(pool.map(load, run_dirs))


def load_packed_stores(stores: Sequence[Path], *, progress: CheckProgress | None = None) -> list[RunInput]:
    """The runs of each packed store, in index order (:func:`checker.packed_runs.load_packed`):
    one small file per store, no run directory or footer read."""
    runs = []
    for store in stores:
        for run in load_packed(store):
            runs.append(run)
            if progress is not None:
                progress.run_loaded(run.run_dir)
    return runs


def check_runs(
    runs: list[RunInput],
    engine: Engine,
    checks: Sequence[str],
    limit: int,
    *,
    liveness: Liveness = DEFAULT_LIVENESS,
    progress: CheckProgress | None = None,
) -> list[dict[str, Any]]:
    """Results for every run, in input order, writing each run's ``results.json`` and
    ``anomaly_records.parquet`` (:mod:`checker.records`)."""
    by_dir: dict[Path, dict[str, Any]] = {}
    passes = split_passes(runs)
    for number, group in enumerate(passes, start=1):
        if progress is not None:
            progress.pass_started(number, len(passes), len(group))
        answered = progress.answered if progress is not None else None
        records: dict[Path, pa.Table] = {}
        results = check_pass(engine, group, checks, limit, liveness, answered, records)
        for run, result in zip(group, results, strict=True):
            write_results(result, run.run_dir, records[run.run_dir])
            by_dir[run.run_dir] = result
        if progress is not None:
            progress.results_written(len(group))
    return [by_dir[run.run_dir] for run in runs]
