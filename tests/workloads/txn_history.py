"""What the transactional workload's tests read back: its history, checked against the ``txn`` op
contract (``docs/history.md``, "The transactional workload's values").

Two layers: the record's own parser (:func:`testbed.record.history.convert_history`: every line an
op, micro-ops matching their invoke, process rules) and, on top, what the workload promises beyond
the format -- an ``ok`` transaction with sends ends in a commit and knows every send's offset, a
read-only op is ``ok`` of polls with no end micro-op, a committed send-offsets micro-op holds the
offsets it sent, an end micro-op's time lies between its
invoke and its completion, a ``fail`` never ends in a commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.record.history import convert_history, read_history
from testbed.record.ops import Op


def txn_pairs(history: Path) -> list[tuple[Op, Op]]:
    """Every completed ``txn`` op of ``history.jsonl`` as (invoke, completion), after the record's
    parser accepted the whole history (HistoryFormatError otherwise)."""
    convert_history(history, history.with_suffix(".parquet"))
    ops, _ = read_history(history)
    pending: dict[Any, Op] = {}
    pairs = []
    for op in ops:
        if op.f != "txn":
            continue
        if op.type == "invoke":
            pending[op.process] = op
        else:
            pairs.append((pending.pop(op.process), op))
    assert not pending, f"txn ops never completed: {pending}"
    return pairs


def workload_problems(invoke: Op, completion: Op) -> list[str]:
    """What breaks the workload's promises in one txn op (``[]``: nothing)."""
    planned, value = invoke.value, completion.value
    where = f"op {completion.index} ({completion.type})"
    if value is None:
        return [] if completion.type != "ok" else [f"{where}: an ok txn without its micro-ops"]
    end = value[-1] if value and value[-1]["f"] in ("commit", "abort") else None
    body = value[:-1] if end is not None else value
    sends = [micro for micro in body if micro["f"] == "send"]
    problems = []
    if not any(micro["f"] in ("send", "send-offsets") for micro in planned):
        if completion.type != "ok" or end is not None:
            problems.append(f"{where}: a read-only op must be ok without an end micro-op")
        if not any(micro.get("records") for micro in body):
            problems.append(f"{where}: an empty read was recorded")
        return problems
    if completion.type == "ok" and (end is None or end["f"] != "commit"):
        problems.append(f"{where}: committed without a commit micro-op")
    if completion.type == "ok" and any("offset" not in send for send in sends):
        problems.append(f"{where}: a committed send without its offset")
    if completion.type == "ok" and any(m["f"] == "send-offsets" and "offsets" not in m for m in body):
        problems.append(f"{where}: committed without the offsets it sent")
    if completion.type == "fail" and end is not None and end["f"] == "commit":
        problems.append(f"{where}: a fail that ends in a commit")
    if end is not None and not invoke.time <= end["time"] <= completion.time:
        problems.append(f"{where}: end time {end['time']} outside [{invoke.time}, {completion.time}]")
    return problems
