"""Runs the checks of one batch through an engine and turns the answers into ``results.json``.

Everything after the aggregations happens here, once for both engines: completeness of
the evidence, verdicts, config-aware expectations, examples with their operations (built
by :mod:`checker.examples` from the rows fetched here).

**Verdict.** ``false`` (invalid) when any non-warning anomaly was found -- an anomaly
proven on the evidence present stays proven when other evidence is missing.  Otherwise
``"unknown"`` when the evidence is incomplete: a partition of the topic without a complete
drain, a replica dump missing, failed or damaged, a broker's or the controller's event log
missing, damaged, torn or with a ``seq`` gap (:mod:`checker.invariant_evidence`), bad history
lines skipped (only when some were: ``--skip-bad-lines`` on a clean history changes nothing),
or only some checks run.
``true`` (valid) only when every check ran on complete evidence and found nothing but
warnings (``checker.definitions.WARNINGS``: unseen, divergent-tail; stalled unless
``--liveness strict``).

``results.json`` (``RESULTS_SCHEMA_VERSION``)::

    {"schema_version": 1, "run": DIR, "valid": true|false|"unknown",
     "expected_only": bool,            # invalid, but every anomaly is permitted by the config
     "anomalies": {NAME: {"count": n, "expected": bool, "rule": str|null,
                          "severity": "error"|"warning", "examples": [...]}},
     "incomplete": [reason, ...], "checks": [NAME, ...],
     "not_applicable": {NAME: why},    # the target has one replica or none: no bearing on "valid"
     "config": {"acks", "truncation.mode", "min.insync.replicas",
                "unclean.leader.election.enable", "flush.messages", "faults", "scenario", "rules"},
     "stats": {"history_rows", "sends": {"invoke", "ok", "fail", "info"}, "poll_records",
               "drain_records", "nemesis_ops", "skipped_lines",
               "partitions": {P: {"drain_complete", "end_offset", "drained_records"}},
               "replicas": {"nodes", "missing", "records": {NODE: n}}},
     "liveness": null | {"stall_threshold_s", "mode", "send_period_s": [start, end]|null,
                  "last_heal_s", "partitions": {P: {"recovery_send_s", "recovery_poll_s",
                  "longest_gap_s", "longest_gap_from_s",
                  "unpolled": {"count", "by_age_s": {"<1", "1-10", "10-60", ">=60"}, "oldest_s"}}}}}

``liveness`` (``checker.liveness``; null when stalled is not among the checks) is computed by
the engines as integers and turned into seconds here, so both engines write it alike; the
``stalled`` anomaly is decided from it with the check's :class:`checker.definitions.Liveness`
(threshold and mode: its severity is :func:`checker.definitions.severity`'s).

Only anomalies with a count above zero appear; ``NAME`` is one of
:data:`checker.definitions.ALL_CHECKS`, and ``checks`` lists those that ran in that order.
Beside it, ``anomaly_records.parquet``: every lost and divergent record (:mod:`checker.records`).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_LIVENESS,
    GROUP_CHECKS,
    INCONSISTENT_OFFSETS,
    INVARIANT_CHECKS,
    ISR_DIVERGENCE,
    ORDER_CHECKS,
    REPLICA_CHECKS,
    STALLED,
    TXN_CHECKS,
    VALUE_CHECKS,
    Liveness,
    severity,
)
from checker.engine import Engine, plain_value
from checker.evidence import RunInput
from checker.example_rules import example_op_keys
from checker.examples import divergence_example, group_example, offset_example, order_example, value_example
from checker.expectations import applicable_rules, expectation
from checker.invariant_examples import event_keys, fetch_events, invariant_example
from checker.liveness import fault_tables, liveness_results
from checker.records import Answer, no_records, run_records, write_records
from testbed.record.history import F_DRAIN, F_NEMESIS, F_POLL, F_SEND, F_TXN, HISTORY_SCHEMA, table_to_ops
from testbed.record.ops import OP_TYPES
from testbed.record.rundir import RunDir
from testbed.record.stored_run import NEVER_FLUSH

RESULTS_SCHEMA_VERSION = 1


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: plain_value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _ops_from_rows(frame: pd.DataFrame) -> dict[tuple[int, int], dict[str, Any]]:
    """(run_id, index) -> op dict, restored with the history module's own decoder.

    The rows of the whole pass become one Arrow table, which is cut into its runs' slices:
    a pandas group and an Arrow table built per run cost 1.3-2.8 s for 1000 runs' few rows.
    """
    ops: dict[tuple[int, int], dict[str, Any]] = {}
    if frame.empty:
        return ops
    table = pa.Table.from_pylist(_records(frame), schema=HISTORY_SCHEMA).sort_by("run_id")
    run_ids = table["run_id"].to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], run_ids[1:] != run_ids[:-1]]))
    for start, end in zip(starts, [*starts[1:], len(run_ids)], strict=True):
        for op in table_to_ops(table.slice(start, end - start)):
            ops[(int(run_ids[start]), op.index)] = op.to_dict()
    return ops


def _config(spec: dict[str, Any]) -> dict[str, Any]:
    """The settings ``results.json`` echoes: as ``test.json`` recorded them (None: not recorded)."""
    config = spec.get("broker_config") or {}
    workload = spec["workload"]
    return {
        "acks": str(workload.get("acks", "all")),
        **{key: _recorded(config, key) for key in _ECHOED_SETTINGS},
        "faults": sorted(str(f) for f in (spec.get("nemesis") or {}).get("faults") or []),
        "scenario": spec.get("scenario"),
        "rules": [rule.name for rule in applicable_rules(spec)],
    }


_ECHOED_SETTINGS = (
    "truncation.mode",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "flush.messages",
)


def _recorded(config: dict[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return "never" if key.startswith("flush.") and text == NEVER_FLUSH else text


HISTORY_QUESTIONS = (
    "drain status",
    "value checks",
    "offset checks",
    "order checks",
    "group checks",
    "txn checks",
    "example ops",
)
"""The questions answered one after another in the driver's first chain (the rest in a second)."""
QUESTIONS = (*HISTORY_QUESTIONS, "replica checks", "white-box checks", "liveness", "row counts")
"""What a pass asks its engine, each reported to ``on_answer`` once answered (or skipped):
a batch of thousands of runs takes minutes, and its progress is these, pass by pass."""

