"""G0 and G1c and their -process / -realtime variants on hand-written histories (Elle's paper
examples among them), planted and absent, with the cycle each example shows."""

from __future__ import annotations

import json
from typing import Any

from checker.definitions import G0, G0_PROCESS, G0_REALTIME, G1C, G1C_PROCESS, G1C_REALTIME, TXN_CHECKS
from tests.checker.txn.histories import History, check, poll, send

ALL = frozenset(TXN_CHECKS)


def found(history: History, read_committed: bool = True) -> dict[str, list[dict[str, Any]]]:
    answer = check(history, ALL, read_committed=read_committed)
    out: dict[str, list[dict[str, Any]]] = {}
    for row in answer.to_dict("records"):
        out.setdefault(row["kind"], []).append({"total": row["total"], **json.loads(row["example"])})
    return out


def concurrent(history: History, *txns: tuple[int, list[dict[str, Any]]]) -> list[int]:
    """Transactions all invoked before any completes: no realtime or process edge between them."""
    for process, micro_ops in txns:
        history.invoke(process, micro_ops)
    return [history.complete(process) for process, _ in txns]


def steps(example: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(step["kind"], step["from"], step["to"]) for step in example["steps"]]


def test_g0_two_writers_writing_x_and_y_in_opposite_orders() -> None:
    """Elle's G0: T1 writes x then y, T2 writes y then x; the logs order T1 first in x, T2 first in y."""
    history = History()
    t1, t2 = concurrent(history, (0, [send(0, 1, 0), send(1, 2, 1)]), (1, [send(1, 3, 0), send(0, 4, 1)]))
    anomalies = found(history)
    assert set(anomalies) == {G0}
    (example,) = anomalies[G0]
    assert example["total"] == 1 and example["cycle"] == [t1, t2] and example["length"] == 2
    assert steps(example) == [("ww", t1, t2), ("ww", t2, t1)]
    first = example["steps"][0]
    assert (
        first["partition"],
        first["offset"],
        first["value"],
        first["next_offset"],
        first["next_value"],
    ) == (
        0,
        0,
        1,
        1,
        4,
    )
    assert [t["index"] for t in example["txns"]] == [t1, t2]
    assert example["txns"][0]["sends"] == [
        {"item": 0, "partition": 0, "value": 1, "offset": 0},
        {"item": 1, "partition": 1, "value": 2, "offset": 1},
    ]


def test_the_same_writes_in_one_order_are_no_cycle() -> None:
    history = History()
    concurrent(history, (0, [send(0, 1, 0), send(1, 2, 0)]), (1, [send(1, 3, 1), send(0, 4, 1)]))
    assert found(history) == {}


def test_g1c_via_wr_then_ww_when_the_reader_wrote_after_it_read() -> None:
    """Elle's G1c via wr then ww: T2 reads T1's write of x, *then* sends y, and T2's y lands
    below T1's in y's log -- but T1's y was appended before T1 committed, which was before T2's
    read, which was before T2's send: a contradiction (on the event graph, ``checker.txn.event_graph``)."""
    history = History()
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [poll((0, 0, 1)), send(1, 3, 0)])
    t1 = history.complete(0)
    t2 = history.complete(1)
    anomalies = found(history)
    assert set(anomalies) == {G1C}
    (example,) = anomalies[G1C]
    assert sorted(steps(example)) == sorted([("wr", t1, t2), ("ww", t2, t1)])
    ww = next(step for step in example["steps"] if step["kind"] == "ww")
    assert (ww["partition"], ww["offset"], ww["value"], ww["next_offset"], ww["next_value"]) == (
        1,
        0,
        3,
        1,
        2,
    )
    reader = next(txn for txn in example["txns"] if txn["index"] == t2)
    assert [s["item"] for s in reader["sends"]] == [1] and [r["item"] for r in reader["reads"]] == [0]


def test_two_open_transactions_interleaving_in_a_log_is_no_g1c() -> None:
    """The same reads and log, but T2 sent y *before* it read x: T2 appended, T1 appended and
    committed, T2 read -- Kafka as designed (log order is not transaction order; a healthy
    two-producer run showed exactly this, 2026-11-29).  Only G0's warning family could see a ww
    cycle here, and there is none: T1 -wr-> T2 -ww-> T1 is no ww-only cycle."""
    history = History()
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [send(1, 3, 0), poll((0, 0, 1))])
    history.complete(0)
    history.complete(1)
    assert found(history) == {}


