"""Consume-transform-produce (``--txn --txn-ctp``) with each real client against a local
three-broker cluster: every record is processed exactly once, through a paused and a killed broker.

Each producer thread reads its partition of the topic as the one consumer group from the group's
committed offsets, writes fresh values, and commits the group's next offsets in the transaction
(``send_offsets_to_transaction``, TxnOffsetCommit at the broker); aborted transactions -- a third
by choice, more by the faults -- are read again.  From the recorded history the transactional
checks (:mod:`checker.txn.offsets`) find no record processed twice and none skipped, the group's
committed offsets the brokers hold at the end are the last ones a committed transaction sent, on
every partition -- by assign and by subscribe
(:mod:`workloads.txn_subscribed`).  The planted bug: a workload that
does not rewind after an abort moves the group's offset past what the aborted transaction read,
and ``consumed-skipped`` finds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_impl import config
from broker_impl.group_records import OFFSETS_TOPIC, partition_for
from broker_impl.localcluster import LocalCluster
from checker.definitions import CONSUMED_SKIPPED, CONSUMED_TWICE, TXN_CHECKS
from checker.engine import to_pandas
from checker.txn.run import RunSettings, run_anomalies
from testbed.record.history import ops_to_table, read_history
from testbed.record.ops import Op
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from tests.workloads.txn_history import txn_pairs, workload_problems
from tests.workloads.txn_runner import run_then_drain
from workloads.clients import make_consumer
from workloads.queue import QueueSpec
from workloads.txn_input import GroupInput, ctp_group

pytestmark = pytest.mark.timeout(300)

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
PARTITIONS = 3
OFFSETS_PARTITIONS: int = config.parse_properties("", "default", config.BROKER_KEYS)[
    "offsets.topic.num.partitions"
]
"""The brokers' default (``SETTINGS`` keeps it): where the group's coordinator is found."""
PROCESSED, ABORTED = 40, 10
"""What the main phase waits for: committed and aborted transactions that read input."""


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:  # noqa: F811 -- the fixture imported above
    return start_cluster(3, SETTINGS)


class Processing:
    """Counts completed transactions that read input (a recorder listener), by type."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {"ok": 0, "fail": 0, "info": 0, "error": 0}
        self._changed = threading.Condition()

    def __call__(self, op: Op) -> None:
        if op.f != "txn" or op.type == "invoke" or not op.value:
            return
        if not any(m["f"] == "poll" and m.get("records") for m in op.value):
            return
        with self._changed:
            self.counts[op.type] += 1
            self.counts["error"] += op.type != "ok" and op.error != "abort"
            self._changed.notify_all()

    def wait_for(self, timeout: float, **wanted: int) -> bool:
        with self._changed:
            start = dict(self.counts)
            return self._changed.wait_for(
                lambda: all(self.counts[k] >= start[k] + n for k, n in wanted.items()), timeout
            )


Faults = Callable[[LocalCluster, str, Processing], None]


def pause_then_kill(cluster: LocalCluster, topic: str, processing: Processing) -> None:
    """Pause the leader of partition 0 until a transaction ends by an error (or 20 s), resume it;
    once transactions commit again, kill another broker likewise and start it again."""
    for act, undo in ((cluster.pause, cluster.resume), (cluster.kill, cluster.start)):
        assert processing.wait_for(60, ok=10), f"no commits: {processing.counts}"
        node = str(cluster.partition_state(topic, 0)["leader"])
        act(node)
        try:
            processing.wait_for(20, error=1)
        finally:
            undo(node)


def run_ctp(
    cluster: LocalCluster, client: str, history: Path, faults: Faults | None = None, via: str = "assign"
) -> str:
    """The ctp workload until enough input was processed and aborted (``faults`` done), then the
    drain; the topic."""
    topic = f"ctp-{client}-{history.parent.name}"
    cluster.create_topic(topic, PARTITIONS, 3)
    cluster.wait_for_leaders(topic)
    spec = QueueSpec(
        partitions=PARTITIONS,
        producers=PARTITIONS,
        consumers=1,
        rate=60,
        client=client,
        txn=True,
        txn_ctp=True,
        txn_ctp_via=via,
        abort_p=0.3,
        request_timeout=3.0,
    )
    processing = Processing()

    def main_phase() -> None:
        if faults is not None:
            faults(cluster, topic, processing)
        assert processing.wait_for(90, ok=PROCESSED, fail=ABORTED), f"not far enough: {processing.counts}"

    run_then_drain(cluster, spec, topic, history, processing, main_phase)
    return topic