AnswerCallback = Callable[[str], None]


class _Batch:
    """The engine's answers for one pass, indexed by run."""

    def __init__(
        self,
        engine: Engine,
        runs: list[RunInput],
        checks: frozenset[str],
        limit: int,
        liveness: Liveness,
        on_answer: AnswerCallback | None = None,
    ) -> None:
        self.runs = runs
        self.checks = checks
        self.limit = limit
        self._on_answer = on_answer
        self._answer_lock = threading.Lock()  # answers arrive from two threads
        self.settings = liveness
        # The value, offset and poll questions (which need the drains' completeness first),
        # the replica questions and the row counts (only the stats use them) do not depend on
        # each other.  An engine that can serve two at once (Spark: its small jobs leave cores
        # idle; pandas: numpy and Arrow release the GIL) gets the first chain in this thread
        # and the other two in a second one; the answers are the same either way.
        if engine.concurrent:
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                others = pool.submit(self._other_questions, engine)
                self._history_questions(engine)
                others.result()
        else:
            self._history_questions(engine)
            self._other_questions(engine)
        # Each answer is split by run once: filtering whole frames once per run made the
        # assembly quadratic in the runs of a pass (2.7 s of pandas indexing at 50 runs).
        self.values_of = _by_key(self.values, "run_id")
        self.offsets_of = _by_key(self.offsets, "run_id")
        self.orders_of = _by_key(self.orders, "run_id")
        self.groups_of = _by_key(self.groups, "run_id")
        self.txns_of = _by_key(self.txns, "run_id")
        self.divergence_of = _by_key(self.divergence, "run_id")
        self.invariants_of = _by_key(self.invariants, "run_id")
        self.liveness_of = _by_key(self.liveness, "run_id")
        self.row_counts_of = _by_key(self.row_counts, "run_id")
        self.drains_of = _by_key(self.drains, "run_id")
        self.observations_at = _by_key(self.observations, "run_id", "partition", "offset")
        self.replica_records_at = _by_key(self.replica_records, "run_id", "partition", "offset")

    def _history_questions(self, engine: Engine) -> None:
        runs, checks, limit = self.runs, self.checks, self.limit
        self.drains = engine.drain_status(runs)
        self._answered("drain status")
        complete = pd.DataFrame(
            [(run.history_run_id, p) for run in runs for p in range(run.partitions)],
            columns=["run_id", "partition"],
        ).astype({"partition": "int32"})
        status = self.drains[["run_id", "partition", "complete"]].astype({"partition": "int32"})
        complete = complete.merge(status, on=["run_id", "partition"], how="left")
        complete["complete"] = complete["complete"].fillna(False).astype(bool)
        empty = pd.DataFrame(columns=["run_id", "kind", "total"])
        self.values, self.value_records = (
            engine.value_anomalies(runs, complete, checks, limit)
            if checks & set(VALUE_CHECKS)
            else Answer(empty, no_records())
        )
        self._answered("value checks")
        self.offsets = engine.offset_anomalies(runs, limit) if INCONSISTENT_OFFSETS in checks else empty
        self._answered("offset checks")
        self.orders = engine.order_anomalies(runs, checks, limit) if checks & set(ORDER_CHECKS) else empty
        self._answered("order checks")
        self.groups = engine.group_anomalies(runs, checks, limit) if checks & set(GROUP_CHECKS) else empty
        self._answered("group checks")
        self.txns = engine.txn_anomalies(runs, complete, checks, limit) if checks & set(TXN_CHECKS) else empty
        self._answered("txn checks")
        self.ops = (
            _ops_from_rows(engine.fetch_ops(runs, self._op_keys()))
            if not (self.values.empty and self.orders.empty and self.groups.empty)
            else {}
        )
        self.observations = pd.DataFrame()
        if not self.offsets.empty:
            self.observations = engine.fetch_observations(
                runs, self.offsets[["run_id", "partition", "offset"]]
            )
        self._answered("example ops")

    def _other_questions(self, engine: Engine) -> None:
        self._replica_questions(engine)
        self._answered("replica checks")
        self._invariant_questions(engine)
        self._answered("white-box checks")
        self._liveness_questions(engine)
        self._answered("liveness")
        self.row_counts = engine.row_counts(self.runs)
        self._answered("row counts")

    def _answered(self, question: str) -> None:
        if self._on_answer is not None:
            with self._answer_lock:
                self._on_answer(question)

    def _liveness_questions(self, engine: Engine) -> None:
        """The liveness figures: fault windows paired here, per run; the figures by the engine."""
        self.liveness = pd.DataFrame(columns=["run_id"])
        self.last_heal: dict[int, int | None] = {}
        if STALLED not in self.checks:
            return
        windows, heals = fault_tables(self.runs)
        self.last_heal = {int(r["run_id"]): plain_value(r["last_heal"]) for r in heals.to_dict("records")}
        self.liveness = engine.liveness(self.runs, windows, heals)

    def _invariant_questions(self, engine: Engine) -> None:
        """The white-box checks, the events their examples name and, for isr-divergence, the
        records at each first divergent offset (keyed by the replicas' run id)."""
        event_runs = [run for run in self.runs if run.events_path is not None]
        self.invariants = pd.DataFrame(columns=["run_id", "kind", "total"])
        self.events: dict[Any, dict[str, Any]] = {}
        self.invariant_records: dict[int, dict[tuple[int, int], dict[str, dict[str, Any]]]] = {}
        if not (self.checks & set(INVARIANT_CHECKS)) or not event_runs:
            return
        self.invariants = engine.invariant_anomalies(event_runs, self.checks, self.limit)
        if self.invariants.empty:
            return
        rows = _records(self.invariants)
        paths = {
            run.events_run_id: (run.events_path, run.events_slice)
            for run in event_runs
            if run.events_run_id is not None and run.events_path is not None
        }
        self.events = fetch_events(paths, event_keys(rows))
        replicas_of = {run.events_run_id: run.replicas_run_id for run in event_runs}
        positions = [
            (replicas_of[row["run_id"]], row["partition"], row["value"])
            for row in rows
            if row["kind"] == ISR_DIVERGENCE and replicas_of.get(row["run_id"]) is not None
        ]
        if positions:
            keys = pd.DataFrame(positions, columns=["run_id", "partition", "offset"])
            # The list the replica questions asked with: an engine may keep that pass's columns.
            found = engine.fetch_replica_records(
                [run for run in self.runs if run.replicas_path is not None], keys
            )
            for record in _records(found):
                at = self.invariant_records.setdefault(int(record["run_id"]), {})
                shown = {k: record[k] for k in ("offset", "leader_epoch", "key", "value")}
                at.setdefault((record["partition"], record["offset"]), {})[record["node"]] = shown

    def _replica_questions(self, engine: Engine) -> None:
        replica_runs = [run for run in self.runs if run.replicas_path is not None]
        empty = pd.DataFrame(columns=["run_id", "kind", "total"])
        run_divergence = bool(self.checks & set(REPLICA_CHECKS)) and bool(replica_runs)
        answer = (
            engine.divergence(replica_runs, self.limit) if run_divergence else Answer(empty, no_records())
        )
        self.divergence, self.divergence_records = (part[part["kind"].isin(self.checks)] for part in answer)
        self.replica_records = pd.DataFrame()
        if not self.divergence.empty:
            self.replica_records = engine.fetch_replica_records(
                replica_runs, self.divergence[["run_id", "partition", "offset"]]
            )

    def _op_keys(self) -> pd.DataFrame:
        """Which ops, and which of their records, the examples show (see ``Engine.fetch_ops``)."""
        return example_op_keys(self.values, self.orders, self.groups)

    def op(self, run_id: int, index: Any) -> dict[str, Any] | None:
        index = plain_value(index)
        return None if index is None else self.ops.get((run_id, int(index)))


