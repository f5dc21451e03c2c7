"""What a transactional finding shows: the transactions, their micro-ops and the edges between them.

Every finding of :mod:`checker.txn` carries its example whole, as plain JSON (built here from the
run's tables, the same in both engines), so the driver puts it in ``results.json`` as it is:

* a transaction (:meth:`Views.txn`): ``index`` (its completion), ``invoke_index``, ``process``,
  ``type`` (ok, fail, info), ``end`` (``{"f": "commit"|"abort", "time": ns}``, null without an end
  micro-op), ``sends`` (every send micro-op: ``item``, ``partition``, ``value``, ``offset`` -- null
  when unknown) and ``reads`` (only the records the finding is about: ``item``, ``partition``,
  ``offset``, ``value``) with ``records_read`` (how many its polls returned in all); and, for a
  consume-transform-produce transaction, ``offsets_sent`` (its send-offsets micro-op: ``item``,
  ``partition``, ``offset``, one per partition);
* an edge (:func:`edge`): ``kind`` (ww, wr, process, realtime), ``from`` and ``to`` (transaction
  indexes) and why -- ww: the partition, the earlier transaction's value and offset and the later
  one's (``next_value``, ``next_offset``), consecutive among the known positions of the log; wr:
  the partition, the value and the offset it was read at; process: the process; realtime: the
  earlier transaction's completion index and the later one's invoke index.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from checker.txn.tables import MISSING, RunTables
from testbed.record.history import F_TXN_POLL
from testbed.record.ops import OP_TYPES

Position = tuple[int, int, int]
"""(partition, offset, value) of one record."""


def known(number: int) -> int | None:
    """An integer column's value, :data:`MISSING` as null."""
    return None if number == MISSING else int(number)


class Views:
    """Transactions of one run as example JSON, looked up by their completion index."""

    def __init__(self, tables: RunTables) -> None:
        self._txns = tables.txns.set_index("txn", drop=False)
        self._sends = tables.sends  # sorted by (txn, item)
        self._reads = tables.reads[tables.reads["f"] == F_TXN_POLL]  # in history order: by index
        self._send_txn = self._sends["txn"].to_numpy()
        self._offsets = tables.offsets  # sorted by (txn, partition)
        self._offset_txn = self._offsets["txn"].to_numpy()
        self._read_txn = self._reads["index"].to_numpy()

    def txn(self, txn: int, shown: Iterable[Position] = ()) -> dict[str, Any]:
        """Transaction ``txn`` with its sends and the reads at ``shown`` positions."""
        row = self._txns.loc[txn]
        low, high = np.searchsorted(self._send_txn, [txn, txn + 1])
        sends = self._sends.iloc[low:high]
        low, high = np.searchsorted(self._read_txn, [txn, txn + 1])
        reads = self._reads.iloc[low:high]
        wanted = set(shown)
        end = None
        if int(row["end_time"]) != MISSING:
            end = {"f": "commit" if bool(row["committed_end"]) else "abort", "time": int(row["end_time"])}
        low, high = np.searchsorted(self._offset_txn, [txn, txn + 1])
        sent = self._offsets.iloc[low:high]
        view: dict[str, Any] = {
            "index": int(txn),
            "invoke_index": int(row["invoke_index"]),
            "process": int(row["process"]),
            "type": OP_TYPES[int(row["type"])],
            "end": end,
            "sends": [
                {"item": int(i), "partition": int(p), "value": int(v), "offset": known(o)}
                for i, p, v, o in zip(
                    sends["item"], sends["partition"], sends["value"], sends["offset"], strict=True
                )
            ],
            "reads": [
                {"item": int(i), "partition": int(p), "offset": known(o), "value": int(v)}
                for i, p, o, v in zip(
                    reads["item"], reads["partition"], reads["offset"], reads["value"], strict=True
                )
                if (int(p), int(o), int(v)) in wanted
            ],
            "records_read": len(reads),
        }
        if len(sent):
            view["offsets_sent"] = [
                {"item": int(i), "partition": int(p), "offset": int(o)}
                for i, p, o in zip(sent["item"], sent["partition"], sent["offset"], strict=True)
            ]
        return view


def edge(kind: str, source: int, target: int, **why: Any) -> dict[str, Any]:
    """One edge of a cycle as its example shows it (see the module docstring)."""
    return {"kind": kind, "from": int(source), "to": int(target), **why}