def test_under_read_uncommitted_a_read_follows_the_append_not_the_commit() -> None:
    """T2 read T1's x before T1 committed (allowed under read_uncommitted) and then sent y, which
    landed below T1's y: no contradiction when T1 appended y after T2's read -- the wr edge starts
    at the append of x, which T1's append of y does not follow."""
    history = History()
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [poll((0, 0, 1)), send(1, 3, 0)])
    history.complete(0)
    history.complete(1)
    assert G1C not in found(history, read_committed=False)
    assert G1C in found(history, read_committed=True)


def test_g1c_each_transaction_read_the_other_s_write() -> None:
    """G1c by wr edges alone: T1 reads T2's write and T2 reads T1's -- under read_committed neither
    could have committed first."""
    history = History()
    history.invoke(0, [send(0, 1, 0), poll((1, 0, 2))])
    history.invoke(1, [send(1, 2, 0), poll((0, 0, 1))])
    t1 = history.complete(0)
    t2 = history.complete(1)
    anomalies = found(history)
    assert G1C in anomalies
    (example,) = anomalies[G1C]
    assert sorted(steps(example)) == sorted([("wr", t1, t2), ("wr", t2, t1)])
    assert {"kind": "wr", "from": t1, "to": t2, "partition": 0, "value": 1, "offset": 0} in example["steps"]
    reader = next(txn for txn in example["txns"] if txn["index"] == t2)
    assert reader["reads"] == [{"item": 1, "partition": 0, "offset": 0, "value": 1}]


def test_ww_order_comes_from_reads_and_drains_too() -> None:
    """No offsets acknowledged: the drain alone orders the writes (T1's x first, T2's y first)."""
    history = History()
    t1, t2 = concurrent(history, (0, [send(0, 1), send(1, 2)]), (1, [send(1, 3), send(0, 4)]))
    history.drain(0, [(0, 1), (1, 4)])
    history.drain(1, [(0, 3), (1, 2)])
    assert steps(found(history)[G0][0]) == [("ww", t1, t2), ("ww", t2, t1)]


def test_g0_process_a_process_writes_before_its_own_earlier_transaction() -> None:
    history = History()
    t1 = history.txn(0, [send(0, 1, 5)])
    t2 = history.txn(0, [send(0, 2, 4)])
    anomalies = found(history)
    assert set(anomalies) == {G0_PROCESS, G0_REALTIME}
    assert steps(anomalies[G0_PROCESS][0]) == [("process", t1, t2), ("ww", t2, t1)]
    assert anomalies[G0_PROCESS][0]["steps"][0]["process"] == 0
    assert steps(anomalies[G0_REALTIME][0]) == [("realtime", t1, t2), ("ww", t2, t1)]


def test_g0_realtime_across_processes_and_not_when_they_overlap() -> None:
    history = History()
    t1 = history.txn(0, [send(0, 1, 5)])
    t2 = history.txn(1, [send(0, 2, 4)])
    anomalies = found(history)
    assert set(anomalies) == {G0_REALTIME}
    example = anomalies[G0_REALTIME][0]
    assert example["steps"][0] == {
        "kind": "realtime",
        "from": t1,
        "to": t2,
        "completed": t1,
        "invoked": t1 + 1,
    }
    overlapping = History()
    concurrent(overlapping, (0, [send(0, 1, 5)]), (1, [send(0, 2, 4)]))
    assert found(overlapping) == {}


