"""The transactional checks that read one transaction (and its writer): precommitted-read, the
``int-`` send checks and torn-transaction (definitions: :mod:`checker.definitions`).

Each returns :class:`Finding` s: the anomaly, the sort key of its example (``index``, then
``partition``) and how to build the example (:mod:`checker.txn.examples`) -- built only for the
findings shown: a run may hold thousands of int-send-skips, and each example reads its
transactions' rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import pandas as pd

from checker.definitions import INT_NONMONOTONIC_SEND, INT_SEND_SKIP, PRECOMMITTED_READ, TORN_TRANSACTION
from checker.txn.examples import Views, known
from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One counted anomaly: ``kind``, its example's sort key (``index``, ``partition``: ascending,
    :data:`MISSING` first) and the function that builds its example."""

    kind: str
    index: int
    partition: int
    example: Callable[[], dict[str, Any]]


def writer_frame(tables: RunTables) -> pd.DataFrame:
    """``partition, value, txn``: who sent each value (the first transaction, should two have)."""
    return tables.sends[["partition", "value", "txn"]].drop_duplicates(["partition", "value"])


def precommitted_reads(tables: RunTables, views: Views) -> list[Finding]:
    """Reads (txn polls) that completed before their writer's commit began, or of the reader's own write.

    Only writers whose end micro-op is a commit, or who have none (then their invoke time is the
    bound): a read of an aborted transaction's value is G1a, the value family's.
    """
    txns = tables.txns[["txn", "end_time", "committed_end", "invoke_time"]]
    reads = tables.reads[tables.reads["f"] == F_TXN_POLL].drop_duplicates(["index", "partition", "value"])
    read = reads.merge(writer_frame(tables), on=["partition", "value"]).merge(txns, on="txn")
    ended = read["end_time"].to_numpy() != MISSING
    bound = np.where(ended, read["end_time"].to_numpy(), read["invoke_time"].to_numpy())
    own = read["txn"].to_numpy() == read["index"].to_numpy()
    flagged = (own | (read["time"].to_numpy() < bound)) & ~(ended & ~read["committed_end"].to_numpy(bool))
    findings = []
    for row in read[flagged].to_dict("records"):
        facts = {
            "partition": row["partition"],
            "offset": known(row["offset"]),
            "value": row["value"],
            "own_write": row["txn"] == row["index"],
            "read_completed": row["time"],
            "commit_began": known(row["end_time"]),
            "writer_invoked": row["invoke_time"],
        }

        def example(
            facts: dict[str, Any] = facts, reader: int = row["index"], writer: int = row["txn"]
        ) -> dict[str, Any]:
            position = (
                facts["partition"],
                MISSING if facts["offset"] is None else facts["offset"],
                facts["value"],
            )
            return {**facts, "reader": views.txn(reader, [position]), "writer": views.txn(writer)}

        findings.append(Finding(PRECOMMITTED_READ, int(row["index"]), int(row["partition"]), example))
    return findings


def int_sends(tables: RunTables, views: Views) -> list[Finding]:
    """Consecutive sends of one committed transaction to one partition, both offsets known, that
    are not one apart: more is an int-send-skip, less an int-nonmonotonic-send."""
    committed = tables.txns.loc[tables.txns["must_commit"], "txn"].to_numpy()
    sends = tables.sends[np.isin(tables.sends["txn"].to_numpy(), committed)]
    sends = sends.sort_values(["txn", "partition", "item"], kind="stable")
    txn, p, o, v = (sends[c].to_numpy() for c in ("txn", "partition", "offset", "value"))
    pair = (txn[1:] == txn[:-1]) & (p[1:] == p[:-1]) & (o[1:] >= 0) & (o[:-1] >= 0) & (o[1:] - o[:-1] != 1)
    findings = []
    for at in np.flatnonzero(pair).tolist():
        kind = INT_SEND_SKIP if o[at + 1] - o[at] > 1 else INT_NONMONOTONIC_SEND
        facts = {
            "partition": int(p[at]),
            "prev_offset": int(o[at]),
            "offset": int(o[at + 1]),
            "prev_value": int(v[at]),
            "value": int(v[at + 1]),
        }

        def example(facts: dict[str, Any] = facts, txn: int = int(txn[at])) -> dict[str, Any]:
            return {**facts, "txn": views.txn(txn)}

        findings.append(Finding(kind, int(txn[at]), int(p[at]), example))
    return findings


def torn_transactions(tables: RunTables, views: Views, complete: Collection[int]) -> list[Finding]:
    """Committed transactions some of whose sends (to partitions with a complete final drain) the
    drain returned and some not."""
    committed = tables.txns.loc[tables.txns["must_commit"], "txn"].to_numpy()
    sends = tables.sends[
        np.isin(tables.sends["txn"].to_numpy(), committed) & tables.sends["partition"].isin(list(complete))
    ]
    drained = [pair in tables.drained for pair in zip(sends["partition"], sends["value"], strict=True)]
    sends = sends.assign(drained=drained)
    split = sends.groupby("txn", sort=True)["drained"].agg(["any", "all"])
    torn = sends[sends["txn"].isin(split.index[split["any"] & ~split["all"]])]
    findings = []
    for txn, rows in torn.groupby("txn", sort=True):
        pairs = [
            {"partition": int(p), "value": int(v)}
            for p, v in zip(rows["partition"], rows["value"], strict=True)
        ]
        kept = [pair for pair, here in zip(pairs, rows["drained"], strict=True) if here]
        lost = [pair for pair, here in zip(pairs, rows["drained"], strict=True) if not here]

        def example(txn: int = int(txn), kept: list[Any] = kept, lost: list[Any] = lost) -> dict[str, Any]:
            return {"drained": kept, "missing": lost, "txn": views.txn(txn)}

        findings.append(Finding(TORN_TRANSACTION, int(txn), lost[0]["partition"], example))
    return findings
