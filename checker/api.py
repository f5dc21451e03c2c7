"""The checker's API for the rest of Tidemark: find runs, open an engine, check runs.

The runner (one run, checked as it finishes), the campaign (every run of a matrix in one
Spark job) and the ``tidemark check``/``analyze`` commands all go through these three
functions, so a run is checked the same way whoever asks.  Bad evidence raises
:class:`checker.evidence.InputError` (from :func:`checker.evidence.load_run`), a path that
names no run raises :class:`harness.record.rundir.RunDirectoryError`; callers decide
whether that is a usage error (the CLI) or a problem recorded with the run (the runner).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from checker.definitions import DEFAULT_LIVENESS, Liveness
from checker.driver import check_pass, write_results
from checker.engine import Engine
from checker.evidence import RunInput, split_passes
from checker.spark.session import DEFAULT_DRIVER_MEMORY
from harness.record.rundir import find_run_dirs


def resolve_runs(arguments: Sequence[str]) -> list[Path]:
    """Run directories named by ``arguments`` (run dirs, directories of runs, globs), each once."""
    return find_run_dirs(arguments)


@contextlib.contextmanager
def open_engine(
    kind: str, master: str | None = None, driver_memory: str = DEFAULT_DRIVER_MEMORY
) -> Iterator[Engine]:
    """A checker engine: ``pandas`` (in process) or ``spark`` (a session on ``master``, default local)."""
    if kind == "pandas":
        from checker.pandas.engine import PandasEngine

        yield PandasEngine()
        return
    from checker.spark.engine import SparkEngine
    from checker.spark.session import DEFAULT_MASTER, spark_session

    with spark_session(master or DEFAULT_MASTER, driver_memory=driver_memory) as session:
        engine = SparkEngine(session)
        try:
            yield engine
        finally:
            engine.close()


def check_runs(
    runs: list[RunInput],
    engine: Engine,
    checks: Sequence[str],
    limit: int,
    liveness: Liveness = DEFAULT_LIVENESS,
) -> list[dict[str, Any]]:
    """Results for every run, in input order, writing each run's ``results.json``."""
    by_dir: dict[Path, dict[str, Any]] = {}
    for group in split_passes(runs):
        for run, result in zip(group, check_pass(engine, group, checks, limit, liveness), strict=True):
            write_results(result, run.run_dir)
            by_dir[run.run_dir] = result
    return [by_dir[run.run_dir] for run in runs]
