"""The liveness figures of ``results.json`` and the ``stalled`` anomaly: the driver's half.

The definitions are :mod:`checker.definitions`' (send period, fault window, last heal, progress,
gap).  The work is split by size, as everywhere in the checker:

* **fault windows** are per run and tiny (a few dozen nemesis ops), and pairing a fault with its
  heal is a rule of the record (:mod:`testbed.record.faults`), not a set-oriented question: the
  driver reads each run's nemesis rows (:func:`nemesis_rows`, a filtered read of a few columns,
  no Python loop over the other rows) and hands the engines two small tables, :func:`fault_tables`;
* **the per-partition figures** read every send and poll of every run of a pass -- millions of
  rows -- so each engine answers them in one grouped aggregation (``Engine.liveness``, columns
  :data:`LIVENESS_COLUMNS`, integers in the history's nanoseconds);
* **the verdict** -- which partitions stalled, at which severity -- is decided here, once, from
  those integers (:func:`liveness_results`), so both engines' ``results.json`` agree byte for byte.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
from typing import Any, Final

import pandas as pd
import pyarrow.compute as pc

from checker.definitions import UNPOLLED_AGE_EDGES_S, Liveness
from checker.evidence import RunInput
from checker.run_reads import DICTIONARY_COLUMNS, READ_THREADS
from testbed.record.faults import NemesisRow, active_intervals, fault_windows, nemesis_events
from testbed.record.history import F_NEMESIS
from testbed.record.ops import OP_TYPES
from testbed.record.packed import read_run

NS: Final = 1_000_000_000
OPEN_END: Final = 2**63 - 1
"""The end of a window never healed: the engines clip every window to the send period."""
UNPOLLED_AGE_COLUMNS: Final[tuple[str, ...]] = tuple(
    f"unpolled_age_{i}" for i in range(len(UNPOLLED_AGE_EDGES_S) + 1)
)
LIVENESS_COLUMNS: Final[tuple[str, ...]] = (
    "partition",
    "period_start",
    "period_end",
    "first_send",
    "first_poll",
    "gap",
    "gap_from",
    "unpolled",
    *UNPOLLED_AGE_COLUMNS,
    "unpolled_oldest",
)
"""What ``Engine.liveness`` returns per (run, partition) that has a send row, after ``run_id``.

