"""The order checks of :mod:`checker.definitions` on pandas frames: polls, reads and sends in time.

Each function takes the history rows one family of checks reads and returns every anomaly
found, one row per anomaly with ``kind`` and :data:`checker.definitions.ORDER_EXAMPLE_COLUMNS`;
:class:`checker.pandas.engine.PandasEngine` keeps the first examples of each.  The Spark
engine (:mod:`checker.spark.order`) computes the same rows with windows:

* poll-skip, nonmonotonic-poll and their ``int-`` variants compare each record with the one
  before it in (consumer, partition), ordered by (op index, item): in the same op -> ``int-``;
  a consumer is a process, or a group's takeover chain (:mod:`checker.pandas.groups`);
* stale-read compares each read record with the highest offset that the consumer's earlier
  ops returned in that partition (a running maximum over ops);
* nonmonotonic-send compares each acknowledgement with the process's previous one in the
  partition; realtime-order with the highest offset acknowledged in the partition before the
  send's invoke (an as-of join on op index, which orders ops in real time).

Where the highest offset was reached by several ops, the example names the first of them --
the op whose offset made the running maximum, as Spark's ``max(struct(offset, -index))``.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pandas as pd

from checker.definitions import (
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    ORDER_EXAMPLE_COLUMNS,
    POLL_SKIP,
    REALTIME_ORDER,
    STALE_READ,
    TYPE_INVOKE,
    TYPE_OK,
)
from testbed.record.history import F_POLL

READ_COLUMNS = ["run_id", "process", "partition", "index", "item", "offset", "f"]
"""The columns of the read rows the poll checks take (``ok`` polls and drains carrying a record)."""
SEND_COLUMNS = ["run_id", "process", "index", "type", "partition", "offset"]
"""The columns of the send rows the send checks take (every send row: invokes pair completions)."""
OUTPUT = ["run_id", "kind", *ORDER_EXAMPLE_COLUMNS]

IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {
        POLL_SKIP,
        NONMONOTONIC_POLL,
        INT_POLL_SKIP,
        INT_NONMONOTONIC_POLL,
        STALE_READ,
        NONMONOTONIC_SEND,
        REALTIME_ORDER,
    }
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""


def _found(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Anomaly rows of ``kind`` with every output column (missing ones null)."""
    rows = rows.assign(kind=kind)
    for name in ORDER_EXAMPLE_COLUMNS:
        if name not in rows:
            rows[name] = pd.array([pd.NA] * len(rows), dtype="Int64")
    return rows[OUTPUT]