def _by_key(frame: pd.DataFrame, *columns: str) -> dict[Any, list[dict[str, Any]]]:
    """The rows of ``frame`` as plain records, grouped by the value of ``columns`` (a tuple when several)."""
    grouped: dict[Any, list[dict[str, Any]]] = {}
    if frame.empty:
        return grouped
    for record in _records(frame):
        key = record[columns[0]] if len(columns) == 1 else tuple(record[c] for c in columns)
        grouped.setdefault(key, []).append(record)
    return grouped


def _examples(
    of_run: dict[Any, list[dict[str, Any]]], run_id: int | None, kind: str | None
) -> tuple[int, list[dict[str, Any]]]:
    """The example rows of one run (and anomaly ``kind``) in the engine's order, and their total."""
    rows = of_run.get(run_id, [])
    if kind is not None:
        rows = [row for row in rows if row["kind"] == kind]
    if not rows:
        return 0, []
    return int(rows[0]["total"]), rows


def _stats(run: RunInput, batch: _Batch) -> dict[str, Any]:
    counts = batch.row_counts_of.get(run.history_run_id, [])

    def rows_where(f: int, record: bool | None = None, kind: int | None = None) -> int:
        return sum(
            int(row["rows"])
            for row in counts
            if row["f"] == f
            and (record is None or row["is_record"] == record)
            and (kind is None or row["type"] == kind)
        )

    drains = {int(r["partition"]): r for r in batch.drains_of.get(run.history_run_id, [])}
    partitions = {
        str(p): {
            "drain_complete": bool(drains.get(p, {}).get("complete") or False),
            "end_offset": drains.get(p, {}).get("end_offset"),
            "drained_records": int(drains.get(p, {}).get("records") or 0),
        }
        for p in range(run.partitions)
    }
    return {
        "history_rows": sum(int(row["rows"]) for row in counts),
        "sends": {name: rows_where(F_SEND, kind=code) for code, name in enumerate(OP_TYPES)},
        # txn ops by type (ok committed, fail aborted, info unknown; read-only ones are ok)
        "txns": {name: rows_where(F_TXN, kind=code) for code, name in enumerate(OP_TYPES)},
        "poll_records": rows_where(F_POLL, record=True),
        "drain_records": rows_where(F_DRAIN, record=True),
        "nemesis_ops": rows_where(F_NEMESIS),
        "skipped_lines": run.skipped_lines,
        "partitions": partitions,
        "replicas": {
            "nodes": run.replica_nodes,
            "missing": run.missing_nodes,
            "records": run.replica_log_sizes,
        },
    }


