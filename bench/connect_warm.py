"""The warm row of ``bench/checker.py --warm``: the checker's pass through a Spark Connect server that
is already running, after one warm-up pass.

The cold ``spark`` row starts a driver JVM for its pass and pays its JIT compilers and class
loading inside it; a campaign or hunt with the Spark engine checks through one long-lived Spark
Connect server instead (:mod:`harness.run.check_server`), whose JVM has compiled the hot code
already by its second check.  :func:`start_warm_server` starts one server for the whole
invocation -- ``local[2]`` with a 3 GB driver, as the cold row's session -- and hands its address
to the workers in :data:`REMOTE_VARIABLE`; :func:`warm_checker`, in the worker, runs one untimed
pass through it, then times the same pass with a fresh client session and engine (as the next
``tidemark check --remote`` would: no answer is cached from the warm-up), loading included as in
the cold row.  ``session s`` is the client session's creation; the worker's ``JVM`` column is 0
(the server's JVM is not the worker's).

Kept apart from ``bench/checker.py`` (which only names the row, starts the server and dispatches
to :func:`warm_checker`), so that file's own changes and this row merge without touching each other.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from pathlib import Path
from typing import Any

WARM = "spark-warm"
"""The row's engine name."""
REMOTE_VARIABLE = "TIDEMARK_BENCH_REMOTE"
"""The server's address, from the orchestrator (which started it) to each worker."""


def start_warm_server(enabled: bool) -> None:
    """With ``enabled``, start the server for the rest of this process (stopped at its exit, and
    by the kernel if it is killed: :mod:`checker.spark.connect_server`) and export its address."""
    if not enabled:
        return
    from checker.spark.connect_server import connect_server

    stack = contextlib.ExitStack()
    started = time.perf_counter()
    server = stack.enter_context(connect_server(master="local[2]", driver_memory="3g"))
    atexit.register(stack.close)
    os.environ[REMOTE_VARIABLE] = server.url
    print(
        f"# warm row: Spark Connect server {server.url} up in {time.perf_counter() - started:.1f} s",
        flush=True,
    )


def _one_pass(
    runs: list[Path], remote: str
) -> tuple[list[dict[str, Any]], float, float, list[tuple[str, float]]]:
    """One check of ``runs`` through ``remote`` in a fresh client session and engine: the results,
    the session's seconds, the pass's seconds (loading included) and when each question was answered."""
    from checker.api import open_engine
    from checker.definitions import CORE_CHECKS, DEFAULT_EXAMPLE_LIMIT
    from checker.driver import check_pass
    from checker.evidence import load_run

    opened = time.perf_counter()
    with open_engine("spark", remote=remote) as engine:
        session_seconds = time.perf_counter() - opened
        answered: list[tuple[str, float]] = []
        started = time.perf_counter()
        results = check_pass(
            engine,
            [load_run(run) for run in runs],
            CORE_CHECKS,
            DEFAULT_EXAMPLE_LIMIT,
            on_answer=lambda question: answered.append((question, time.perf_counter())),
        )
        seconds = time.perf_counter() - started
    return results, session_seconds, seconds, [(question, at - started) for question, at in answered]


def warm_checker(runs: list[Path]) -> tuple[dict[str, Any], float]:
    """The worker's side of the row: the counts (with ``_seconds`` and ``_questions``, as the
    cold row's) of the timed pass after an untimed one, and the timed pass's session seconds."""
    from checker.definitions import CORE_CHECKS

    remote = os.environ[REMOTE_VARIABLE]
    _one_pass(runs, remote)  # the warm-up: the server's JIT compiles this pass's code
    results, session_seconds, seconds, answered = _one_pass(runs, remote)
    counts: dict[str, Any] = {
        kind: sum(result["anomalies"].get(kind, {}).get("count", 0) for result in results)
        for kind in CORE_CHECKS
    }
    counts["_seconds"] = seconds
    counts["_questions"] = dict(answered)
    return counts, session_seconds


WARM_FLOOR = "spark-sql-warm"
"""The warm floor's row (``--warm --floor``): :func:`warm_floor`."""


def warm_floor(runs: list[Path]) -> tuple[dict[str, int], float, float]:
    """The floor's queries (:func:`bench.spark_floor.floor_pass`) through the server, timed after an
    untimed pass of them, each pass in a fresh client session (loading included, as every row):
    the counts, the timed pass's seconds and its session's seconds."""
    from bench.spark_floor import floor_pass
    from checker.evidence import load_run
    from checker.spark.remote import parse_remote, remote_session

    remote = parse_remote(os.environ[REMOTE_VARIABLE])
    timed: tuple[dict[str, int], float] = ({}, 0.0)
    session_seconds = 0.0
    for _ in range(2):  # the first pass warms the server for these queries
        opened = time.perf_counter()
        with remote_session(remote) as session:
            session_seconds = time.perf_counter() - opened
            timed = floor_pass(session, lambda: [load_run(run) for run in runs])
    return timed[0], timed[1], session_seconds
