"""Hand-written transactional histories for the tests of :mod:`checker.txn`, built as ops and
flattened by the recorder's own :func:`testbed.record.history.ops_to_table` (the columns the
engines read), so the tests read what a real run stores.

A :class:`History` hands out indexes and times in order: ``txn(process, [send(0, 1, 5), poll()])``
records the invoke and, at once, its completion (``ok`` with a ``commit`` end micro-op unless
told otherwise); :meth:`History.invoke` and :meth:`History.complete` record them apart, so that
transactions overlap in time.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from checker.engine import to_pandas
from checker.txn.run import RunSettings, run_anomalies
from testbed.record.history import ops_to_table
from testbed.record.ops import Op, OpType

RUN_ID = 7


def send(partition: int, value: int, offset: int | None = None) -> dict[str, Any]:
    """A send micro-op as completed (``offset`` None: the client did not learn it)."""
    micro: dict[str, Any] = {"f": "send", "partition": partition, "key": f"k{partition}", "value": value}
    if offset is not None:
        micro["offset"] = offset
    return micro


def poll(*records: tuple[int, int, int]) -> dict[str, Any]:
    """A poll micro-op that returned ``(partition, offset, value)`` records."""
    return {
        "f": "poll",
        "records": [{"partition": p, "offset": o, "key": f"k{p}", "value": v} for p, o, v in records],
    }


def offsets(*entries: tuple[int, int], group: str = "g") -> dict[str, Any]:
    """A send-offsets micro-op that sent ``(partition, offset)`` entries for ``group``."""
    return {
        "f": "send-offsets",
        "group": group,
        "offsets": [{"partition": p, "offset": o} for p, o in entries],
    }


def _planned(micro: dict[str, Any]) -> dict[str, Any]:
    """The invoke's form of a completed micro-op (no offset, no records)."""
    if micro["f"] == "poll":
        return {"f": "poll"}
    if micro["f"] == "send-offsets":
        return {"f": "send-offsets", "group": micro["group"]}
    return {k: micro[k] for k in ("f", "partition", "key", "value")}


class History:
    """Ops in history order, each at the next index, ``time`` = 10 * index."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._pending: dict[int, list[dict[str, Any]]] = {}

    def _add(self, process: int, kind: OpType, f: str, value: Any) -> int:
        index = len(self.ops)
        self.ops.append(
            Op(
                index,
                index * 10,
                process,
                kind,
                f,
                value,
                "error" if kind != "ok" and kind != "invoke" else None,
            )
        )
        return index

    def invoke(self, process: int, micro_ops: list[dict[str, Any]]) -> int:
        self._pending[process] = micro_ops
        return self._add(process, "invoke", "txn", [_planned(m) for m in micro_ops])

    def complete(
        self, process: int, kind: OpType = "ok", end: str | None = "commit", end_time: int | None = None
    ) -> int:
        """Complete the process's pending txn; the end micro-op's time defaults to the completion's."""
        micro_ops = list(self._pending.pop(process))
        if end is not None:
            micro_ops.append({"f": end, "time": len(self.ops) * 10 if end_time is None else end_time})
        return self._add(process, kind, "txn", micro_ops)

    def txn(
        self, process: int, micro_ops: list[dict[str, Any]], kind: OpType = "ok", end: str | None = "commit"
    ) -> int:
        """A transaction invoked and completed at once; returns its completion's index."""
        self.invoke(process, micro_ops)
        return self.complete(process, kind, end)

    def drain(self, partition: int, records: list[tuple[int, int]], process: int = 90) -> None:
        """The complete final drain of ``partition``: ``(offset, value)`` records."""
        self._add(process, "invoke", "drain", {"partition": partition})
        value = {
            "partition": partition,
            "records": [{"offset": o, "key": f"k{partition}", "value": v} for o, v in records],
            "end_offset": max((o for o, _ in records), default=-1) + 1,
            "complete": True,
        }
        self._add(process, "ok", "drain", value)

    def rows(self) -> pd.DataFrame:
        """The history's columnar rows, as the engines read them."""
        return to_pandas(ops_to_table(self.ops, run_id=RUN_ID))


def check(
    history: History,
    checks: frozenset[str],
    read_committed: bool = True,
    complete: frozenset[int] = frozenset(),
    limit: int = 5,
) -> pd.DataFrame:
    """The txn family's answer for ``history`` alone."""
    return run_anomalies(history.rows(), RunSettings(read_committed, complete), checks, limit)
