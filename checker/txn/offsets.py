"""Exactly-once processing: consume-transform-produce transactions and their groups' offsets.

A transaction that sent a consumer group's offsets (a ``send-offsets`` micro-op, rows
:data:`~testbed.record.txn_rows.F_TXN_OFFSETS`) *processed* the records its polls read on the
partitions it sent offsets for: Kafka commits those offsets with the transaction's writes, so a
committed transaction's input is consumed and an aborted one's is not -- the group must read it
again.  Two checks follow, per group and partition:

* **consumed-twice** -- a record read by two transactions of the group that both committed
  (``must_commit``: ``ok``, or ``info`` with a send someone read).  The second read it although the
  first's commit moved the group's offset past it: the offsets were not committed atomically with
  the transaction (applied late, lost, read back stale) or a fenced instance still committed.
* **consumed-skipped** -- a committed record (its writer committed; read by anyone, the final drain
  included) below the group's committed offset -- the highest offset a committed transaction of
  the group sent -- that no transaction of the group which may have committed (``ok`` or ``info``)
  read.  An aborted transaction's offsets became visible, or a group's offset moved past records
  nobody processed.

Why these two and not a comparison with the log's end: the group's position at the end of a run
is wherever the last committed transaction left it, so only what lies *below* it is promised.
Records of aborted transactions are skipped by design (``read_committed``) and are never counted:
only records whose writer committed are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from checker.definitions import CONSUMED_SKIPPED, CONSUMED_TWICE
from checker.txn.checks import Finding, writer_frame
from checker.txn.examples import Views
from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL
from testbed.record.ops import OP_TYPES

_OK, _INFO = OP_TYPES.index("ok"), OP_TYPES.index("info")


def offset_findings(tables: RunTables, views: Views, checks: frozenset[str]) -> list[Finding]:
    """The findings of both checks that ``checks`` asks for (none in a run without send-offsets)."""
    if tables.offsets.empty or not checks & {CONSUMED_TWICE, CONSUMED_SKIPPED}:
        return []
    txns = tables.txns[["txn", "type", "must_commit"]]
    sent = tables.offsets.merge(txns, on="txn")
    reads = tables.reads[(tables.reads["f"] == F_TXN_POLL) & (tables.reads["offset"] != MISSING)]
    processed = reads.rename(columns={"index": "txn"})[["txn", "partition", "offset", "value"]].merge(
        sent[["txn", "partition", "group", "type", "must_commit"]], on=["txn", "partition"]
    )
    processed = processed.drop_duplicates(["txn", "partition", "offset"])
    findings: list[Finding] = []
    if CONSUMED_TWICE in checks:
        findings += _twice(processed[processed["must_commit"]], views)
    if CONSUMED_SKIPPED in checks:
        findings += _skipped(tables, processed, sent, views)
    return findings


def _record(group: int, position: tuple[int, int, int]) -> dict[str, int]:
    """The record an example is about: its group's code, partition, offset and value."""
    partition, offset, value = position
    return {"group_code": group, "partition": partition, "offset": offset, "value": value}


def _twice(committed: pd.DataFrame, views: Views) -> list[Finding]:
    """A finding per (group, partition, offset) that two committed transactions read; its index
    the second's (the example shows the first two).  ``committed`` holds one row per (txn,
    partition, offset): the keys read more than once are picked in one pass, and only they are
    visited."""
    keys = ["group", "partition", "offset"]
    twice = committed[committed.groupby(keys)["txn"].transform("size").to_numpy() >= 2]
    findings = []
    for (group, partition, offset), readers in twice.groupby(keys, sort=True):
        txn_ids = sorted(int(t) for t in readers["txn"])
        position = (int(partition), int(offset), int(readers["value"].iloc[0]))

        def example(
            txn_ids: list[int] = txn_ids, position: tuple[int, int, int] = position, group: int = int(group)
        ) -> dict[str, Any]:
            return {
                **_record(group, position),
                "committed_readers": len(txn_ids),
                "first": views.txn(txn_ids[0], [position]),
                "second": views.txn(txn_ids[1], [position]),
            }

        findings.append(Finding(CONSUMED_TWICE, txn_ids[1], int(partition), example))
    return findings


def _first_past(committed_sent: pd.DataFrame, missed: pd.DataFrame) -> np.ndarray[Any, Any]:
    """For each row of ``missed`` (in its order), the first committed transaction of its group
    that sent an offset past it on its partition: per (group, partition), the running highest
    offset in transaction order first exceeds the record's offset there."""
    first = np.empty(len(missed), dtype=np.int64)
    by_key = {key: rows for key, rows in committed_sent.sort_values("txn").groupby(["group", "partition"])}
    for key, rows in missed.groupby(["group", "partition"]):
        sent = by_key[key]
        reached = np.maximum.accumulate(sent["offset"].to_numpy())
        at = np.searchsorted(reached, rows["offset"].to_numpy(), side="right")
        first[missed.index.get_indexer(rows.index)] = sent["txn"].to_numpy()[at]
    return first


def _skipped(tables: RunTables, processed: pd.DataFrame, sent: pd.DataFrame, views: Views) -> list[Finding]:
    """A finding per committed record below a group's frontier that no maybe-committed
    transaction of the group read; its index the first committed transaction that passed it."""
    committed_sent = sent[sent["must_commit"]]
    if committed_sent.empty:
        return []
    frontier = committed_sent.groupby(["group", "partition"], as_index=False)["offset"].max()
    frontier = frontier.rename(columns={"offset": "frontier"})
    records = tables.reads[tables.reads["offset"] != MISSING][["partition", "offset", "value"]]
    records = records.drop_duplicates(["partition", "offset", "value"])
    writers = writer_frame(tables).merge(tables.txns[["txn", "must_commit"]], on="txn")
    records = records.merge(writers, on=["partition", "value"], how="left")
    records = records[records["txn"].isna() | records["must_commit"].fillna(False).astype(bool)]
    candidates = records[["partition", "offset", "value"]].merge(frontier, on="partition")
    candidates = candidates[candidates["offset"] < candidates["frontier"]]
    maybe = processed[processed["type"].isin([_OK, _INFO])][
        ["group", "partition", "offset"]
    ].drop_duplicates()
    missed = candidates.merge(maybe, on=["group", "partition", "offset"], how="left", indicator=True)
    missed = missed[missed["_merge"] == "left_only"].sort_values(["group", "partition", "offset"])
    missed = missed.reset_index(drop=True)
    jumpers = _first_past(committed_sent, missed)
    readers = tables.reads[tables.reads["f"] == F_TXN_POLL]
    findings = []
    for row, jumper in zip(missed.itertuples(index=False), jumpers.tolist(), strict=True):
        group, partition, offset, value = int(row.group), int(row.partition), int(row.offset), int(row.value)

        def example(
            jumper: int = jumper,
            position: tuple[int, int, int] = (partition, offset, value),
            group: int = group,
        ) -> dict[str, Any]:
            partition, offset, _ = position
            read_by = sorted(
                int(t)
                for t in readers[(readers["partition"] == partition) & (readers["offset"] == offset)][
                    "index"
                ].unique()
            )
            return {
                **_record(group, position),
                "committed_past": views.txn(jumper),
                "readers": len(read_by),
                **({"reader": views.txn(read_by[0], [position])} if read_by else {}),
            }

        findings.append(Finding(CONSUMED_SKIPPED, jumper, partition, example))
    return findings
