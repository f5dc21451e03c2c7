"""The queue workload's ``--txn`` mode with each real client against a local three-broker cluster.

The workload runs until it has committed and aborted enough transactions (some deliberately,
``abort_p`` 0.3), then the final drain reads every partition ``read_committed``.  From the
recorded ops alone: every committed transaction's sends are in the drain exactly once, at the
offsets the client was told; no aborted transaction's send is; no ``read_committed`` read of the
main phase returned an aborted value; and a ``read_uncommitted`` reader finds the aborted sends at
their offsets too (they were written, then aborted).  Every op is a valid ``txn`` op
(``tests/workloads/txn_history.py``: the record's parser, then the workload's own promises).

The same holds with faults (a broker paused, then one killed), and the drain still completes: a producer dropped after an error is replaced by one of the same
``transactional.id``, which ends what the dropped one left open.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_impl.localcluster import LocalCluster
from testbed.record.history import read_history
from testbed.record.ops import Op
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from tests.workloads.txn_history import txn_pairs, workload_problems
from tests.workloads.txn_runner import run_then_drain
from workloads.clients import CLIENTS, make_consumer
from workloads.queue import QueueSpec

pytestmark = pytest.mark.timeout(300)

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
COMMITTED, ABORTED, READS = 120, 40, 10
"""What the main phase waits for: transactions with sends committed and aborted, and reads of the
consumer threads (read-only txn ops of one poll)."""


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:  # noqa: F811 -- the fixture imported above
    """A fresh cluster per test: the fault tests pause and kill its brokers."""
    return start_cluster(3, SETTINGS)


class Progress:
    """Counts the txn completions as they are recorded (a recorder listener), for the main phase
    to wait on: ``ok``/``fail``/``info`` of transactions with sends, ``error`` those that ended by
    an error rather than a chosen abort, ``read`` the consumer threads' reads."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._changed = threading.Condition()

    def __call__(self, op: Op) -> None:
        if op.f != "txn" or op.type == "invoke" or not op.value:
            return
        with self._changed:
            if any(micro["f"] == "send" for micro in op.value):
                self.counts[op.type] += 1
                self.counts["error"] += op.type != "ok" and op.error != "abort"
            elif len(op.value) == 1:
                self.counts["read"] += 1
            self._changed.notify_all()

    def wait_for(self, wanted: Callable[[Counter[str]], bool], timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: wanted(self.counts), timeout)

    def more(self, **wanted: int) -> Callable[[Counter[str]], bool]:
        """A condition: each count of ``wanted`` grew by that much from now."""
        start = dict(self.counts)
        return lambda counts: all(counts[key] >= start.get(key, 0) + n for key, n in wanted.items())


Faults = Callable[[LocalCluster, str, Progress], None]


def run_workload(cluster: LocalCluster, client: str, history: Path, faults: Faults | None = None) -> str:
    """Run the txn workload until :class:`Progress` has seen enough (``faults`` done), then drain;
    the topic."""
    topic = f"txn-workload-{client}-{history.parent.name}"
    cluster.create_topic(topic, 3, 3)
    cluster.wait_for_leaders(topic)
    spec = QueueSpec(
        partitions=3,
        producers=3,
        consumers=2,
        rate=50,
        client=client,
        txn=True,
        abort_p=0.3,
        request_timeout=3.0,
    )
    progress = Progress()

    def main_phase() -> None:
        if faults is not None:
            faults(cluster, topic, progress)
        enough = progress.more(ok=COMMITTED, fail=ABORTED, read=READS)
        assert progress.wait_for(enough, 90), f"the workload did not get far enough: {progress.counts}"

    run_then_drain(cluster, spec, topic, history, progress, main_phase)
    return topic


def outcomes(pairs: list[tuple[Op, Op]]) -> dict[str, dict[int, tuple[int, int | None]]]:
    """``{type: {value: (partition, offset or None)}}`` of every send of the txn ops by outcome."""
    sends: dict[str, dict[int, tuple[int, int | None]]] = {"ok": {}, "fail": {}, "info": {}}
    for _, completion in pairs:
        for micro in completion.value or []:
            if micro["f"] == "send":
                sends[completion.type][micro["value"]] = (micro["partition"], micro.get("offset"))
    return sends


