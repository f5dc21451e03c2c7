"""The tiny examples of the consumer-group checks (``checker.definitions``), as stored runs.

Each :class:`~tests.checker.order_cases.Case` is a subscribe-shaped history written op by op
(``assign``, polls, commits, ``revoke``: ``docs/consumer-groups.md``), the group and order
anomalies it must show -- no more, no fewer -- and what its first example of each compares.
Both engines run them: pandas in ``tests/checker/test_groups.py``, Spark in
``tests/checker/spark/test_groups.py``.
"""

from __future__ import annotations

from typing import Any

from checker.definitions import (
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION,
    GROUP_REDELIVERY,
    GROUP_SKIP,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    STALE_READ,
)
from tests.checker.order_cases import Case, Step, drain, poll


def assign(
    process: int,
    generation: Any,
    consumer: int | None,
    partitions: tuple[int, ...] = (0,),
    takeover: int | None = None,
) -> list[Step]:
    value: dict[str, Any] = {
        "partitions": list(partitions),
        "generation": generation,
        "member_id": f"member-{consumer}",
        "consumer": consumer,
    }
    if takeover is not None:
        value["takeover"] = takeover
    return [(process, "invoke", "assign", value), (process, "ok", "assign", value)]


def revoke(process: int, generation: Any, consumer: Any, partitions: tuple[int, ...] = (0,)) -> list[Step]:
    value = {"partitions": list(partitions), "lost": False, "generation": generation, "consumer": consumer}
    return [(process, "invoke", "revoke", value), (process, "ok", "revoke", value)]


def commit(
    process: int, offsets: dict[Any, Any], generation: Any, outcome: str = "ok", polled_by: int | None = None
) -> list[Step]:
    """A commit and its completion (``outcome`` ``none``: the history ends before it completes)."""
    value = {"offsets": {str(p): o for p, o in offsets.items()}, "generation": generation}
    value["polled_by"] = process if polled_by is None else polled_by
    if outcome == "none":
        return [(process, "invoke", "commit", value)]
    return [(process, "invoke", "commit", value), (process, outcome, "commit", value)]


def reads(process: int, partition: int, first: int, last: int) -> list[Step]:
    """One poll of ``partition`` from offset ``first`` to ``last``."""
    return poll(process, *((partition, o) for o in range(first, last + 1)))


def acks(partition: int, count: int) -> list[Step]:
    """Acknowledged sends at offsets 0 .. count-1 (values as :func:`order_cases.poll` reads them)."""
    steps: list[Step] = []
    for offset in range(count):
        value = 1000 + 100 * partition + offset
        sent = {"partition": partition, "key": f"k{partition}", "value": value}
        steps += [(0, "invoke", "send", sent), (0, "ok", "send", {**sent, "offset": offset})]
    return steps


def txn_send(process: int, kind: str, *offsets: int) -> list[Step]:
    """A transaction of sends to p0 at ``offsets`` (values as :func:`reads` reads them), ``ok``
    (committed) or ``fail`` (aborted)."""
    planned = [{"f": "send", "partition": 0, "key": "k0", "value": 1000 + o} for o in offsets]
    done = [{**micro, "offset": o} for micro, o in zip(planned, offsets, strict=True)]
    end = {"f": "commit" if kind == "ok" else "abort", "time": 1}
    return [(process, "invoke", "txn", planned), (process, kind, "txn", [*done, end])]


def txn_reads(process: int, *offsets: int) -> list[Step]:
    """A member's read under ``--txn``: a read-only txn op of one poll of p0 at ``offsets``."""
    records = [{"partition": 0, "offset": o, "key": "k0", "value": 1000 + o} for o in offsets]
    return [
        (process, "invoke", "txn", [{"f": "poll"}]),
        (process, "ok", "txn", [{"f": "poll", "records": records}]),
    ]


TXN_LOG = [*txn_send(1, "ok", 0, 1), *txn_send(2, "fail", 3), *txn_send(3, "ok", 5, 6)]
"""p0 under transactions: committed 0, 1 (marker 2), aborted 3 (marker 4), committed 5, 6 (marker 7)."""