``period_start``/``period_end``: the run's send period (first and last send row, any partition);
``first_send``: the first ``ok`` send completion at or after the last heal (null: no heal, or
none after it); ``first_poll``: the first ``ok`` poll at or after it returning a record above the
highest offset acknowledged before it; ``gap``: the longest gap (>= 0) and ``gap_from`` its start
(null when 0; of equal gaps the earliest); ``unpolled``: acknowledged values no poll returned (Jepsen's unseen; the drain does not count), also
split by age at the period's end (``unpolled_age_i``: ``UNPOLLED_AGE_EDGES_S``), and the oldest age."""
_NEMESIS_COLUMNS = ["index", "time", "type", "f_name", "payload", "error"]


def nemesis_rows(run: RunInput) -> list[NemesisRow]:
    """The run's nemesis ops, read from ``history.parquet`` (only rows with ``f`` nemesis).

    Read with one bare ``ParquetFile`` (of a packed store: the run's row groups alone) and filtered in Arrow: ``pq.read_table`` with a filter
    goes through the dataset machinery at ten times the fixed cost per file, which a check of
    thousands of small runs pays once per run.
    """
    table = read_run(run.history_path, run.history_slice, ["f", *_NEMESIS_COLUMNS], DICTIONARY_COLUMNS)
    table = table.filter(pc.equal(table["f"], F_NEMESIS))
    return [
        NemesisRow(
            row["index"],
            row["time"],
            OP_TYPES[row["type"]],
            row["f_name"],
            json.loads(row["payload"]) if row["payload"] is not None else None,
            row["error"],
        )
        for row in table.to_pylist()
    ]


def fault_tables(runs: list[RunInput]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``windows`` (``run_id, start, end``: the merged time a fault was active, an open window ending
    at :data:`OPEN_END`) and ``heals`` (``run_id, last_heal``, null where there is none), by the
    runs' history ids."""
    windows: list[tuple[int, int, int]] = []
    heals: list[tuple[int, int | None]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        rows_of = list(pool.map(nemesis_rows, runs))
    for run, rows in zip(runs, rows_of, strict=True):
        found = fault_windows(nemesis_events(rows), announced_only=True)
        windows += [(run.history_run_id, s, e) for s, e in active_intervals(found, OPEN_END)]
        ends = [w.end_ns for w in found]
        closed = [end for end in ends if end is not None]
        heals.append((run.history_run_id, max(closed) if closed and len(closed) == len(ends) else None))
    return (
        pd.DataFrame(windows, columns=["run_id", "start", "end"]).astype("int64"),
        pd.DataFrame(heals, columns=["run_id", "last_heal"]).astype("Int64"),
    )


def _seconds(ns: Any) -> float | None:
    return None if ns is None else round(int(ns) / NS, 3)


def _since(ns: Any, origin: int | None) -> float | None:
    return None if ns is None or origin is None else _seconds(int(ns) - origin)


_AGE_NAMES: Final[tuple[str, ...]] = (
    f"<{UNPOLLED_AGE_EDGES_S[0]}",
    *(f"{low}-{high}" for low, high in itertools.pairwise(UNPOLLED_AGE_EDGES_S)),
    f">={UNPOLLED_AGE_EDGES_S[-1]}",
)
"""The names of the unpolled age buckets in ``results.json`` (seconds)."""


def liveness_results(
    run: RunInput, rows: list[dict[str, Any]], last_heal: int | None, settings: Liveness
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``results.json``'s ``liveness`` section for one run and the examples of ``stalled``.

    ``rows``: the run's rows of ``Engine.liveness`` (plain values); partitions of the topic
    without any send row get null figures.
    """
    by_partition = {int(row["partition"]): row for row in rows}
    threshold = round(settings.stall_threshold_s * NS)
    partitions: dict[str, Any] = {}
    stalled: list[dict[str, Any]] = []
    for p in range(run.partitions):
        row = by_partition.get(p)
        if row is None:
            partitions[str(p)] = {
                "recovery_send_s": None,
                "recovery_poll_s": None,
                "longest_gap_s": None,
                "longest_gap_from_s": None,
                "unpolled": {"count": 0, "by_age_s": dict.fromkeys(_AGE_NAMES, 0), "oldest_s": None},
            }
            continue
        gap = int(row["gap"])
        partitions[str(p)] = {
            "recovery_send_s": _since(row["first_send"], last_heal),
            "recovery_poll_s": _since(row["first_poll"], last_heal),
            "longest_gap_s": _seconds(gap),
            "longest_gap_from_s": _seconds(row["gap_from"]),
            "unpolled": {
                "count": int(row["unpolled"]),
                "by_age_s": {
                    name: int(row[c]) for name, c in zip(_AGE_NAMES, UNPOLLED_AGE_COLUMNS, strict=True)
                },
                "oldest_s": _seconds(row["unpolled_oldest"]),
            },
        }
        if gap > threshold:
            start = int(row["gap_from"])
            stalled.append(
                {
                    "partition": p,
                    "from_s": _seconds(start),
                    "to_s": _seconds(start + gap),
                    "gap_s": _seconds(gap),
                }
            )
    first = next((r for r in rows if r["period_start"] is not None), None)
    section = {
        "stall_threshold_s": settings.stall_threshold_s,
        "mode": settings.mode,
        "send_period_s": None
        if first is None
        else [_seconds(first["period_start"]), _seconds(first["period_end"])],
        "last_heal_s": _seconds(last_heal),
        "partitions": partitions,
    }
    return section, stalled
