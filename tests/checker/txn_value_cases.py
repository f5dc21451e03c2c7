"""Contract cases of the ``txn`` op in the value checks (``docs/history.md``, the transactional
workload's values): a transaction's sends and reads count like plain ones, with the
transaction's outcome as the send's; a read of an aborted transaction's send is a G1a, not an
aborted-read.  Both engines run them with the other contract cases (``CASES``)."""

from __future__ import annotations

from typing import Any

from checker.definitions import G1A, INCONSISTENT_OFFSETS, LOST_READ, LOST_WRITE, TORN_TRANSACTION
from tests.checker.contract_cases import Case, Step, Value, agreeing, drain, send


def txn(
    process: int, kind: str, sends: list[tuple[int, int | None]], end: str | None, time: int = 1
) -> list[Step]:
    """A transaction of partition 0 sends (value, offset or None) ending ``kind`` with ``end``."""
    invoked = [{"f": "send", "partition": 0, "key": "k0", "value": v} for v, _ in sends]
    done: list[dict[str, Any]] = [
        {**micro, "offset": offset} if offset is not None else micro
        for micro, (_, offset) in zip(invoked, sends, strict=True)
    ]
    if end is not None:
        done.append({"f": end, "time": time})
    return [(process, "invoke", "txn", invoked), (process, kind, "txn", done)]


def read(process: int, *records: tuple[int, Value]) -> list[Step]:
    """A read outside any transaction: a txn op of one poll micro-op of partition 0 records."""
    polled = [{"partition": 0, "offset": o, "key": "k0", "value": v} for o, v in records]
    return [
        (process, "invoke", "txn", [{"f": "poll"}]),
        (process, "ok", "txn", [{"f": "poll", "records": polled}]),
    ]


def _aborted_read_shown(result: dict[str, Any]) -> None:
    (example,) = result["anomalies"][G1A]["examples"]
    assert example["value"] == 1000
    assert example["send"]["f"] == "txn" and example["send"]["type"] == "fail"
    assert example["send"]["value"] == [
        {"f": "send", "partition": 0, "key": "k0", "value": 1000, "offset": 0},
        {"f": "abort", "time": 1},
    ]
    assert example["read"]["value"] == [
        {"f": "poll", "records": [{"partition": 0, "offset": 0, "key": "k0", "value": 1000}]}
    ]


def _lost_commit_shown(result: dict[str, Any]) -> None:
    (example,) = result["anomalies"][LOST_WRITE]["examples"]
    assert (example["value"], example["offset"]) == (1000, 0)
    assert example["send"]["f"] == "txn" and example["send"]["type"] == "ok"
    assert result["stats"]["txns"] == {"invoke": 1, "ok": 1, "fail": 0, "info": 0}
    assert result["stats"]["sends"] == {"invoke": 1, "ok": 1, "fail": 0, "info": 0}


TXN_VALUE_CASES = [
    Case(
        "a read of an aborted transaction's send is G1a (not aborted-read)",
        [
            *txn(0, "fail", [(1000, 0)], "abort"),
            *txn(1, "ok", [(1001, 2)], "commit"),
            *read(5, (0, 1000)),
            *drain((2, 1001)),
        ],
        agreeing((0, 1000), (2, 1001)),
        {G1A: 1, LOST_READ: 1},
        False,
        verify=_aborted_read_shown,
    ),
    Case(
        "a committed transaction's send missing from the complete drain is a lost-write",
        [*txn(0, "ok", [(1000, 0), (1001, 1)], "commit"), *send(1, 1002, 3), *drain((1, 1001), (3, 1002))],
        agreeing((1, 1001), (3, 1002)),
        {LOST_WRITE: 1, TORN_TRANSACTION: 1},
        False,
        verify=_lost_commit_shown,
    ),
    Case(
        "an aborted transaction's send that no read shows is no anomaly; one never completed is read fine",
        [
            *txn(0, "fail", [(1000, 0)], "abort"),
            (1, "invoke", "txn", [{"f": "send", "partition": 0, "key": "k0", "value": 1001}]),
            *read(5, (2, 1001)),
            *drain((2, 1001)),
        ],
        agreeing((2, 1001)),
        {},
        True,
    ),
    Case(
        "a committed transaction's send and a read disagreeing on an offset are inconsistent-offsets",
        [*txn(0, "ok", [(1000, 0)], "commit"), *send(1, 1001, 0), *drain((0, 1000))],
        agreeing((0, 1000)),
        {INCONSISTENT_OFFSETS: 1, LOST_WRITE: 1},
        False,
    ),
]