def first_member(first: int = 0, last: int = 2, committed: int = 3, outcome: str = "ok") -> list[Step]:
    """Process 10 of consumer 1, generation 1: reads p0 ``first..last``, commits ``committed``,
    revokes (after an ``info`` commit, as the takeover process 11 that continued it)."""
    steps = [*assign(10, 1, 1), *reads(10, 0, first, last), *commit(10, {0: committed}, 1, outcome)]
    if outcome == "info":
        return [*steps, *assign(11, 1, 1, takeover=10), *revoke(11, 1, 1)]
    return [*steps, *revoke(10, 1, 1)]


CASES = [
    Case(
        "a clean rebalance",
        [*acks(0, 6), *first_member(), *assign(20, 2, 2), *reads(20, 0, 3, 5), *commit(20, {0: 6}, 2)],
        {},
    ),
    Case(
        "group-skip: a fresh assignment resumed past unread records",
        [*acks(0, 6), *first_member(), *assign(20, 2, 2), *reads(20, 0, 5, 5)],
        {GROUP_SKIP: 2},
        {GROUP_SKIP: (5, 3)},
    ),
    Case(
        "group-skip by an ok commit beyond what was read",
        [*acks(0, 6), *first_member(committed=5)],
        {GROUP_SKIP: 2, COMMITTED_BEYOND_READ: 1},
        {GROUP_SKIP: (5, 3), COMMITTED_BEYOND_READ: (2, 5)},
    ),
    Case(
        "an info commit alone is no committed position",
        [*acks(0, 6), *first_member(committed=5, outcome="info")],
        {},
    ),
    Case(
        "an info commit the next assignment resumed from",
        [*acks(0, 6), *first_member(committed=5, outcome="info"), *assign(20, 2, 2), *reads(20, 0, 5, 5)],
        {GROUP_SKIP: 2},
    ),
    Case(
        "a record the final drain read was still skipped by the group",
        [*acks(0, 4), *first_member(committed=4), *drain(30, 0, 0, 1, 2, 3)],
        {GROUP_SKIP: 1, COMMITTED_BEYOND_READ: 1},
    ),
    Case(
        "group-redelivery: a later generation re-reads committed records",
        [*acks(0, 6), *first_member(), *assign(20, 2, 2), *reads(20, 0, 1, 4)],
        {GROUP_REDELIVERY: 1},
        {GROUP_REDELIVERY: (3, 1)},
    ),
    Case(
        "re-reads in the uncommitted window are at-least-once delivery",
        [
            *acks(0, 8),
            *assign(10, 1, 1),
            *reads(10, 0, 0, 2),
            *commit(10, {0: 3}, 1),
            *reads(10, 0, 3, 4),
            *commit(10, {0: 5}, 1, "fail"),
            *revoke(10, 1, 1),
            *assign(20, 2, 2),
            *reads(20, 0, 3, 6),
            *commit(20, {0: 7}, 2),
        ],
        {},
    ),
    Case(
        "a re-read inside one generation is no redelivery (but a stale read)",
        [*acks(0, 6), *assign(10, 1, 1), *reads(10, 0, 0, 2), *commit(10, {0: 3}, 1), *reads(10, 0, 1, 1)],
        {STALE_READ: 1, NONMONOTONIC_POLL: 1},
    ),
    Case(
        "commit-regression",
        [*acks(0, 9), *assign(10, 1, 1), *reads(10, 0, 0, 8), *commit(10, {0: 9}, 1), *commit(10, {0: 7}, 1)],
        {COMMIT_REGRESSION: 1},
        {COMMIT_REGRESSION: (9, 7)},
    ),
    Case(
        "a lost commit: the next generation resumes below it and commits lower",
        [
            *acks(0, 9),
            *first_member(0, 8, 9),
            *assign(20, 2, 2),
            *reads(20, 0, 5, 6),
            *commit(20, {0: 7}, 2),
        ],
        {COMMIT_REGRESSION: 1, GROUP_REDELIVERY: 1},
        {COMMIT_REGRESSION: (9, 7), GROUP_REDELIVERY: (9, 5)},
    ),
    Case(
        "a late commit of the same generation explains the lower position",
        [
            *acks(0, 9),
            *assign(10, 1, 1),
            *reads(10, 0, 0, 4),
            *commit(10, {0: 5}, 1, "info"),
            *assign(11, 1, 1, takeover=10),
            *reads(11, 0, 5, 8),
            *commit(11, {0: 9}, 1),
            *revoke(11, 1, 1),
            *assign(20, 2, 2),
            *reads(20, 0, 5, 6),
            *commit(20, {0: 7}, 2),
        ],
        {},
    ),
    Case(
        "a late commit of an older generation explains nothing",
        [
            *acks(0, 9),
            *assign(10, 1, 1),
            *reads(10, 0, 0, 4),
            *commit(10, {0: 5}, 1, "info"),
            *assign(11, 1, 1, takeover=10),
            *revoke(11, 1, 1),
            *assign(20, 2, 2),
            *reads(20, 0, 5, 8),
            *commit(20, {0: 9}, 2),
            *revoke(20, 2, 2),
            *assign(30, 3, 3),
            *reads(30, 0, 5, 6),
            *commit(30, {0: 7}, 3),
        ],
        {COMMIT_REGRESSION: 1, GROUP_REDELIVERY: 1},
    ),
    Case(
        "a commit cut short may have landed late",
        [
            *acks(0, 9),
            *assign(90, 1, 9),
            *commit(91, {0: 5}, 1, "none", polled_by=90),
            *reads(90, 0, 0, 8),
            *commit(92, {0: 9}, 1, polled_by=90),
            *revoke(90, 1, 9),
            *assign(20, 2, 2),
            *reads(20, 0, 5, 6),
            *commit(20, {0: 7}, 2),
        ],
        {},
    ),
    Case(
        "overlapping commits are not ordered",
        [
            *acks(0, 9),
            *assign(10, 1, 1),
            *reads(10, 0, 0, 8),
            (91, "invoke", "commit", {"offsets": {"0": 9}, "generation": 1, "polled_by": 10}),
            (92, "invoke", "commit", {"offsets": {"0": 7}, "generation": 1, "polled_by": 10}),
            (91, "ok", "commit", {"offsets": {"0": 9}, "generation": 1, "polled_by": 10}),
            (92, "ok", "commit", {"offsets": {"0": 7}, "generation": 1, "polled_by": 10}),
        ],
        {},
    ),
    Case(
        "committed-beyond-read",
        [*acks(0, 4), *assign(10, 1, 1), *reads(10, 0, 0, 3), *commit(10, {0: 7}, 1)],
        {COMMITTED_BEYOND_READ: 1},
        {COMMITTED_BEYOND_READ: (3, 7)},
    ),
    Case(
        "an asynchronous commit names the process whose reads it commits",
        [
            *acks(0, 5),
            *assign(10, 1, 1, (0, 1)),
            *reads(10, 0, 0, 4),
            *commit(90, {0: 5}, 1, polled_by=10),
            *commit(91, {0: 5, 1: 2}, 1, polled_by=11),
        ],
        {COMMITTED_BEYOND_READ: 2},
    ),
    Case(
        "a takeover commits what its predecessor read",
        [
            *acks(0, 4),
            *assign(10, 1, 1, (0, 1)),
            *poll(10, (0, 0), (0, 1), (0, 2), (1, 0), (1, 1)),
            *commit(10, {0: 3, 1: 2}, 1, "info"),
            *assign(11, 1, 1, (0, 1), takeover=10),
            *reads(11, 0, 3, 3),
            *commit(11, {0: 4, 1: 2}, 1),
        ],
        {},
    ),
    Case(
        "a poll-skip across a takeover",
        [
            *assign(10, 1, 1),
            *reads(10, 0, 0, 1),
            *commit(10, {0: 2}, 1, "info"),
            *assign(11, 1, 1, takeover=10),
            *reads(11, 0, 3, 3),
        ],
        {POLL_SKIP: 1},
        {POLL_SKIP: (1, 3)},
    ),
    Case(
        "a step back across a takeover",
        [
            *assign(10, 1, 1),
            *reads(10, 0, 0, 2),
            *commit(10, {0: 3}, 1, "info"),
            *assign(11, 1, 1, takeover=10),
            *reads(11, 0, 1, 1),
        ],
        {NONMONOTONIC_POLL: 1, STALE_READ: 1},
    ),
    Case(
        "a rebalance may move the position both ways; a skip inside an assignment may not",
        [
            *acks(0, 8),
            *first_member(0, 4, 3),
            *assign(20, 2, 2),
            *reads(20, 0, 3, 3),
            *reads(20, 0, 5, 5),
            *revoke(20, 2, 2),
            *assign(30, 3, 1),
            *reads(30, 0, 6, 7),
        ],
        {POLL_SKIP: 1},
        {POLL_SKIP: (3, 5)},
    ),
    Case(
        "a takeover whose assignment began before the history is no resume",
        [*acks(0, 6), *assign(11, 1, 1, takeover=10), *reads(11, 0, 5, 5), *assign(21, 1, None, takeover=20)],
        {},
    ),
    Case(
        "generation-regression: a consumer is handed an older generation than it held",
        [*assign(10, 2, 1), *revoke(10, 2, 1), *assign(11, 1, 1)],
        {GENERATION_REGRESSION: 1},
        {GENERATION_REGRESSION: (2, 1)},
    ),
    Case(
        "each regressed assign counts, against the first assign of the highest generation",
        [
            *assign(10, 3, 1),
            *revoke(10, 3, 1),
            *assign(11, 3, 1),
            *revoke(11, 3, 1),
            *assign(12, 1, 1),
            *revoke(12, 1, 1),
            *assign(13, 2, 1),
        ],
        {GENERATION_REGRESSION: 2},
        {GENERATION_REGRESSION: (3, 1)},
        earlier={GENERATION_REGRESSION: [1, 1]},
    ),
    Case(
        "an equal generation is no regression",
        [*assign(10, 2, 1), *revoke(10, 2, 1), *assign(11, 2, 1)],
        {},
    ),
    Case(
        "a takeover repeats its chain's generation; a regressed chain counts once",
        [
            *assign(10, 2, 1),
            *commit(10, {}, 2, "info"),
            *assign(11, 2, 1, takeover=10),
            *revoke(11, 2, 1),
            *assign(20, 1, 1),
            *commit(20, {}, 1, "info"),
            *assign(21, 1, 1, takeover=20),
        ],
        {GENERATION_REGRESSION: 1},
    ),
    Case(
        "null generations and consumers take no part",
        [
            *assign(10, 2, 1),
            *revoke(10, 2, 1),
            *assign(11, None, 1),
            *revoke(11, None, 1),
            *assign(12, 1, None),
            *revoke(12, 1, None),
            *assign(13, "1", 1),
        ],
        {},
    ),
    Case(
        "overlapping assigns are not compared",
        [
            (10, "invoke", "assign", {"partitions": [0], "generation": 2, "consumer": 1}),
            (11, "invoke", "assign", {"partitions": [0], "generation": 1, "consumer": 1}),
            (10, "ok", "assign", {"partitions": [0], "generation": 2, "consumer": 1}),
            (11, "ok", "assign", {"partitions": [0], "generation": 1, "consumer": 1}),
        ],
        {},
    ),
    Case(
        "another member's newer generation recorded first is no regression",
        [*assign(10, 1, 1), *revoke(10, 1, 1), *assign(20, 2, 2), *assign(11, 1, 1)],
        {},
    ),
    Case(
        "values the checks cannot read are unknown",
        [
            *acks(0, 4),
            *assign(10, "1", 1),
            *reads(10, 0, 0, 2),
            *commit(10, {"0": 3, "01": 99, "x": 7}, "1"),
            *commit(10, {"0": "x", "1": 50}, 1),
            *commit(10, {"0": 2.5}, 1),
            *revoke(10, "1", 1),
            *assign(20, 2, 2),
            *reads(20, 0, 1, 3),
        ],
        {},
    ),
    Case(
        "under --txn: reads as txn ops over markers and an aborted record are no skip",
        [*TXN_LOG, *assign(10, 1, 1), *txn_reads(10, 0, 1, 5, 6), *commit(10, {0: 7}, 1)],
        {},
    ),
    Case(
        "under --txn: a committed transaction's record below the commit that no member read",
        [*TXN_LOG, *assign(10, 1, 1), *txn_reads(10, 0, 1), *commit(10, {0: 7}, 1)],
        {GROUP_SKIP: 2, COMMITTED_BEYOND_READ: 1},
    ),
]
