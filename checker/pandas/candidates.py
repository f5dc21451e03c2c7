"""Narrowing a pass's rows to the groups that could hold an anomaly, with numpy.

The pandas engine answers each check with one ``groupby`` over the rows the check reads --
clear, and the oracle the Spark engine is tested against, but pandas' grouping machinery
(factorizing each key column, combining the codes, copying every aggregated column) costs
several times what the answer needs.  Almost every group is healthy, so this module first
computes, for every group, only the few facts that decide whether it *could* be anomalous --
dense integer codes, ``np.bincount`` and ``np.minimum.at`` on the stored columns, no
per-group objects -- and hands the engine the rows of those *candidate* groups.  The
engine's ``groupby`` then runs on those rows alone and decides exactly as it would on all.

The contract that keeps this safe: candidates are a **superset** of the groups a definition
flags.  Each condition below is a definition of :mod:`checker.definitions` with conjuncts
dropped, never added (lost-write without "the drain is complete", for instance), and a
candidate group keeps all of its rows.  Narrowing therefore changes how fast an answer
comes, never what it is.  Where a key column holds nulls, nothing is narrowed.

Example, lost-write: ``send p0 v=7 ok``, ``send p0 v=8 ok``, ``drain p0 [v=8]`` -> the group
(p0, 7) is acked and never drained, so its two send rows are a candidate; (p0, 8) is not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from checker.definitions import (
    ABORTED_READ,
    DUPLICATE,
    G1A,
    LOST_READ,
    LOST_WRITE,
    TYPE_FAIL,
    TYPE_OK,
    UNEXPECTED,
    UNSEEN,
)
from testbed.record.history import F_DRAIN, F_TXN_POLL, F_TXN_SEND, POLL_CODES, SEND_CODES

Ints = np.ndarray[Any, np.dtype[np.int64]]
Mask = np.ndarray[Any, np.dtype[np.bool_]]


class Columns:
    """A pass's columns, read when first asked for and converted to numpy once.

    The questions of one pass read the same few columns again and again, and never most of
    the others.  Reading only those and converting each once keeps the memory touched small:
    on this project's VMs, memory touched for the first time cost up to 2.5 ms per MB, more
    than the checks themselves at 1 M ops.
    """

    def __init__(
        self,
        source: pa.Table | Callable[[list[str]], pa.Table],
        rows: Callable[[list[str], Ints], pa.Table] | None = None,
    ) -> None:
        """``source``: a table, or a reader of the named columns (the same rows in every call);
        ``rows``: a reader of the named columns at ascending positions (see :meth:`take`)."""
        self._read = source if callable(source) else source.select
        self._read_rows = rows
        self._columns: dict[str, pa.ChunkedArray] = {}
        self._arrays: dict[tuple[str, int], np.ndarray[Any, Any]] = {}
        self._valid: dict[str, Mask] = {}
        self._flags: dict[str, Mask] = {}
        # Two questions may be asked at once (``Engine.concurrent``): one reads a column while
        # the other waits for it, instead of both reading it.
        self._reading = threading.Lock()

    def select(self, names: Sequence[str]) -> pa.Table:
        """The named columns as a table (those not read yet are read together)."""
        if any(name not in self._columns for name in names):
            with self._reading:
                missing = [name for name in names if name not in self._columns]
                if missing:
                    # One chunk per column (a file reads as one per row group): numpy then views
                    # it instead of concatenating a copy per conversion (-45 MB at 1 M ops).
                    table = self._read(missing).combine_chunks()
                    self._columns.update((name, table[name]) for name in missing)
        return pa.table({name: self._columns[name] for name in names})

    def take(self, names: Sequence[str], positions: Ints) -> pa.Table:
        """The named columns at ascending ``positions``: those in memory taken from there, the others
        read for those rows alone when a row reader was given (the few rows examples show need
        every column, and reading whole columns for them touched more memory than the checks)."""
        indices = pa.array(positions, pa.int64())
        reader = self._read_rows
        missing = [name for name in names if name not in self._columns] if reader else []
        taken = {name: self._column(name).take(indices) for name in names if name not in missing}
        if reader is not None and missing:
            read = reader(missing, positions)
            taken.update((name, read[name]) for name in missing)
        return pa.table({name: taken[name] for name in names})

    @property
    def num_rows(self) -> int:
        name = next(iter(self._columns), None)
        return int(self.select([name or "run_id"]).num_rows)

    def _column(self, name: str) -> pa.ChunkedArray:
        return self.select([name])[name]

    def ints(self, name: str, fill: int = -1) -> np.ndarray[Any, Any]:
        """Column ``name`` with nulls replaced by ``fill``."""
        values = self._column(name)
        key = (name, fill if values.null_count else 0)
        if key not in self._arrays:
            self._arrays[key] = (values.fill_null(fill) if values.null_count else values).to_numpy()
        return self._arrays[key]

    def valid(self, name: str) -> Mask:
        if name not in self._valid:
            values = self._column(name)
            self._valid[name] = (
                np.ones(len(values), dtype=bool)
                if not values.null_count
                else np.asarray(values.is_valid().to_numpy(), dtype=bool)
            )
        return self._valid[name]

    def flags(self, name: str) -> Mask:
        """A boolean column: true where the value is present and true."""
        if name not in self._flags:
            values = self._column(name)
            self._flags[name] = np.asarray(
                (values.fill_null(False) if values.null_count else values).to_numpy(zero_copy_only=False),
                dtype=bool,
            )
        return self._flags[name]

    def has_nulls(self, *names: str) -> bool:
        return any(self._column(name).null_count for name in names)


def group_codes(keys: Sequence[np.ndarray[Any, Any]]) -> tuple[Ints, int]:
    """A code in ``range(span)`` per row, equal exactly when every key is equal (keys without nulls).

    Codes are dense enough for ``np.bincount``: a key whose values span a narrow range is
    used as an offset (partitions, per-partition offsets), a wide one is factorized, and the
    combination is factorized again whenever its span would outgrow the row count.
    """
    rows = len(keys[0]) if keys else 0
    combined: Ints = np.zeros(rows, dtype=np.int64)
    if rows == 0:
        return combined, 0
    bound = max(1 << 16, 4 * rows)
    span = 1
    # In place where possible: at 1 M rows every temporary is 8 MB of memory touched afresh.
    for key in keys:
        low, high = int(key.min()), int(key.max())
        if low == high:
            continue  # one value (a pass of one run): it tells no rows apart
        if high - low < bound:
            part, width = key.astype(np.int64), high - low + 1
            part -= low
        else:
            codes, uniques = pd.factorize(key)
            part, width = codes.astype(np.int64, copy=False), len(uniques)
        if span * width >= bound and span > 1:
            codes, uniques = pd.factorize(combined)
            combined, span = codes.astype(np.int64, copy=False), len(uniques)
        if span == 1:
            combined = part
        else:
            combined *= width
            combined += part
        span *= width
    if span >= bound:
        codes, uniques = pd.factorize(combined)
        combined, span = codes.astype(np.int64, copy=False), len(uniques)
    return combined, span


def first_rows(codes: Ints, span: int) -> Ints:
    """For each code, the first row holding it (``len(codes)`` where none does)."""
    first = np.full(span, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    return first


def _spread(codes: Ints, span: int, values: Ints) -> Mask:
    """Per code: do ``values`` hold two different numbers?

    One value per code is kept (whichever row wrote last), and a code differs exactly when
    some row's value is not that one: a scatter and a gather, where a running minimum and
    maximum needed two filled span-long arrays -- on this project's VMs the memory, touched
    for the first time, cost more than the comparisons (56 ms of 66 at 1 M ops).
    """
    kept = np.empty(span, dtype=values.dtype)
    kept[codes] = values
    differs = np.zeros(span, dtype=bool)
    differs[codes[values != kept[codes]]] = True
    return differs


def value_group_codes(
    run_id: np.ndarray[Any, Any], partition: np.ndarray[Any, Any], value: np.ndarray[Any, Any]
) -> tuple[Ints, int]:
    """:func:`group_codes` of (run, partition, value), from (run, value) alone when that decides the partition.

    The workload sends every value to one partition, so the partition rarely tells groups
    apart -- but as a key it multiplies the span by the number of partitions, and every
    per-group array with it (8 partitions: 2.3 M codes for 286 K values at 1 M ops).  The
    shortcut is taken only after checking that no (run, value) occurs in two partitions.
    """
    codes, span = group_codes([run_id, value])
    if not _spread(codes, span, partition).any():
        return codes, span
    return group_codes([run_id, partition, value])


def value_candidate_rows(columns: Columns, checks: frozenset[str]) -> Ints:
    """Rows (positions) of the (run, partition, value) groups that a value check could flag.

    ``columns`` hold at least ``run_id, f, type, partition, offset, value``.
    """
    every_f = columns.ints("f", F_DRAIN + 1)
    selected = np.flatnonzero(
        columns.valid("value") & ((every_f <= F_DRAIN) | np.isin(every_f, (F_TXN_SEND, F_TXN_POLL)))
    )
    if not all(columns.valid(name)[selected].all() for name in ("run_id", "type", "partition")):
        return selected  # a null key: nothing is narrowed (the groupby decides on every row)
    every = len(selected) == columns.num_rows  # then no column is copied into the selection

    def pick(name: str) -> np.ndarray[Any, Any]:
        return columns.ints(name) if every else columns.ints(name)[selected]

    codes, span = value_group_codes(pick("run_id"), pick("partition"), pick("value"))
    f, kind = pick("f"), pick("type")
    send, poll, drain = np.isin(f, SEND_CODES), np.isin(f, POLL_CODES), f == F_DRAIN
    # The yes/no facts of each group as bits of one byte: one pass and one small array
    # (a bincount per fact allocated a span-long int64 array each).
    facts = np.zeros(span, dtype=np.uint8)
    bits = send.astype(np.uint8)
    bits |= (send & (kind == TYPE_OK)).astype(np.uint8) << 1
    bits |= (send & (kind == TYPE_FAIL)).astype(np.uint8) << 2  # aborted-read and G1a alike
    bits |= poll.astype(np.uint8) << 3
    bits |= drain.astype(np.uint8) << 4
    np.bitwise_or.at(facts, codes, bits)

    def present(bit: int) -> Mask:
        return np.asarray(facts & (1 << bit) != 0, dtype=bool)

    read, undrained = present(3) | present(4), ~present(4)
    candidate = np.zeros(span, dtype=bool)
    if checks & {LOST_WRITE, UNSEEN}:
        candidate |= present(1) & undrained
    if LOST_READ in checks:
        candidate |= present(0) & present(3) & undrained
    if checks & {ABORTED_READ, G1A}:
        candidate |= present(2) & read
    if UNEXPECTED in checks:
        candidate |= ~present(0) & read
    if DUPLICATE in checks:
        offset_read = (poll | drain) & (
            columns.valid("offset") if every else columns.valid("offset")[selected]
        )
        offsets = pick("offset")[offset_read]
        candidate |= _spread(codes[offset_read], span, offsets)
    return selected[candidate[codes]]


def divergent_rows(replicas: Columns) -> Ints:
    """Rows of the (run, partition, offset) positions where replicas hold different ``record_id``s."""
    if replicas.has_nulls("run_id", "partition", "offset", "record_id"):
        return np.arange(replicas.num_rows)
    keys = [replicas.ints(name) for name in ("run_id", "partition", "offset")]
    identity = replicas.ints("record_id")
    in_order = _rows_of_sorted_groups(keys, identity)
    if in_order is not None:
        return in_order
    codes, span = group_codes(keys)
    divergent = _spread(codes, span, identity)
    return np.flatnonzero(divergent[codes])


def _rows_of_sorted_groups(keys: Sequence[np.ndarray[Any, Any]], values: np.ndarray[Any, Any]) -> Ints | None:
    """Rows of the groups whose ``values`` differ, when the rows are sorted by ``keys`` (else ``None``).

    Replica dumps are stored in log order (``testbed.record.replicas``), so the replicas of one
    position are neighbours: comparing each row with the one before needs a few byte-wide
    masks instead of 64-bit group codes and per-group arrays (measured on 857 K replica
    rows: 3 ms against 6-10 ms, and ~15 MB fewer temporaries -- memory that, touched for
    the first time, costs more than the comparisons on this project's VMs).
    """
    rows = len(values)
    if rows < 2:
        return None
    same_group = np.ones(rows - 1, dtype=bool)  # row i + 1 has row i's keys so far
    for key in keys:
        before, after = key[:-1], key[1:]
        if np.any(same_group & (after < before)):
            return None  # not sorted: the caller groups by codes
        same_group &= after == before
    differs = np.flatnonzero(same_group & (values[1:] != values[:-1]))
    bounds = np.concatenate([[0], np.flatnonzero(~same_group) + 1, [rows]])
    flagged = np.zeros(len(bounds) - 1, dtype=bool)
    flagged[np.searchsorted(bounds, differs, side="right") - 1] = True  # the group of each differing pair
    return np.flatnonzero(np.repeat(flagged, np.diff(bounds))).astype(np.int64)