def _run_results(run: RunInput, batch: _Batch, checks: frozenset[str]) -> dict[str, Any]:
    hid, rid = run.history_run_id, run.replicas_run_id
    found: dict[str, tuple[int, list[dict[str, Any]]]] = {}
    for kind in VALUE_CHECKS:
        total, rows = _examples(batch.values_of, hid, kind)
        found[kind] = (total, [value_example(kind, r, batch, hid) for r in rows])
    total, rows = _examples(batch.offsets_of, hid, None)
    found[INCONSISTENT_OFFSETS] = (total, [offset_example(r, batch, hid) for r in rows])
    for kind in ORDER_CHECKS:
        total, rows = _examples(batch.orders_of, hid, kind)
        found[kind] = (total, [order_example(kind, r, batch, hid) for r in rows])
    for kind in GROUP_CHECKS:
        total, rows = _examples(batch.groups_of, hid, kind)
        found[kind] = (total, [group_example(kind, r, batch, hid) for r in rows])
    for kind in TXN_CHECKS:  # each example whole, as checker.txn built it
        total, rows = _examples(batch.txns_of, hid, kind)
        found[kind] = (total, [json.loads(row["example"]) for row in rows])
    for kind in REPLICA_CHECKS:
        total, rows = _examples(batch.divergence_of, rid, kind)
        found[kind] = (total, [divergence_example(r, batch, rid) for r in rows] if rid is not None else [])
    records = batch.invariant_records.get(rid, {}) if rid is not None else {}
    for kind in INVARIANT_CHECKS:
        total, rows = _examples(batch.invariants_of, run.events_run_id, kind)
        found[kind] = (total, [invariant_example(kind, r, batch.events, records) for r in rows])

    liveness: dict[str, Any] | None = None
    if STALLED in checks:
        rows = batch.liveness_of.get(hid, [])
        liveness, stalled = liveness_results(run, rows, batch.last_heal.get(hid), batch.settings)
        found[STALLED] = (len(stalled), stalled[: batch.limit])

    rules = applicable_rules(run.spec)
    anomalies: dict[str, Any] = {}
    for kind in ALL_CHECKS:
        total, examples = found.get(kind, (0, []))
        if total and kind in checks:  # one engine question may answer two checks (REPLICA_CHECKS)
            expected, rule = expectation(kind, rules)
            anomalies[kind] = {
                "count": total,
                "expected": expected,
                "rule": rule,
                "severity": severity(kind, batch.settings),
                "examples": examples,
            }
    stats = _stats(run, batch)
    incomplete = list(run.incomplete)
    undrained = [p for p, s in stats["partitions"].items() if not s["drain_complete"]]
    if undrained:
        incomplete.append(
            f"partition(s) {', '.join(undrained)} of topic {run.topic} have no complete final drain"
        )
    skipped_checks = [c for c in ALL_CHECKS if c not in checks]
    if skipped_checks:
        incomplete.append(f"checks not run: {', '.join(skipped_checks)}")
    errors = [a for a in anomalies.values() if a["severity"] == "error"]
    valid: bool | str = False if errors else ("unknown" if incomplete else True)
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "run": str(run.run_dir),
        "valid": valid,
        "expected_only": bool(errors) and all(a["expected"] for a in errors),
        "anomalies": anomalies,
        "incomplete": incomplete,
        "not_applicable": dict(run.not_applicable),
        "checks": [c for c in ALL_CHECKS if c in checks],
        "config": _config(run.spec),
        "stats": stats,
        "liveness": liveness,
    }


