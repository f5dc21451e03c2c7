"""The transactional checks that read one transaction (and its writer): precommitted-read, the
``int-`` send checks and torn-transaction (definitions: :mod:`checker.definitions`).

Each returns :class:`Finding` s: the anomaly, the sort key of its example (``index``, then
``partition``) and the example itself (:mod:`checker.txn.examples`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from checker.definitions import INT_NONMONOTONIC_SEND, INT_SEND_SKIP, PRECOMMITTED_READ, TORN_TRANSACTION
from checker.txn.examples import Views, known
from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One counted anomaly: ``kind``, its example's sort key (``index``, ``partition``: ascending,
    :data:`MISSING` first) and the example."""

    kind: str
    index: int
    partition: int
    example: dict[str, Any]


def writers(tables: RunTables) -> dict[tuple[int, int], int]:
    """(partition, value) -> the transaction that sent it (the first, should two have)."""
    found: dict[tuple[int, int], int] = {}
    sends = tables.sends
    for txn, p, v in zip(
        sends["txn"].tolist(), sends["partition"].tolist(), sends["value"].tolist(), strict=True
    ):
        found.setdefault((p, v), txn)
    return found


def precommitted_reads(tables: RunTables, views: Views) -> list[Finding]:
    """Reads (txn polls) that completed before their writer's commit began, or of the reader's own write.

    Only writers whose end micro-op is a commit, or who have none (then their invoke time is the
    bound): a read of an aborted transaction's value is G1a, the value family's.
    """
    txns = tables.txns.set_index("txn")
    end_time, committed = txns["end_time"].to_dict(), txns["committed_end"].to_dict()
    invoked, kind = txns["invoke_time"].to_dict(), txns["type"].to_dict()
    writer_of = writers(tables)
    reads = tables.reads[tables.reads["f"] == F_TXN_POLL]
    found: dict[tuple[int, int, int], Finding] = {}
    columns = [reads[c].tolist() for c in ("index", "time", "partition", "offset", "value")]
    for reader, time, p, offset, v in zip(*columns, strict=True):
        writer = writer_of.get((p, v))
        if writer is None or writer not in kind or (reader, p, v) in found:
            continue
        own = writer == reader
        ended = end_time[writer] != MISSING
        if ended and not committed[writer]:
            continue  # aborted: G1a
        bound = end_time[writer] if ended else invoked[writer]
        if not (own or time < bound):
            continue
        example = {
            "partition": p,
            "offset": known(offset),
            "value": v,
            "own_write": own,
            "read_completed": time,
            "commit_began": end_time[writer] if ended else None,
            "writer_invoked": invoked[writer],
            "reader": views.txn(reader, [(p, offset, v)]),
            "writer": views.txn(writer),
        }
        found[(reader, p, v)] = Finding(PRECOMMITTED_READ, reader, p, example)
    return list(found.values())


def int_sends(tables: RunTables, views: Views) -> list[Finding]:
    """Consecutive sends of one committed transaction to one partition, both offsets known, that
    are not one apart: more is an int-send-skip, less an int-nonmonotonic-send."""
    committed = set(tables.txns.loc[tables.txns["must_commit"], "txn"].tolist())
    findings = []
    sends = tables.sends[tables.sends["txn"].isin(committed)]
    for (txn, p), rows in sends.groupby(["txn", "partition"], sort=True):
        offsets, values = rows["offset"].tolist(), rows["value"].tolist()
        for number in range(1, len(offsets)):
            before, after = offsets[number - 1], offsets[number]
            if before < 0 or after < 0 or after - before == 1:
                continue
            kind = INT_SEND_SKIP if after - before > 1 else INT_NONMONOTONIC_SEND
            example = {
                "partition": int(p),
                "prev_offset": int(before),
                "offset": int(after),
                "prev_value": int(values[number - 1]),
                "value": int(values[number]),
                "txn": views.txn(int(txn)),
            }
            findings.append(Finding(kind, int(txn), int(p), example))
    return findings


def torn_transactions(tables: RunTables, views: Views, complete: Collection[int]) -> list[Finding]:
    """Committed transactions some of whose sends (to partitions with a complete final drain) the
    drain returned and some not."""
    committed = set(tables.txns.loc[tables.txns["must_commit"], "txn"].tolist())
    sends = tables.sends[tables.sends["txn"].isin(committed) & tables.sends["partition"].isin(list(complete))]
    findings = []
    for txn, rows in sends.groupby("txn", sort=True):
        pairs = list(zip(rows["partition"].tolist(), rows["value"].tolist(), strict=True))
        kept = [pair for pair in pairs if pair in tables.drained]
        lost = [pair for pair in pairs if pair not in tables.drained]
        if kept and lost:
            example = {
                "drained": [{"partition": p, "value": v} for p, v in kept],
                "missing": [{"partition": p, "value": v} for p, v in lost],
                "txn": views.txn(int(txn)),
            }
            findings.append(Finding(TORN_TRANSACTION, int(txn), lost[0][0], example))
    return findings