def offset_anomalies(history: Path) -> dict[str, int]:
    """The totals of the exactly-once checks over the history (every partition's drain complete)."""
    ops, _ = read_history(history)
    rows = to_pandas(ops_to_table(ops, run_id=1))
    settings = RunSettings(True, frozenset(range(PARTITIONS)))
    answer = run_anomalies(rows, settings, frozenset(TXN_CHECKS), 3)
    totals = answer.groupby("kind")["total"].first().to_dict()
    return {kind: int(total) for kind, total in totals.items() if kind in (CONSUMED_TWICE, CONSUMED_SKIPPED)}


def last_sent(history: Path) -> dict[int, int]:
    """Per partition, the offset the last committed transaction sent for the group."""
    sent: dict[int, int] = {}
    for _, completion in txn_pairs(history):
        if completion.type != "ok":
            continue
        for micro in completion.value:
            if micro["f"] == "send-offsets":
                for entry in micro["offsets"]:
                    sent[entry["partition"]] = max(sent.get(entry["partition"], 0), entry["offset"])
    return sent


def committed_at_the_brokers(cluster: LocalCluster, client: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, once the brokers answer: a ``read_committed`` fetch waits
    while a transaction's offsets are pending (KIP-447), and a transaction of a producer dropped by
    the faults that held only offsets ends by the coordinator's timeout (10 s here) -- the drain's
    wait for open transactions looks at the topic's partitions, not at the group's."""
    consumer: Any = make_consumer(client, cluster.bootstrap(), "read_committed", ctp_group(topic))
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                committed: dict[int, int] = consumer.committed(topic, list(range(PARTITIONS)), 10.0)
                return committed
            except Exception as error:
                if time.monotonic() >= deadline:
                    # Seen 2 of 3 runs before the fix of a marker landing while the new coordinator
                    # loaded (test_group_coordinator's race test pins it): pending for good.
                    raise AssertionError(
                        f"the group's committed offsets never became readable: {error}\n"
                        + coordinator_evidence(cluster, ctp_group(topic))
                    ) from error
    finally:
        consumer.close()


def coordinator_evidence(cluster: LocalCluster, group: str) -> str:
    """What a failure needs to be diagnosed from CI's output alone: the group's
    ``__consumer_offsets`` partition as the controller sees it, and the last lines every broker
    logged about that partition and about transaction markers."""
    index = partition_for(group, OFFSETS_PARTITIONS)
    lines = [f"{OFFSETS_TOPIC}-{index}: {cluster.partition_state(OFFSETS_TOPIC, index)}"]
    wanted = (f"{OFFSETS_TOPIC}-{index}:", "txn_markers", "txn_coordinator", "Traceback", "Error")
    for log in sorted(cluster.directory.glob("broker-*/process.log")):
        found = [
            line for line in log.read_text(errors="replace").splitlines() if any(w in line for w in wanted)
        ]
        lines += [f"-- {log.parent.name}: last {min(len(found), 25)} of {len(found)} lines", *found[-25:]]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("client", "via", "faults"),
    [
        ("confluent-kafka", "assign", pause_then_kill),
        ("confluent-kafka", "subscribe", pause_then_kill),
        ("kafka-python", "assign", None),  # its send_offsets; its fault handling: test_txn_workload_cluster
    ],
    ids=["confluent-kafka-assign", "confluent-kafka-subscribe", "kafka-python-assign"],
)
def test_every_record_is_processed_once_through_a_paused_and_a_killed_broker(
    cluster: LocalCluster, tmp_path: Path, client: str, via: str, faults: Faults | None
) -> None:
    """By assign (each thread its partitions) and by subscribe (the group's members, partitions
    moving at the rebalances of the members' joins and of the faults; KIP-447 fencing)."""
    history = tmp_path / "history.jsonl"
    topic = run_ctp(cluster, client, history, faults, via)
    pairs = txn_pairs(history)
    assert [problem for pair in pairs for problem in workload_problems(*pair)] == []
    assert offset_anomalies(history) == {}
    sent = last_sent(history)
    assert sorted(sent) == list(range(PARTITIONS)) and min(sent.values()) > 0
    assert committed_at_the_brokers(cluster, client, topic) == sent


def test_a_workload_that_does_not_rewind_after_an_abort_is_caught_skipping(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted bug: the next transaction goes on from where the aborted one stopped reading."""
    monkeypatch.setattr(GroupInput, "rewind", lambda self: None)
    history = tmp_path / "history.jsonl"
    run_ctp(cluster, "confluent-kafka", history)
    found = offset_anomalies(history)
    assert found.get(CONSUMED_SKIPPED, 0) > 0 and CONSUMED_TWICE not in found, found
