"""The pandas engine: the checks of :mod:`checker.definitions` for small runs, without a JVM.

It is also the oracle the Spark engine is tested against, so it is written for clarity
first: each check is one ``groupby`` on integer keys, exactly the aggregation the Spark
engine performs.  Nullable integer columns use pandas' masked dtypes so that 64-bit values
never pass through float.

What makes it fast (0.28-0.36 s at 1 M ops in ``bench/checker.py``, 0.3-0.5 s right after
a Spark JVM has exited; 1.4-1.8 s before) is what it does *not* convert or touch: a pass's
columns are read when first needed and stay in Arrow, numpy masks pick the rows each
question reads, and only those rows become a DataFrame.  The two questions that read
nearly every row -- the value checks and divergence -- first narrow them to candidate
groups (:mod:`checker.pandas.candidates`, a tested superset of what the groupby flags); row counts
are Arrow's hash grouping, drain status ``np.bincount`` over dense group codes.  Memory
matters as much as work here: on this project's VMs memory touched for the first time cost
up to 2.5 ms per MB, so a column that only a few rows need (the example rows, found with
the key columns in memory by the rules of :mod:`checker.example_rules`; the drains' own columns)
is read for those rows alone, a row group at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from checker import example_rules, run_reads
from checker.definitions import (
    ABORTED_READ,
    DIVERGENCE_EXAMPLE_COLUMNS,
    DIVERGENT_TAIL,
    DUPLICATE,
    G1A,
    GROUP_ORDER,
    INCONSISTENT_OFFSETS,
    LOST_READ,
    LOST_WRITE,
    OFFSET_EXAMPLE_COLUMNS,
    ORDER_EXAMPLE_COLUMNS,
    POLL_CHECKS,
    REPLICA_DIVERGENCE,
    SEND_CHECKS,
    STALE_READ,
    TYPE_FAIL,
    TYPE_INVOKE,
    TYPE_OK,
    UNEXPECTED,
    UNSEEN,
    VALUE_EXAMPLE_COLUMNS,
)
from checker.engine import HISTORY_ROW_COLUMNS, REPLICA_ROW_COLUMNS, high_watermark_rows
from checker.evidence import RunInput
from checker.pandas import candidates, counts, groups, invariants, liveness, order
from checker.records import OFFSET_RECORD_KINDS, VALUE_RECORD_KINDS, Answer, no_records, records_of
from checker.txn import run as txn
from checker.txn import tables as txn_tables
from testbed.record.history import F_DRAIN, F_POLL, F_SEND, F_TXN_SEND, POLL_CODES, SEND_CODES

IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {LOST_WRITE, UNSEEN, ABORTED_READ, G1A, LOST_READ, UNEXPECTED, DUPLICATE, INCONSISTENT_OFFSETS}
    | {REPLICA_DIVERGENCE, DIVERGENT_TAIL}
)
"""The registry entries (:mod:`checker.anomalies`) this module flags: the value checks, offsets, divergence."""


def hash_strings(values: pd.Series) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """64-bit hashes of a string column (nulls hash alike): identity without string comparisons."""
    hashed: np.ndarray[Any, np.dtype[np.uint64]] = pd.util.hash_array(
        values.astype(object).to_numpy(), categorize=True
    )
    return hashed


def aggregate_values(rows: pd.DataFrame) -> pd.DataFrame:
    """The per-(run, partition, value) facts and example columns of the value checks.

    ``rows``: history rows with ``run_id, index, f, type, partition, offset, value``; those
    that are not sends or reads of an integer value are ignored.  The Spark engine uses this
    too, for the few values its examples show (see ``SparkEngine.value_anomalies``).
    """
    rows = rows[rows["f"].isin((*SEND_CODES, *POLL_CODES, F_DRAIN)) & rows["value"].notna()]
    f, kind = rows["f"], rows["type"]
    send, poll, drain = f.isin(SEND_CODES), f.isin(POLL_CODES), f == F_DRAIN
    ok = send & (kind == TYPE_OK)
    failed = send & (kind == TYPE_FAIL)
    read = poll | drain
    grouped = rows.assign(
        sent=send.astype("int8"),
        acked=ok.astype("int8"),
        failed=(failed & (f == F_SEND)).astype("int8"),
        aborted=(failed & (f == F_TXN_SEND)).astype("int8"),
        ack_offset=rows["offset"].where(ok & (rows["offset"] >= 0).fillna(False)),  # -1: acks=0, unknown
        send_index=rows["index"].where(send & (kind != TYPE_INVOKE)),
        polled=poll.astype("int64"),
        drained=drain.astype("int64"),
        read_index=rows["index"].where(read),
        poll_offset=rows["offset"].where(poll),
        read_offset=rows["offset"].where(read),
    ).groupby(["run_id", "partition", "value"])
    return grouped.agg(
        sent=("sent", "max"),
        acked=("acked", "max"),
        failed=("failed", "max"),
        aborted=("aborted", "max"),
        ack_offset=("ack_offset", "max"),
        send_index=("send_index", "max"),
        polled=("polled", "sum"),
        drained=("drained", "sum"),
        read_index=("read_index", "min"),
        poll_offset=("poll_offset", "min"),
        read_min_offset=("read_offset", "min"),
        read_max_offset=("read_offset", "max"),
    ).reset_index()


def _top(frame: pd.DataFrame, group: list[str], order: list[str], limit: int) -> pd.DataFrame:
    """Keep the first ``limit`` rows per group in ``order`` and attach each group's ``total``."""
    if frame.empty:
        return frame.assign(total=pd.Series(dtype="int64"))
    frame = frame.sort_values([*group, *order], na_position="first", kind="stable")
    frame = frame.assign(total=frame.groupby(group, sort=False)[group[0]].transform("size").astype("int64"))
    return frame[frame.groupby(group, sort=False).cumcount() < limit].reset_index(drop=True)


