"""The runs a batch ``tidemark check`` reads: each loaded on its own, a bad one set aside.

One run with a corrupt ``events.parquet`` among twenty must not cost the other nineteen their
check: :func:`load_each` loads every run directory separately and returns the bad ones with
their one-line reason, and :func:`unreadable_result` is the ``results.json`` such a run gets --
verdict ``unknown``, the reason as its incomplete evidence -- so the batch's table, summary and
exit code (2 at best) say which run could not be read and why.  A single run keeps the old
contract: its bad input is the user's error, exit 254 (the caller does not come here).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.api import LOAD_THREADS, CheckProgress, load_runs
from checker.driver import RESULTS_SCHEMA_VERSION
from checker.evidence import InputError, RunInput

UNREADABLE = "unreadable"
"""How an unreadable run's incomplete evidence starts (``unreadable: FILE: why``)."""


def load_each(
    run_dirs: Sequence[Path], *, skip_bad_lines: bool, progress: CheckProgress | None
) -> tuple[list[RunInput], dict[Path, str]]:
    """The runs that load, in input order, and run directory -> reason for those that do not
    (:class:`checker.evidence.InputError`'s one line)."""
    reporting = threading.Lock()
    unreadable: dict[Path, str] = {}

    def load(run_dir: Path) -> list[RunInput]:
        try:
            loaded = load_runs([run_dir], skip_bad_lines=skip_bad_lines)
        except InputError as error:
            loaded = []
            with reporting:
                unreadable[run_dir] = " ".join(str(error).split())
        if progress is not None:
            with reporting:
                progress.run_loaded(run_dir)
        return loaded

    with concurrent.futures.ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        runs = [run for loaded in pool.map(load, run_dirs) for run in loaded]
    return runs, unreadable


def unreadable_result(run_dir: Path, reason: str) -> dict[str, Any]:
    """The ``results.json`` of a run that could not be read: unknown, nothing checked, the reason
    given; the fields every result has, so the summary table and Parquet take it as they are."""
    return {
        "run": str(run_dir),
        "valid": "unknown",
        "anomalies": {},
        "incomplete": [f"{UNREADABLE}: {reason}"],
        "not_applicable": {},
        "checks": [],
        "expected_only": False,
        "liveness": None,
        "stats": {},
        "schema_version": RESULTS_SCHEMA_VERSION,
        "config": {
            "acks": None,
            "truncation.mode": None,
            "min.insync.replicas": None,
            "unclean.leader.election.enable": None,
            "flush.messages": None,
            "faults": [],
            "scenario": None,
            "rules": [],
        },
    }