def drained(history: Path) -> Counter[tuple[int, int | None, Any]]:
    """Every (partition, offset, value) the drain read, counted."""
    ops, _ = read_history(history)
    return Counter(
        (op.value["partition"], record["offset"], record["value"])
        for op in ops
        if op.f == "drain" and op.type == "ok"
        for record in op.value["records"]
    )


def read_uncommitted(cluster: LocalCluster, client: str, topic: str) -> set[tuple[int, int, Any]]:
    """Every (partition, offset, value) up to the high watermarks, aborted records included."""
    consumer = make_consumer(client, cluster.bootstrap(), "read_uncommitted")
    try:
        ends = consumer.end_offsets(topic, [0, 1, 2], 10.0)
        consumer.assign(topic, dict.fromkeys(ends, 0))
        seen: set[tuple[int, int, Any]] = set()
        deadline = time.monotonic() + 60
        while (
            any(consumer.position(topic, p) < end for p, end in ends.items()) and time.monotonic() < deadline
        ):
            seen.update((r.partition, r.offset, r.to_json()["value"]) for r in consumer.poll(0.5))
        assert time.monotonic() < deadline, "read_uncommitted did not reach the high watermarks"
        return seen
    finally:
        consumer.close()


def check_history(cluster: LocalCluster, client: str, topic: str, history: Path) -> dict[str, Any]:
    """Every op a valid txn op; committed sends drained once at their offsets, aborted ones never
    drained nor read, but found by a read_uncommitted reader; the sends by outcome."""
    pairs = txn_pairs(history)
    assert [problem for pair in pairs for problem in workload_problems(*pair)] == []
    ops, _ = read_history(history)
    assert {op.f for op in ops} == {"txn", "drain"}  # no poll ops: reads are txn ops too
    sends = outcomes(pairs)
    log = drained(history)
    by_value = Counter(value for _, _, value in log)
    for value, (partition, offset) in sends["ok"].items():
        assert log[(partition, offset, value)] == 1 and by_value[value] == 1, (value, partition, offset)
    assert all(by_value[value] <= 1 for value in sends["info"])
    aborted = set(sends["fail"])
    assert aborted and not aborted & set(by_value), "an aborted send is in the read_committed drain"
    polled = {
        record["value"] for _, c in pairs for micro in c.value or [] for record in micro.get("records", [])
    }
    assert polled and not aborted & polled, "a read_committed read returned an aborted send"
    written = read_uncommitted(cluster, client, topic)
    aborted_at = {(p, offset, value) for value, (p, offset) in sends["fail"].items() if offset is not None}
    assert aborted_at and aborted_at <= written
    return {"sends": sends, "completions": [completion for _, completion in pairs]}


@pytest.mark.parametrize("client", CLIENTS)
def test_committed_sends_are_read_once_and_aborted_ones_only_uncommitted(
    cluster: LocalCluster, tmp_path: Path, client: str
) -> None:
    history = tmp_path / "history.jsonl"
    topic = run_workload(cluster, client, history)
    checked = check_history(cluster, client, topic, history)
    chosen = [c for c in checked["completions"] if c.type == "fail" and c.error == "abort"]
    assert chosen, "no transaction was aborted by choice"


def pause_then_kill(cluster: LocalCluster, topic: str, progress: Progress) -> None:
    """Pause the leader of partition 0 until a transaction ends by an error (or 20 s), resume it;
    once transactions commit again, kill another broker likewise and start it again."""
    for act, undo in ((cluster.pause, cluster.resume), (cluster.kill, cluster.start)):
        assert progress.wait_for(progress.more(ok=20), 60), f"no commits: {progress.counts}"
        node = str(cluster.partition_state(topic, 0)["leader"])
        act(node)
        try:
            progress.wait_for(progress.more(error=1), 20)
        finally:
            undo(node)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_paused_and_a_killed_broker_leave_every_outcome_honest_and_the_drain_complete(
    cluster: LocalCluster, tmp_path: Path, client: str
) -> None:
    """Errors end transactions as fail or info and replace producers; a producer dropped with a
    transaction open is fenced by its successor, so no open transaction holds the drain back."""
    history = tmp_path / "history.jsonl"
    topic = run_workload(cluster, client, history, pause_then_kill)
    checked = check_history(cluster, client, topic, history)
    errors = [c for c in checked["completions"] if c.type != "ok" and c.error not in ("abort", None)]
    assert errors, "no transaction ended by an error: the faults did not reach the clients"