def _by_file(positions: candidates.Ints, sizes: list[int]) -> Iterator[tuple[int, candidates.Ints]]:
    """Ascending positions in a pass of files holding ``sizes`` rows, as (file number, positions in it)."""
    starts = np.cumsum([0, *sizes])
    for number in range(len(sizes)):
        low, high = np.searchsorted(positions, starts[number : number + 2])
        if low < high:
            yield number, positions[low:high] - starts[number]


def _history_rows(run: RunInput, rows: candidates.Ints, names: list[str]) -> pa.Table:
    """Rows ``rows`` (positions) of one run's history, its dictionary columns kept encoded."""
    dictionary = run_reads.DICTIONARY_COLUMNS
    return run_reads.read_run_rows(run.history_path, run.history_slice, rows, names, dictionary)


def _history_key(runs: list[RunInput]) -> tuple[str, ...]:
    """What names a pass's histories: each run's file, and its rows in it when the file is packed."""
    return tuple(f"{run.history_path}:{run.history_slice}" for run in runs)


class PandasEngine:
    """Loads each pass's histories once and answers the engine questions from memory."""

    name = "pandas"
    implements: frozenset[str] = txn.IMPLEMENTS.union(
        IMPLEMENTS, order.IMPLEMENTS, groups.IMPLEMENTS, invariants.IMPLEMENTS, liveness.IMPLEMENTS
    )
    """Every registry entry, each flagged by one module of this engine (its ``IMPLEMENTS``)."""
    concurrent = True
    """The history questions and the replica questions read separate :class:`candidates.Columns`
    (each reads a column once, under its own lock); numpy and Arrow release the GIL, so the two
    chains share two cores (measured alone in ``bench/checker.py --worker pandas`` at 1 M ops:
    0.69-0.75 s against 0.78-0.92 s one after the other)."""

    def __init__(self) -> None:
        self._history: dict[tuple[str, ...], candidates.Columns] = {}
        self._history_sizes: dict[tuple[str, ...], list[int]] = {}
        self._replicas: dict[tuple[str, ...], candidates.Columns | None] = {}

    # ---------------------------------------------------------------- loading

    def _columns(self, runs: list[RunInput]) -> candidates.Columns:
        """The pass's histories, each column read when a question first needs it."""
        key = _history_key(runs)
        if key not in self._history:

            def read(names: list[str]) -> pa.Table:
                return run_reads.read_runs([(run.history_path, run.history_slice) for run in runs], names)

            sizes = [
                pq.ParquetFile(run.history_path).metadata.num_rows
                if run.history_slice is None
                else run.history_slice.rows
                for run in runs
            ]

            def read_rows(names: list[str], positions: candidates.Ints) -> pa.Table:
                asked = list(_by_file(positions, sizes)) or [(0, positions[:0])]  # none: one footer's types
                return pa.concat_tables([_history_rows(runs[number], rows, names) for number, rows in asked])

            self._history = {key: candidates.Columns(read, read_rows)}
            self._history_sizes = {key: sizes}
        return self._history[key]

    def _rows_of_ops(self, runs: list[RunInput], keys: pd.DataFrame) -> candidates.Ints:
        """Ascending positions of every history row of the ops ``keys[run_id, index]`` name,
        by binary search in each file's ``index`` (:func:`checker.run_reads.rows_of_ops`): no filter
        runs over every row of the pass."""
        index = self._columns(runs).ints("index")
        sizes = self._history_sizes[_history_key(runs)]
        starts = np.cumsum([0, *sizes])
        wanted = {
            int(run_id): np.unique(rows["index"].to_numpy(dtype=np.int64))
            for run_id, rows in keys[["run_id", "index"]].dropna().groupby("run_id")
        }
        parts = [
            run_reads.rows_of_ops(index[starts[number] : starts[number + 1]], wanted[run.history_run_id])
            + starts[number]
            for number, run in enumerate(runs)
            if run.history_run_id in wanted
        ]
        # Ascending already: ascending positions per file, files in pass order.
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _rows(self, runs: list[RunInput], rows: np.ndarray[Any, Any], names: list[str]) -> pd.DataFrame:
        """Columns ``names`` of the history rows picked by ``rows`` (a mask or positions) as a DataFrame."""
        table = self._columns(runs).select(names)
        picked = table.filter(pa.array(rows)) if rows.dtype == np.bool_ else table.take(pa.array(rows))
        return run_reads.decoded(picked)

    def _replica_columns(self, runs: list[RunInput]) -> candidates.Columns | None:
        """The replica rows of each run's topic, each column read when first needed."""
        key = tuple(f"{run.replicas_path}:{run.replicas_slice}" for run in runs)
        if key not in self._replicas:
            stored = [run for run in runs if run.replicas_path is not None]
            of_topic: dict[int, pa.Array] = {}  # per run: which of its rows hold its topic, read once

            def topic_mask(number: int) -> pa.Array:
                if number not in of_topic:
                    run = stored[number]
                    assert run.replicas_path is not None
                    topic = run_reads.read_run_table(
                        run.replicas_path, run.replicas_slice, ["topic"], ["topic"]
                    )
                    of_topic[number] = pc.equal(topic["topic"], stored[number].topic).combine_chunks()
                return of_topic[number]

            def read(names: list[str]) -> pa.Table:
                tables = []
                for number, run in enumerate(stored):
                    assert run.replicas_path is not None
                    table = run_reads.read_run_table(run.replicas_path, run.replicas_slice, names, ())
                    mask = topic_mask(number)
                    # Most dumps hold one topic: filtering would only copy every column.
                    tables.append(table if mask.true_count == len(mask) else table.filter(mask))
                return pa.concat_tables(tables)

            def read_rows(names: list[str], positions: candidates.Ints) -> pa.Table:
                """Positions count the topic's rows only: mapped back to each file's own rows."""
                sizes = [topic_mask(number).true_count for number in range(len(stored))]
                parts = []
                for number, rows in list(_by_file(positions, sizes)) or [(0, positions[:0])]:
                    of_file = np.flatnonzero(np.asarray(topic_mask(number).to_numpy(zero_copy_only=False)))
                    path = stored[number].replicas_path
                    if path is not None:
                        parts.append(
                            run_reads.read_run_rows(path, stored[number].replicas_slice, of_file[rows], names)
                        )
                return pa.concat_tables(parts)

            self._replicas = {key: candidates.Columns(read, read_rows) if stored else None}
        return self._replicas[key]

    # ---------------------------------------------------------------- questions

    def row_counts(self, runs: list[RunInput]) -> pd.DataFrame:
        return counts.row_counts(self._columns(runs))

    def drain_status(self, runs: list[RunInput]) -> pd.DataFrame:
        return counts.drain_status(self._columns(runs))

    def value_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> Answer:
        rows = self._rows(
            runs,
            candidates.value_candidate_rows(self._columns(runs), checks),
            ["run_id", "index", "f", "type", "partition", "offset", "value"],
        )
        values = aggregate_values(rows)
        values = values.merge(complete, on=["run_id", "partition"], how="left")
        is_complete = values["complete"].fillna(False).astype(bool)
        acked, sent = values["acked"] == 1, values["sent"] == 1
        unread_by_drain = values["drained"] == 0
        flags = {
            LOST_WRITE: acked & unread_by_drain & is_complete,
            UNSEEN: acked & unread_by_drain & (values["polled"] == 0) & ~is_complete,
            ABORTED_READ: (values["failed"] == 1) & (values["polled"] + values["drained"] > 0),
            G1A: (values["aborted"] == 1) & (values["polled"] + values["drained"] > 0),
            LOST_READ: sent & (values["polled"] > 0) & unread_by_drain & is_complete,
            UNEXPECTED: ~sent & (values["polled"] + values["drained"] > 0),
            DUPLICATE: values["read_min_offset"] != values["read_max_offset"],
        }
        parts = [
            values[flag.fillna(False)].assign(kind=name) for name, flag in flags.items() if name in checks
        ]
        if UNEXPECTED in checks:
            parts.append(self._unexpected_text(runs))
        parts = [part for part in parts if not part.empty]
        columns = ["run_id", "kind", "total", *VALUE_EXAMPLE_COLUMNS]
        if not parts:
            return Answer(pd.DataFrame(columns=columns), no_records())
        stacked = pd.concat(parts, ignore_index=True)
        if "value_text" not in stacked:
            stacked["value_text"] = None
        examples = _top(stacked, ["run_id", "kind"], ["partition", "value", "value_text"], limit)[columns]
        return Answer(examples, records_of(stacked, VALUE_RECORD_KINDS, "value"))

    def _unexpected_text(self, runs: list[RunInput]) -> pd.DataFrame:
        """Read records whose value is not an integer: nobody sent them (sends carry integers)."""
        columns = self._columns(runs)
        f = columns.ints("f")
        reads = self._rows(
            runs,
            (np.isin(f, POLL_CODES) | (f == F_DRAIN)) & columns.valid("item") & ~columns.valid("value"),
            ["run_id", "index", "f", "partition", "offset", "value_text"],
        )
        if reads.empty:
            return pd.DataFrame()
        found = (
            reads.assign(poll_offset=reads["offset"].where(reads["f"].isin(POLL_CODES)))
            .groupby(["run_id", "partition", "value_text"], dropna=False)
            .agg(
                read_index=("index", "min"),
                poll_offset=("poll_offset", "min"),
                read_min_offset=("offset", "min"),
                read_max_offset=("offset", "max"),
            )
            .reset_index()
        )
        missing = pd.array([pd.NA] * len(found), dtype="Int64")
        return found.assign(kind=UNEXPECTED, value=missing, ack_offset=missing, send_index=missing)

    def offset_anomalies(self, runs: list[RunInput], limit: int) -> pd.DataFrame:
        columns = self._columns(runs)
        f, kind = columns.ints("f"), columns.ints("type")
        # An ack observes a position only with a known offset: acks=0 answers -1 (ints() fills nulls with -1).
        rows = self._rows(
            runs,
            (np.isin(f, SEND_CODES) & (kind == TYPE_OK) & (columns.ints("offset") >= 0))
            | ((np.isin(f, POLL_CODES) | (f == F_DRAIN)) & columns.valid("item")),
            ["run_id", "index", "partition", "offset", "value", "value_text"],
        )
        # Nullable 64-bit hashes: a float column would turn a null text into NaN, and NaN != NaN
        # made three null-value observations of one offset "inconsistent" (Spark: consistent).
        text_hash = pd.Series(
            pd.array(hash_strings(rows["value_text"]).view(np.int64), dtype="Int64"), index=rows.index
        ).where(rows["value_text"].notna(), pd.NA)
        grouped = rows.assign(text_hash=text_hash).groupby(["run_id", "partition", "offset"])
        positions = grouped.agg(
            observations=("index", "size"),
            n_int=("value", "count"),
            int_min=("value", "min"),
            int_max=("value", "max"),
            n_text=("text_hash", "count"),
            text_min=("text_hash", "min"),
            text_max=("text_hash", "max"),
        ).reset_index()
        n, n_int, n_text = positions["observations"], positions["n_int"], positions["n_text"]
        inconsistent = (
            (positions["int_min"] != positions["int_max"]).fillna(False)
            | ((n_int > 0) & (n_int < n))
            | (
                (n_int == 0)
                & (
                    (positions["text_min"] != positions["text_max"]).fillna(False)
                    | ((n_text > 0) & (n_text < n))
                )
            )
        )
        found = positions[inconsistent.astype(bool)].assign(
            observations=lambda p: p["observations"].astype("int64")
        )
        return _top(found, ["run_id"], ["partition", "offset"], limit)[
            ["run_id", "total", *OFFSET_EXAMPLE_COLUMNS]
        ]

    def order_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The order checks (:mod:`checker.pandas.order`) on the reads and sends they take."""
        columns = self._columns(runs)
        f = columns.ints("f")
        parts = []
        if checks & set(POLL_CHECKS):
            read = (f == F_POLL) | (f == F_DRAIN) if STALE_READ in checks else f == F_POLL
            placed = columns.valid("item") & columns.valid("partition") & columns.valid("offset")
            ok = columns.ints("type") == TYPE_OK
            reads = self._rows(runs, read & ok & placed & columns.valid("process"), order.READ_COLUMNS)
            parts.append(
                order.poll_order(groups.chained(reads, columns, functools.partial(self._rows, runs)), checks)
            )
        if checks & set(SEND_CHECKS):
            sends = self._rows(runs, (f == F_SEND) & columns.valid("process"), order.SEND_COLUMNS)
            parts.append(order.send_order(sends, checks))
        output = ["run_id", "kind", "total", *ORDER_EXAMPLE_COLUMNS]
        found = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=output)
        return _top(found, ["run_id", "kind"], ["process", "partition", "index", "item"], limit)[output]

    def group_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The group checks (:mod:`checker.pandas.groups`); a pass without group ops reads nothing more."""
        found = groups.pass_anomalies(self._columns(runs), functools.partial(self._rows, runs), checks)
        return _top(found, ["run_id", "kind"], list(GROUP_ORDER), limit)[groups.ANSWER]

    def invariant_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        """The white-box checks (:mod:`checker.pandas.invariants`): small tables, read per question."""
        return invariants.pass_anomalies(runs, checks, limit)

    def txn_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> pd.DataFrame:
        """The transactional checks (:mod:`checker.txn`), run per run on the rows they read."""
        is_input = txn.input_mask(self._columns(runs).ints("f"), self._columns(runs).ints("run_id"))
        rows = self._rows(runs, is_input, list(txn_tables.INPUT_COLUMNS))
        return txn.pass_anomalies(rows, txn.pass_settings(runs, complete), checks, limit)

    def liveness(self, runs: list[RunInput], windows: pd.DataFrame, heals: pd.DataFrame) -> pd.DataFrame:
        """The liveness figures (:mod:`checker.pandas.liveness`) on the sends and poll records."""
        columns = self._columns(runs)
        f, placed = columns.ints("f"), columns.valid("partition") & columns.valid("run_id")
        sends = self._rows(runs, (f == F_SEND) & placed, liveness.SEND_COLUMNS)
        reads = (f == F_POLL) & (columns.ints("type") == TYPE_OK) & columns.valid("item") & placed
        polls = self._rows(runs, reads & columns.valid("offset"), liveness.POLL_COLUMNS)
        return liveness.liveness(sends, polls, windows, heals)

    def divergence(self, runs: list[RunInput], limit: int) -> Answer:
        """Replica pairs holding different records at a position, split by their HWs (LogMatching)."""
        stored = self._replica_columns(runs)
        columns = ["run_id", "kind", "total", *DIVERGENCE_EXAMPLE_COLUMNS]
        if stored is None or stored.num_rows == 0:
            return Answer(pd.DataFrame(columns=columns), no_records())
        rows = candidates.divergent_rows(stored)
        replicas = run_reads.decoded(
            stored.take(["run_id", "node", "node_index", "partition", "offset", "record_id"], rows)
        )
        position = ["run_id", "partition", "offset"]
        at = replicas.rename(columns={"record_id": "identity"})[[*position, "node", "node_index", "identity"]]
        pairs = at.merge(at, on=position, suffixes=("_a", "_b"))
        pairs = pairs[(pairs["node_a"] < pairs["node_b"]) & (pairs["identity_a"] != pairs["identity_b"])]
        if pairs.empty:
            return Answer(pd.DataFrame(columns=columns), no_records())
        marks = high_watermark_rows(runs).astype({"run_id": "Int64", "partition": "Int32"})
        for side in ("a", "b"):
            named = marks.rename(columns={"node_index": f"node_index_{side}", "high_watermark": f"hw_{side}"})
            pairs = pairs.merge(named, on=["run_id", "partition", f"node_index_{side}"], how="left")
        lower = np.minimum(
            pairs["hw_a"].fillna(0).to_numpy(np.int64), pairs["hw_b"].fillna(0).to_numpy(np.int64)
        )
        below = pd.Series(pairs["offset"].to_numpy(np.int64) < lower, index=pairs.index)
        # A position is a replica-divergence when some pair differs there below both HWs, else a
        # divergent-tail; each kind's examples are the pairs that make it one.
        committed = below.groupby([pairs[c] for c in position]).transform("any").astype(bool)
        keep = below | ~committed
        pairs = pairs[keep].assign(kind=np.where(committed[keep], REPLICA_DIVERGENCE, DIVERGENT_TAIL))
        positions = pairs.drop_duplicates([*position, "kind"])
        totals = positions.groupby(["run_id", "kind"]).size().rename("total").reset_index()
        first = (
            pairs.groupby(["run_id", "kind", "partition", "node_a", "node_b"])
            .agg(offset=("offset", "min"), positions=("offset", "size"))
            .reset_index()
        )
        first = first.assign(positions=first["positions"].astype("int64"))
        top = _top(first, ["run_id", "kind"], ["partition", "node_a", "node_b"], limit).drop(
            columns=["total"]
        )
        found = top.merge(totals, on=["run_id", "kind"])[columns]
        return Answer(found, records_of(positions, OFFSET_RECORD_KINDS, "offset"))

    # ---------------------------------------------------------------- example rows

    def fetch_ops(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        """By the rule a file read applies (:func:`checker.example_rules.ops_in`), on the pass in memory.

        The key columns in memory find the rows; only those rows of the other columns are
        read, a row group at a time (``Columns.take``).  Measured at 1 M ops: reading those
        columns whole added 86 MB of memory touched for the first time, this 22 MB (and the
        replica records' 48 MB became 2-12 MB).
        """
        columns = self._columns(runs)
        of_ops = self._rows_of_ops(runs, keys)
        rows = of_ops[example_rules.key_rows(columns.take(example_rules.OP_FILTER_COLUMNS, of_ops), keys)]
        return example_rules.ops_in(columns.take(HISTORY_ROW_COLUMNS, rows), keys)[list(HISTORY_ROW_COLUMNS)]

    def fetch_observations(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        columns = self._columns(runs)
        rows = example_rules.position_rows(columns.select(example_rules.POSITION), keys)
        found = example_rules.at_positions(columns.take(HISTORY_ROW_COLUMNS, rows), keys)
        return example_rules.observations(found[list(HISTORY_ROW_COLUMNS)])

    def fetch_replica_records(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        stored = self._replica_columns(runs)
        if stored is None:
            return pd.DataFrame(columns=list(REPLICA_ROW_COLUMNS))
        rows = example_rules.position_rows(stored.select(example_rules.POSITION), keys)
        return example_rules.at_positions(stored.take(REPLICA_ROW_COLUMNS, rows), keys)[
            list(REPLICA_ROW_COLUMNS)
        ]
