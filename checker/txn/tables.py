"""One run's transactions, sends, reads and known log positions, from its history rows.

The input is the rows of one run that the transactional checks read (:data:`INPUT_FS`,
columns :data:`INPUT_COLUMNS`; ``docs/history.md``, the ``txn`` op): each ``txn`` op's head rows
(invoke and completion: who, when, outcome), its completion's micro-op rows (``F_TXN_SEND``,
``F_TXN_POLL``, ``F_TXN_OFFSETS``, ``F_TXN_END``) and the records of plain polls and drains.  Both engines hand the
same rows with the same null fills (:func:`normalized`), so what is built here is the same too.

A transaction is named by its completion's op ``index`` (its micro-op rows carry it); an
invoke without a completion is no transaction here (nothing of it is known but its plan).
"""

from __future__ import annotations

import dataclasses
from typing import Final

import numpy as np
import pandas as pd

from checker.definitions import TYPE_INFO, TYPE_INVOKE, TYPE_OK
from testbed.record.history import F_DRAIN, F_POLL, F_TXN, F_TXN_END, F_TXN_OFFSETS, F_TXN_POLL, F_TXN_SEND

INPUT_FS: Final[tuple[int, ...]] = (F_POLL, F_DRAIN, F_TXN, F_TXN_SEND, F_TXN_POLL, F_TXN_OFFSETS, F_TXN_END)
"""The ``f`` codes of the rows the checks read (plain sends take no part: they belong to no transaction)."""
INPUT_COLUMNS: Final[tuple[str, ...]] = (
    "run_id",
    "index",
    "time",
    "process",
    "type",
    "f",
    "item",
    "partition",
    "offset",
    "value",
    "complete",
)
"""The columns the checks read, all non-null integers after :func:`normalized` (``complete`` a bool)."""
MISSING: Final = -1
"""What a null integer becomes (a negative offset is an unknown one anyway)."""


def normalized(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with every null filled (:data:`MISSING`, ``complete`` false) and plain numpy dtypes,
    and without read or send rows whose value is not an integer (those are the value family's)."""
    rows = rows[[*INPUT_COLUMNS]]
    carries_value = rows["f"].isin([F_POLL, F_DRAIN, F_TXN_SEND, F_TXN_POLL, F_TXN_END])
    rows = rows[~(carries_value & rows["value"].isna())]
    filled = {c: rows[c].fillna(MISSING).astype("int64") for c in INPUT_COLUMNS if c != "complete"}
    return pd.DataFrame({**filled, "complete": rows["complete"].astype("boolean").fillna(False).astype(bool)})


@dataclasses.dataclass(frozen=True)
class RunTables:
    """What the checks read of one run (every frame indexed 0..n-1, sorted as documented)."""

    txns: pd.DataFrame
    """``txn`` (completion index), ``invoke_index``, ``invoke_time``, ``time`` (completion),
    ``process``, ``type``, ``end_time`` (the end micro-op's, :data:`MISSING` without one),
    ``committed_end`` (the end micro-op was a commit), ``must_commit`` (see :func:`build`); by ``txn``."""
    sends: pd.DataFrame
    """``txn, item, partition, value, offset`` of every send micro-op, by (txn, item)."""
    reads: pd.DataFrame
    """``index, f, type, time, item, partition, offset, value``: every record a txn poll
    (``F_TXN_POLL``, ``index`` the reading txn), a plain poll or a drain returned, in history order."""
    drained: frozenset[tuple[int, int]]
    """The (partition, value) pairs the final drain returned."""
    offsets: pd.DataFrame
    """``txn, item, partition, offset, group`` (the group's code, ``value``): the offsets each
    send-offsets micro-op sent, by (txn, partition)."""


def _paired_heads(rows: pd.DataFrame) -> pd.DataFrame:
    """Each txn completion with its invoke: the same process's head row just before it."""
    heads = rows[rows["f"] == F_TXN].sort_values(["process", "index"], kind="stable")
    index, time = heads["index"].to_numpy(np.int64), heads["time"].to_numpy(np.int64)
    process, kind = heads["process"].to_numpy(np.int64), heads["type"].to_numpy(np.int64)
    done = np.flatnonzero(
        (kind[1:] != TYPE_INVOKE) & (kind[:-1] == TYPE_INVOKE) & (process[1:] == process[:-1])
    )
    return pd.DataFrame(
        {
            "txn": index[done + 1],
            "invoke_index": index[done],
            "invoke_time": time[done],
            "time": time[done + 1],
            "process": process[done + 1],
            "type": kind[done + 1],
        }
    )


def build(rows: pd.DataFrame) -> RunTables:
    """The tables of one run from its :func:`normalized` rows.

    ``must_commit``: the transaction committed as far as the history can tell -- it ended
    ``ok``, or it ended ``info`` and some value it sent was read by someone (Jepsen's
    must-have-committed: a value becomes visible only once its transaction commits).
    """
    txns = _paired_heads(rows)
    ends = rows[rows["f"] == F_TXN_END].drop_duplicates("index")
    end_time = dict(zip(ends["index"].tolist(), ends["value"].tolist(), strict=True))
    commits = dict(zip(ends["index"].tolist(), ends["complete"].tolist(), strict=True))
    sends_all = rows[rows["f"] == F_TXN_SEND]
    sends = pd.DataFrame(
        {
            "txn": sends_all["index"],
            "item": sends_all["item"],
            "partition": sends_all["partition"],
            "value": sends_all["value"],
            "offset": sends_all["offset"],
        }
    ).sort_values(["txn", "item"], kind="stable", ignore_index=True)
    reads = rows[rows["f"].isin([F_TXN_POLL, F_POLL, F_DRAIN])][
        ["index", "f", "type", "time", "item", "partition", "offset", "value"]
    ].sort_values(["index", "item", "partition", "offset"], kind="stable", ignore_index=True)
    drains = reads[reads["f"] == F_DRAIN]
    drained = frozenset(zip(drains["partition"].tolist(), drains["value"].tolist(), strict=True))
    read_values = set(zip(reads["partition"].tolist(), reads["value"].tolist(), strict=True))
    seen_writers = {
        txn
        for txn, p, v in zip(
            sends["txn"].tolist(), sends["partition"].tolist(), sends["value"].tolist(), strict=True
        )
        if (p, v) in read_values
    }
    kinds = txns["type"].to_numpy()
    ids = txns["txn"].tolist()
    txns = txns.assign(
        end_time=[end_time.get(t, MISSING) for t in ids],
        committed_end=[bool(commits.get(t, False)) for t in ids],
        must_commit=(kinds == TYPE_OK)
        | ((kinds == TYPE_INFO) & np.isin(txns["txn"].to_numpy(), list(seen_writers))),
    )
    txns = txns.sort_values("txn", kind="stable", ignore_index=True)
    sent = rows[rows["f"] == F_TXN_OFFSETS]
    offsets = pd.DataFrame(
        {
            "txn": sent["index"],
            "item": sent["item"],
            "partition": sent["partition"],
            "offset": sent["offset"],
            "group": sent["value"],
        }
    ).sort_values(["txn", "partition"], kind="stable", ignore_index=True)
    return RunTables(txns=txns, sends=sends, reads=reads, drained=drained, offsets=offsets)