def check_pass(
    engine: Engine,
    runs: list[RunInput],
    checks: Iterable[str],
    limit: int,
    liveness: Liveness = DEFAULT_LIVENESS,
    on_answer: AnswerCallback | None = None,
    records: dict[Path, pa.Table] | None = None,
) -> list[dict[str, Any]]:
    """Results for every run of one pass (run ids distinct), in the order given.

    ``on_answer`` is called with each of :data:`QUESTIONS` as the engine answers it.  A check
    the engine does not implement (``Engine.implements``) is refused with ``ValueError``.
    ``records``, when given, receives each run's anomaly records (:mod:`checker.records`).
    """
    chosen = frozenset(checks)
    lacking = [name for name in ALL_CHECKS if name in chosen and name not in engine.implements]
    if lacking:
        # A registry entry without an implementation would read as "found nothing": refuse instead.
        raise ValueError(f"the {engine.name} engine does not implement {', '.join(lacking)}")
    batch = _Batch(engine, runs, chosen, limit, liveness, on_answer)
    if records is not None:
        records.update(run_records(runs, batch.value_records, batch.divergence_records))
    return [_run_results(run, batch, chosen) for run in runs]


def write_results(results: dict[str, Any], run_dir: Path, records: pa.Table | None = None) -> Path:
    """Write ``results.json`` atomically into the run directory, and its ``anomaly_records.parquet``
    (:func:`checker.records.write_records`: None removes an older one, which would contradict it)."""
    write_records(records, run_dir)
    target = RunDir(run_dir).results
    partial = target.with_name("results.json.partial")
    partial.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, target)
    return target
