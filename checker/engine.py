"""The contract between the check driver and its two engines (pandas and Spark).

An engine answers a handful of set-oriented questions about one *pass* -- a list of runs
whose ``run_id`` values are distinct -- and returns small pandas DataFrames: at most
``limit`` example rows per (run, anomaly), each carrying the anomaly's total count (and, for
the few anomalies whose every record a report marks, those records: :mod:`checker.records`).  All
decisions about verdicts, expectations and formatting live in :mod:`checker.driver`, once,
so that the engines cannot drift apart in anything but the aggregations themselves; the
tests run both on the same generated runs and require identical ``results.json``.

Orderings are part of the contract (examples are the first ``limit`` rows in this order,
ascending, nulls first; each family's ``example_order`` in :mod:`checker.anomalies`):

* value checks: ``partition, value, value_text``
* inconsistent-offsets: ``partition, offset``
* order checks: ``process, partition, index, item``
* group checks: ``partition, offset, index, item``
* replica-divergence and divergent-tail: ``partition, node_a, node_b``
* white-box checks: ``partition, ts, node, seq``
* transactional checks: ``index, partition`` (:mod:`checker.txn`, the same code in both engines)
* liveness figures: ``run_id, partition`` (one row each, no limit: they are per partition)
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd
import pyarrow as pa

from checker.evidence import RunInput
from checker.records import Answer
from testbed.record.history import HISTORY_SCHEMA

HISTORY_ROW_COLUMNS: tuple[str, ...] = tuple(HISTORY_SCHEMA.names)
"""Every column of a history row, in the schema's order."""
OP_KEY_COLUMNS = ("run_id", "index", "partition", "value", "value_text", "offset", "null_value")
REPLICA_ROW_COLUMNS = ("run_id", "node", "partition", "offset", "leader_epoch", "key", "value")