def test_an_append_below_a_write_committed_before_the_appender_began_is_g1c_process() -> None:
    """T1 reads T2's write of x; process 0's next transaction T3 writes y below T2's y:
    T2 -wr-> T1 -process-> T3 -ww-> T2.  T2's y was appended before T2 committed, before T1's
    read, before T3 began -- yet it is above T3's.  A contradiction only through the ww edge,
    which the event graph takes (the transaction graph's G1c could not)."""
    history = History()
    history.invoke(1, [send(0, 1, 0), send(1, 6, 1)])
    t1 = history.txn(0, [poll((0, 0, 1))])
    t3 = history.txn(0, [send(1, 5, 0)])
    t2 = history.complete(1, end_time=5)  # its commit began before T1's read completed
    anomalies = found(history)
    assert G1C not in anomalies
    assert sorted(steps(anomalies[G1C_PROCESS][0])) == sorted(
        [("wr", t2, t1), ("process", t1, t3), ("ww", t3, t2)]
    )
    assert sorted(steps(anomalies[G1C_REALTIME][0])) == sorted(
        [("wr", t2, t1), ("realtime", t1, t3), ("ww", t3, t2)]
    )


def test_g1c_process_and_realtime() -> None:
    """Process 0 runs T1 then T3, process 1 then T2; T1 read a write of T2, which read a write of
    T3: T3 -wr-> T2 -wr-> T1 -process-> T3 -- T1 saw, before T3 began, what T3 caused.  In real
    time it is shorter: T1 completed before T2 began, yet read T2's write (T1 -realtime-> T2 -wr-> T1)."""
    history = History()
    t1 = history.txn(0, [poll((1, 0, 20))])
    t3 = history.txn(0, [send(0, 10, 0)])
    t2 = history.txn(1, [poll((0, 0, 10)), send(1, 20, 0)])
    anomalies = found(history)
    assert {G1C_PROCESS, G1C_REALTIME} <= set(anomalies)
    assert sorted(steps(anomalies[G1C_PROCESS][0])) == sorted(
        [("wr", t3, t2), ("wr", t2, t1), ("process", t1, t3)]
    )
    assert sorted(steps(anomalies[G1C_REALTIME][0])) == sorted([("wr", t2, t1), ("realtime", t1, t2)])


def test_fail_and_unseen_info_transactions_take_no_part_and_seen_info_ones_do() -> None:
    history = History()
    history.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    history.invoke(1, [send(1, 3, 0), send(0, 4, 1)])
    history.complete(0, "fail", "abort")
    history.complete(1)
    assert found(history) == {}
    unseen = History()
    unseen.invoke(0, [send(0, 1, 0), send(1, 2, 1)])
    unseen.invoke(1, [send(1, 3, 0), send(0, 4, 1)])
    unseen.complete(0, "info", None)
    unseen.complete(1)
    assert found(unseen) == {}
    seen = History()
    seen.invoke(0, [send(0, 1), send(1, 2)])
    seen.invoke(1, [send(1, 3, 0), send(0, 4, 1)])
    seen.complete(0, "info", None)
    seen.complete(1)
    seen.drain(0, [(0, 1), (1, 4)])
    seen.drain(1, [(0, 3), (1, 2)])
    assert set(found(seen)) == {G0}


def test_an_offset_seen_with_two_values_orders_nothing() -> None:
    history = History()
    concurrent(history, (0, [send(0, 1, 0), send(1, 2, 1)]), (1, [send(1, 3, 0), send(0, 4, 1)]))
    history.drain(0, [(0, 5), (1, 4)])  # offset 0 of p0 holds 1 (ack) and 5 (drain): inconsistent
    assert found(history) == {}


def test_one_cycle_per_component_and_the_examples_in_index_order() -> None:
    history = History()
    pairs = []
    for number in range(3):
        base = 10 * number
        pairs.append(
            concurrent(
                history,
                (0, [send(base, 1 + base, 0), send(base + 1, 2 + base, 1)]),
                (1, [send(base + 1, 3 + base, 0), send(base, 4 + base, 1)]),
            )
        )
    answer = check(history, frozenset({G0}), limit=2)
    assert answer["total"].tolist() == [3, 3]
    assert answer["index"].tolist() == [pairs[0][0], pairs[1][0]]


def test_a_long_cycle_shows_its_first_steps_and_its_length() -> None:
    """A ring of forty: each transaction writes its own partition second, the next one's first."""
    history = History()
    n = 40
    concurrent(history, *((k, [send(k, 2 * k, 1), send((k + 1) % n, 2 * k + 1, 0)]) for k in range(n)))
    (example,) = found(history)[G0]
    assert example["length"] == n
    assert len(example["steps"]) == 32 == len(example["txns"])
    assert all(step["kind"] == "ww" for step in example["steps"])