def _stack(parts: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [part for part in parts if not part.empty]
    if not parts:
        return pd.DataFrame({name: pd.Series(dtype="Int64") for name in OUTPUT}).astype({"kind": object})
    return pd.concat(parts, ignore_index=True)


def _running_max(frame: pd.DataFrame, group: list[str], value: str) -> tuple[pd.Series, pd.Series]:
    """Per ``group`` (rows in order): the running maximum of ``value`` and the ``index`` of the
    first row that reached it."""
    running = frame.groupby(group, sort=False)[value].cummax()
    first_of_group = ~frame.duplicated(group)
    raised = first_of_group | (running != running.groupby([frame[c] for c in group], sort=False).shift(1))
    reached = frame["index"].where(raised.astype(bool)).groupby([frame[c] for c in group], sort=False).ffill()
    return running, reached


def poll_order(reads: pd.DataFrame, checks: frozenset[str]) -> pd.DataFrame:
    """poll-skip, nonmonotonic-poll, int-poll-skip, int-nonmonotonic-poll and stale-read.

    A consumer is a ``chain`` when ``reads`` has that column (a group's takeover chain:
    :func:`checker.pandas.groups.with_chain`), else a process; each example names the process
    of its own (later) read."""
    if "chain" not in reads:
        reads = reads.assign(chain=reads["process"])
    keys = ["run_id", "chain", "partition"]
    reads = reads.sort_values([*keys, "index", "item"], kind="stable", ignore_index=True)
    parts = []
    polls = reads[(reads["f"] == F_POLL).to_numpy()]
    previous = polls.groupby(keys, sort=False)[["index", "offset"]].shift(1)
    pairs = polls.assign(prev_index=previous["index"], prev_offset=previous["offset"])
    pairs = pairs[pairs["prev_offset"].notna()]
    delta = (pairs["offset"] - pairs["prev_offset"]).astype("int64")
    inside = (pairs["prev_index"] == pairs["index"]).astype(bool)
    for kind, flag in (
        (POLL_SKIP, (delta > 1) & ~inside),
        (NONMONOTONIC_POLL, (delta < 1) & ~inside),
        (INT_POLL_SKIP, (delta > 1) & inside),
        (INT_NONMONOTONIC_POLL, (delta < 1) & inside),
    ):
        if kind in checks:
            parts.append(_found(pairs[flag.to_numpy()], kind))
    if STALE_READ in checks:
        parts.append(_stale_reads(reads))
    return _stack(parts)


def _stale_reads(reads: pd.DataFrame) -> pd.DataFrame:
    """Reads at or below the highest offset the same consumer's earlier ops returned in the partition."""
    keys = ["run_id", "chain", "partition"]
    ops = reads.groupby([*keys, "index"], sort=True)["offset"].max().reset_index()
    running, reached = _running_max(ops, keys, "offset")
    groups = [ops[c] for c in keys]
    ops = ops.assign(
        prev_offset=running.groupby(groups, sort=False).shift(1),
        prev_index=reached.groupby(groups, sort=False).shift(1),
    )[[*keys, "index", "prev_offset", "prev_index"]]
    rows = reads.merge(ops[ops["prev_offset"].notna()], on=[*keys, "index"])
    stale = rows[(rows["offset"] <= rows["prev_offset"]).astype(bool)]
    first = stale.sort_values([*keys, "index", "item"], kind="stable").drop_duplicates([*keys, "index"])
    return _found(first, STALE_READ)


def send_order(sends: pd.DataFrame, checks: frozenset[str]) -> pd.DataFrame:
    """nonmonotonic-send and realtime-order."""
    sends = sends.sort_values(["run_id", "process", "index"], kind="stable", ignore_index=True)
    before = sends.groupby(["run_id", "process"], sort=False)[["index", "type"]].shift(1)
    invoked = (before["type"] == TYPE_INVOKE).fillna(False).astype(bool)
    sends = sends.assign(invoke_index=before["index"].where(invoked))
    acks = sends[
        ((sends["type"] == TYPE_OK) & (sends["offset"] >= 0) & sends["partition"].notna()).fillna(False)
    ]
    parts = []
    if NONMONOTONIC_SEND in checks:
        ordered = acks.sort_values(["run_id", "process", "partition", "index"], kind="stable")
        previous = ordered.groupby(["run_id", "process", "partition"], sort=False)[["index", "offset"]].shift(
            1
        )
        pairs = ordered.assign(prev_index=previous["index"], prev_offset=previous["offset"])
        late = pairs[(pairs["offset"] <= pairs["prev_offset"]).fillna(False).astype(bool)]
        parts.append(_found(late.drop(columns=["invoke_index"]), NONMONOTONIC_SEND))
    if REALTIME_ORDER in checks:
        parts.append(_realtime(acks))
    return _stack(parts)


def _realtime(acks: pd.DataFrame) -> pd.DataFrame:
    """Sends at or below the highest offset acknowledged in their partition before their invoke."""
    keys = ["run_id", "partition"]
    done = acks.sort_values([*keys, "index"], kind="stable", ignore_index=True)
    running, reached = _running_max(done, keys, "offset")
    done = pd.DataFrame(
        {
            "run_id": done["run_id"].astype("int64"),
            "partition": done["partition"].astype("int64"),
            "at": done["index"].astype("int64"),
            "prev_offset": running.astype("Int64"),
            "prev_index": reached.astype("Int64"),
        }
    ).sort_values("at", kind="stable")
    invoked = acks[acks["invoke_index"].notna()]
    late = pd.DataFrame(
        {
            "run_id": invoked["run_id"].astype("int64"),
            "partition": invoked["partition"].astype("int64"),
            "at": invoked["invoke_index"].astype("int64"),
            "row": np.arange(len(invoked)),
        }
    ).sort_values("at", kind="stable")
    if late.empty or done.empty:
        return _stack([])
    matched = pd.merge_asof(late, done, on="at", by=keys, allow_exact_matches=False, direction="backward")
    matched = matched.sort_values("row")
    rows = invoked.reset_index(drop=True).assign(
        prev_offset=matched["prev_offset"].to_numpy(), prev_index=matched["prev_index"].to_numpy()
    )
    rows = rows.astype({"prev_offset": "Int64", "prev_index": "Int64"})
    return _found(rows[(rows["offset"] <= rows["prev_offset"]).fillna(False).astype(bool)], REALTIME_ORDER)