class Engine(Protocol):
    name: str
    implements: frozenset[str]
    """The registry entries (:mod:`checker.anomalies`) this engine answers: the driver refuses to
    ask it for any other, and ``tests/checker/test_anomalies.py`` requires every entry of both."""
    concurrent: bool
    """Whether the driver may ask two questions at once from two threads (see ``checker.driver``)."""

    def row_counts(self, runs: list[RunInput]) -> pd.DataFrame:
        """``run_id, f, type, is_record, rows``: history rows by function, type and record-ness."""

    def drain_status(self, runs: list[RunInput]) -> pd.DataFrame:
        """``run_id, partition, complete, end_offset, records`` from the drain ok ops."""

    def value_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> Answer:
        """Examples: ``run_id, kind, total`` + :data:`checker.definitions.VALUE_EXAMPLE_COLUMNS`.

        ``complete`` has ``run_id, partition, complete`` for every partition of every run.
        Records: every flagged value of :data:`checker.records.VALUE_RECORD_KINDS`.
        """

    def offset_anomalies(self, runs: list[RunInput], limit: int) -> pd.DataFrame:
        """``run_id, total`` + :data:`checker.definitions.OFFSET_EXAMPLE_COLUMNS`."""

    def order_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """``run_id, kind, total`` + :data:`checker.definitions.ORDER_EXAMPLE_COLUMNS`.

        The order checks (:data:`checker.definitions.ORDER_CHECKS`) among ``checks``: the poll
        family on ``ok`` poll records (stale-read on drain records too), the send family on
        every send row (a completion's invoke is its process's previous send row).
        """

    def group_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """``run_id, kind, total`` + :data:`checker.definitions.GROUP_EXAMPLE_COLUMNS`.

        The consumer-group checks (:data:`checker.definitions.GROUP_CHECKS`) among ``checks``,
        on the group ops (``assign``, ``commit``), ``ok`` poll records and acknowledged sends.
        A pass without group ops must cost (next to) nothing: ``bench/checker.py``'s histories
        have none.
        """

    def invariant_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """``run_id`` (the events' run id), ``kind, total`` + :data:`checker.definitions.INVARIANT_EXAMPLE_COLUMNS`.

        The white-box checks (:data:`checker.definitions.INVARIANT_CHECKS`) among ``checks``, on
        the event tables of the runs that have one (``events_path``); isr-divergence also reads
        their replicas.  Examples in :data:`checker.definitions.INVARIANT_ORDER`.
        """

    def txn_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> pd.DataFrame:
        """:data:`checker.txn.run.OUTPUT_COLUMNS` (``run_id, kind, total, index, partition, example``).

        The transactional checks (:data:`checker.definitions.TXN_CHECKS`) among ``checks``, by
        :func:`checker.txn.run.run_anomalies` per run (``complete`` as for :meth:`value_anomalies`);
        ``example`` is each example whole, as JSON text.
        """

    def liveness(self, runs: list[RunInput], windows: pd.DataFrame, heals: pd.DataFrame) -> pd.DataFrame:
        """``run_id`` + :data:`checker.liveness.LIVENESS_COLUMNS`: one row per (run, partition) with
        a send row, ordered by both, every figure an integer (nanoseconds, counts) or null.

        ``windows`` (``run_id, start, end``) and ``heals`` (``run_id, last_heal``) are the runs'
        fault windows and last heals, which the driver pairs from the nemesis ops
        (:func:`checker.liveness.fault_tables`); the figures read every send and poll record.
        """

    def divergence(self, runs: list[RunInput], limit: int) -> Answer:
        """Examples: ``run_id, kind, total`` + :data:`checker.definitions.DIVERGENCE_EXAMPLE_COLUMNS`.

        ``kind`` is replica-divergence or divergent-tail (:data:`checker.definitions.REPLICA_CHECKS`):
        each position where two replicas hold different records is one of them, by the replicas'
        high watermarks (:func:`high_watermark_rows`); ``total`` counts positions per (run, kind).
        Records: every replica-divergence position (:mod:`checker.records`).
        """

    def fetch_ops(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        """History rows (``HISTORY_ROW_COLUMNS``) of the ops ``keys[OP_KEY_COLUMNS]`` that an example shows.

        A row of op (run_id, index) is returned when it carries no record (a send, an empty
        poll), or when it is a record of the key's partition whose value (or value_text)
        equals the key's, or whose offset equals the key's, or -- for a key with
        ``null_value`` -- whose value is null (neither integer nor text).  Never a whole drain
        op: one may hold millions of records.
        """

    def fetch_observations(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        """History rows that observe ``keys[run_id, partition, offset]``: send acks and read records."""

    def fetch_replica_records(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        """Replica rows (``REPLICA_ROW_COLUMNS``) at ``keys[run_id, partition, offset]`` of the run's topic."""


_MASKED = {
    pa.int8(): pd.Int8Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def high_watermark_rows(runs: list[RunInput]) -> pd.DataFrame:
    """``run_id`` (the replicas' run id), ``partition``, ``node_index``, ``high_watermark``: one row
    per replica of every partition that some replica of the run's topic has a partition line for.

    The rule both engines compare by (``checker.definitions``, replica-divergence): a replica
    whose dump has no line for the partition gets HW 0 -- nothing of it is known committed.
    """
    rows: list[tuple[int, int, int, int]] = []
    for run in runs:
        if run.replicas_run_id is None:
            continue
        partitions = sorted({p for marks in run.high_watermarks.values() for p in marks})
        for number, node in enumerate(run.replica_nodes):
            marks = run.high_watermarks.get(node, {})
            rows.extend((run.replicas_run_id, p, number, marks.get(p, 0)) for p in partitions)
    frame = pd.DataFrame(rows, columns=["run_id", "partition", "node_index", "high_watermark"])
    return frame.astype(
        {"run_id": "int64", "partition": "int32", "node_index": "int16", "high_watermark": "int64"}
    )


def plain_value(value: Any) -> Any:
    """A pandas/numpy scalar (or missing value) as a plain JSON-able Python value, missing as ``None``."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow to pandas with nullable integer dtypes (no float detour for 64-bit values)."""
    return table.to_pandas(types_mapper=_MASKED.get)
