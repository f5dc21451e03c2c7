"""The transactional family's one implementation, run per run by both engines.

:func:`run_anomalies` takes one run's rows (:data:`checker.txn.tables.INPUT_FS`, columns
:data:`checker.txn.tables.INPUT_COLUMNS`, in any order) and that run's :class:`RunSettings`, and
answers with :data:`OUTPUT_COLUMNS`: per asked anomaly of :data:`checker.definitions.TXN_CHECKS`
its first ``limit`` findings in the family's example order (``index``, then ``partition``, nulls
first; ties in the order the checks found them, which depends on the rows' content only) and
its ``total``.  The pandas engine calls it per run (:func:`pass_anomalies`); the Spark engine
hands it each run's rows with ``groupBy("run_id").applyInPandas`` (:func:`spark_function`,
:data:`OUTPUT_DDL`), so the two cannot differ in anything but how the rows arrive -- which
:func:`checker.txn.tables.normalized` and the sorts of :func:`checker.txn.tables.build` undo.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np
import pandas as pd

from checker.definitions import (
    INT_NONMONOTONIC_SEND,
    INT_SEND_SKIP,
    PRECOMMITTED_READ,
    TORN_TRANSACTION,
    TXN_CHECKS,
)
from checker.evidence import RunInput
from checker.txn import checks as single
from checker.txn.cycles import cycle_findings
from checker.txn.examples import Views
from checker.txn.offsets import offset_findings
from checker.txn.tables import INPUT_FS, MISSING, build, normalized
from testbed.record.history import F_TXN

OUTPUT_COLUMNS: Final[tuple[str, ...]] = ("run_id", "kind", "total", "index", "partition", "example")
"""``example`` is the finding's example as JSON text (:mod:`checker.txn.examples`)."""
OUTPUT_DDL: Final = "run_id long, kind string, total long, index long, partition long, example string"
""":data:`OUTPUT_COLUMNS` as Spark's ``applyInPandas`` wants the schema."""
READ_COMMITTED: Final = "read_committed"
IMPLEMENTS: Final[frozenset[str]] = frozenset(TXN_CHECKS)
"""The registry entries this package flags, for both engines' ``implements``."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunSettings:
    """What a run's checks need besides its rows: whether its consumers read ``read_committed``
    (precommitted-read applies only then) and the partitions whose final drain is complete."""

    read_committed: bool
    complete: frozenset[int]


def settings_for(spec: Mapping[str, Any], complete: pd.DataFrame, run_id: int) -> RunSettings:
    """A run's settings from its ``test.json`` (``workload.isolation``; the workload's default,
    ``read_committed``, when not recorded) and the driver's ``run_id, partition, complete`` frame."""
    isolation = str((spec.get("workload") or {}).get("isolation", READ_COMMITTED))
    mine = complete[(complete["run_id"] == run_id) & complete["complete"].astype(bool)]
    return RunSettings(isolation == READ_COMMITTED, frozenset(int(p) for p in mine["partition"]))


def pass_settings(runs: list[RunInput], complete: pd.DataFrame) -> dict[int, RunSettings]:
    """Every run's settings, by its history's ``run_id``."""
    return {run.history_run_id: settings_for(run.spec, complete, run.history_run_id) for run in runs}


def input_mask(f: np.ndarray[Any, Any], run_id: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The rows the checks read (``f`` in :data:`INPUT_FS`) of the runs that have a ``txn`` op:
    a pass of plain runs hands over nothing (its polls and drains are most of its rows)."""
    with_txns = np.unique(run_id[f == F_TXN])
    if len(with_txns) == 0:
        return np.zeros(len(f), dtype=bool)
    return np.isin(f, INPUT_FS) & np.isin(run_id, with_txns)


def empty_answer() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="int64") for c in ("run_id", "total", "index")})
    return frame.assign(
        kind=pd.Series(dtype="object"),
        partition=pd.Series(dtype="Int64"),
        example=pd.Series(dtype="object"),
    )[list(OUTPUT_COLUMNS)]


def run_anomalies(
    rows: pd.DataFrame, settings: RunSettings, checks: frozenset[str], limit: int
) -> pd.DataFrame:
    """The findings of one run (see the module docstring); an empty frame when there are none."""
    if rows.empty:
        return empty_answer()
    run_id = int(rows["run_id"].iloc[0])
    tables = build(normalized(rows))
    if tables.txns.empty:
        return empty_answer()
    views = Views(tables)
    findings: list[single.Finding] = []
    if PRECOMMITTED_READ in checks and settings.read_committed:
        findings += single.precommitted_reads(tables, views)
    if checks & {INT_SEND_SKIP, INT_NONMONOTONIC_SEND}:
        findings += [f for f in single.int_sends(tables, views) if f.kind in checks]
    if TORN_TRANSACTION in checks:
        findings += single.torn_transactions(tables, views, settings.complete)
    findings += offset_findings(tables, views, checks)
    findings += cycle_findings(tables, views, checks, settings.read_committed)
    return _answer(run_id, findings, limit)


def _answer(run_id: int, findings: list[single.Finding], limit: int) -> pd.DataFrame:
    """Per kind: the total and the first ``limit`` findings by (index, partition), stable."""
    records = []
    by_kind: dict[str, list[single.Finding]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    for kind in sorted(by_kind):
        ordered = sorted(by_kind[kind], key=lambda f: (f.index, f.partition))
        for finding in ordered[:limit]:
            partition = None if finding.partition == MISSING else finding.partition
            example = json.dumps(finding.example(), sort_keys=True)
            records.append((run_id, kind, len(ordered), finding.index, partition, example))
    if not records:
        return empty_answer()
    frame = pd.DataFrame.from_records(records, columns=list(OUTPUT_COLUMNS))
    return frame.astype({"run_id": "int64", "total": "int64", "index": "int64", "partition": "Int64"})


def pass_anomalies(
    rows: pd.DataFrame, settings: Mapping[int, RunSettings], checks: frozenset[str], limit: int
) -> pd.DataFrame:
    """:func:`run_anomalies` for every run of a pass's rows, ordered by run, kind, index, partition."""
    if rows.empty:
        return empty_answer()
    parts = [
        run_anomalies(group, settings[int(run_id)], checks, limit)
        for run_id, group in rows.groupby("run_id", sort=True)
    ]
    found = [part for part in parts if not part.empty]
    return ordered(pd.concat(found, ignore_index=True)) if found else empty_answer()


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """An answer in the order and dtypes both engines return it: run, kind, then the examples' order."""
    keys = ["run_id", "kind", "index", "partition"]
    frame = frame.astype({"run_id": "int64", "total": "int64", "index": "int64", "partition": "Int64"})
    return frame.sort_values(keys, na_position="first", kind="stable", ignore_index=True)[
        list(OUTPUT_COLUMNS)
    ]


def spark_function(
    settings: Mapping[int, RunSettings], checks: frozenset[str], limit: int
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The function ``applyInPandas`` runs on each run's rows (its result has :data:`OUTPUT_DDL`'s columns)."""
    chosen = dict(settings)

    def per_run(rows: pd.DataFrame) -> pd.DataFrame:
        run_id = int(rows["run_id"].iloc[0])
        return run_anomalies(rows, chosen[run_id], checks, limit)

    return per_run
