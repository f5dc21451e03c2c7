"""The controller with real broker processes: liveness, elections, epochs, min ISR, timeouts.

Each test starts its own local cluster (always torn down by the ``start_cluster`` fixture),
injects a real fault -- SIGSTOP, SIGKILL, restart -- and waits on the condition it
expects, read from the controller's metadata and from real clients (kafka-python and
confluent-kafka), never on a fixed sleep.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer
from kafka.errors import NotEnoughReplicasError

from broker_impl.localcluster import LocalCluster

from .client_support import (
    bootstrap_of,
    produce_all,
    read_partition,
    wait_for_full_isr,
    wait_for_identical_dumps,
)

TOPIC = "events"

pytestmark = pytest.mark.timeout(240)


def metadata_file(cluster: LocalCluster) -> dict[str, Any]:
    path = Path(cluster.state["controller"]["dir"]) / "metadata" / "metadata.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def fenced(cluster: LocalCluster, node: str) -> bool:
    return bool(cluster.describe()["brokers"][node]["fenced"])


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{number}".encode() for number in range(count)]


# ---- liveness and elections ------------------------------------------------------------------


def test_session_expiry_fences_a_paused_leader_and_moves_leadership(
    start_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = start_cluster(brokers=3, settings={"replica.lag.time.max.ms": 3000})
    cluster.create_topic(TOPIC, 1, 3)
    produce_all(cluster.bootstrap(), TOPIC, values("before", 10))
    before = cluster.partition_state(TOPIC, 0)
    old_leader = str(before["leader"])

    cluster.pause(old_leader)
    try:
        cluster.wait_for(lambda: fenced(cluster, old_leader), 20, f"broker {old_leader} to be fenced")
        after = cluster.partition_state(TOPIC, 0)
        assert after["leader"] not in (before["leader"], -1)
        assert after["leader_epoch"] == before["leader_epoch"] + 1
        assert before["leader"] not in after["isr"]
        assert metadata_file(cluster)["topics"][TOPIC]["partitions"][0] == after  # persisted before announced
        # The cluster takes acks=all writes while the old leader is frozen.
        others = bootstrap_of(cluster, *(node for node in cluster.state["brokers"] if node != old_leader))
        assert produce_all(others, TOPIC, values("during", 10)) == list(range(10, 20))
    finally:
        cluster.resume(old_leader)

    cluster.wait_for(lambda: not fenced(cluster, old_leader), 20, f"broker {old_leader} to heartbeat again")
    wait_for_full_isr(cluster, TOPIC)
    assert str(cluster.partition_state(TOPIC, 0)["leader"]) != old_leader  # no flapping back
    log = read_partition(cluster.bootstrap(), TOPIC)
    assert [value for _, value in log] == values("before", 10) + values("during", 10)
    dumps = wait_for_identical_dumps(cluster, TOPIC)
    assert len({tuple(replica.records) for replica in dumps.values()}) == 1


def test_controller_restart_keeps_epochs_and_never_reuses_one(
    start_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = start_cluster(brokers=3)
    cluster.create_topic(TOPIC, 2, 3)
    before = cluster.describe()["topics"][TOPIC]
    cluster.kill("controller")
    cluster.start("controller")
    cluster.wait_ready()
    assert cluster.describe()["topics"][TOPIC] == before
    leader = str(before["partitions"][0]["leader"])
    cluster.kill(leader)
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] not in (int(leader), -1),
        20,
        "a new leader after the old one was killed",
    )
    assert cluster.partition_state(TOPIC, 0)["leader_epoch"] == before["partitions"][0]["leader_epoch"] + 1


# ---- unclean leader election ------------------------------------------------------------------


def checkpointed_high_watermark(cluster: LocalCluster, node: str) -> int:
    path = Path(cluster.state["brokers"][node]["data"]) / "replication-offset-checkpoint"
    lines = path.read_text().splitlines() if path.exists() else []
    return next((int(line.split()[2]) for line in lines[2:] if line.split()[:2] == [TOPIC, "0"]), -1)


def lose_the_only_in_sync_replica(cluster: LocalCluster) -> tuple[str, str]:
    """RF=2: kill the follower (it leaves the ISR), commit 'old' writes on the leader alone,
    wait until the leader checkpointed that HW, then kill the leader too.  Returns
    (old leader, old follower)."""
    cluster.create_topic(TOPIC, 1, 2)
    state = cluster.partition_state(TOPIC, 0)
    leader, follower = str(state["leader"]), str(next(r for r in state["replicas"] if r != state["leader"]))
    cluster.kill(follower)
    cluster.wait_for(
        lambda: fenced(cluster, follower) and cluster.partition_state(TOPIC, 0)["isr"] == [int(leader)],
        20,
        f"broker {follower} fenced and the ISR shrunk to [{leader}]",
    )
    assert produce_all(bootstrap_of(cluster, leader), TOPIC, values("old", 5), one_batch_each=True) == list(
        range(5)
    )
    cluster.wait_for(
        lambda: checkpointed_high_watermark(cluster, leader) == 5, 20, "the leader's HW checkpoint"
    )
    cluster.kill(leader)
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] == -1, 20, "the partition to go offline"
    )
    return leader, follower


@pytest.mark.parametrize("mode", ["leader-epoch", "high-watermark"])
def test_unclean_election_loses_acked_writes_and_leader_epochs_keep_replicas_identical(
    start_cluster: Callable[..., LocalCluster], mode: str
) -> None:
    """The out-of-ISR follower (empty log) is elected when enabled: the 'old' acked writes
    are lost -- the documented price of unclean election, in both modes.  When the old
    leader returns, leader-epoch truncation (KIP-101/279) makes it drop its old records
    (the new leader's first epoch starts at offset 0); high-watermark truncation keeps
    records below its HW and the replicas diverge at the same offsets."""
    cluster = start_cluster(
        brokers=2,
        settings={
            "unclean.leader.election.enable": True,
            "truncation.mode": mode,
            "replica.lag.time.max.ms": 2000,
            "replica.high.watermark.checkpoint.interval.ms": 100,
        },
    )
    old_leader, old_follower = lose_the_only_in_sync_replica(cluster)
    epoch_offline = cluster.partition_state(TOPIC, 0)["leader_epoch"]

    cluster.start(old_follower)
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] == int(old_follower),
        20,
        "the unclean election of the out-of-sync replica",
    )
    state = cluster.partition_state(TOPIC, 0)
    assert state["isr"] == [int(old_follower)]
    assert state["leader_epoch"] > epoch_offline
    new_leader_only = bootstrap_of(cluster, old_follower)
    assert produce_all(new_leader_only, TOPIC, values("new", 3)) == [0, 1, 2]
    assert [value for _, value in read_partition(new_leader_only, TOPIC)] == values("new", 3)

    cluster.start(old_leader)
    wait_for_full_isr(cluster, TOPIC)
    dumps = wait_for_identical_dumps(cluster, TOPIC, timeout=10)
    new_records = [(offset, f"new-{offset}") for offset in range(3)]
    assert dumps[old_follower].records == new_records
    if mode == "leader-epoch":
        assert dumps[old_leader].records == new_records
    else:
        # Truncated to the new leader's end, it keeps its own records below it: the same
        # offsets hold different records on the two replicas, for good.
        assert dumps[old_leader].records == [(offset, f"old-{offset}") for offset in range(3)]


def test_without_unclean_election_the_partition_waits_for_its_in_sync_replica(
    start_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = start_cluster(
        brokers=2,
        settings={"replica.lag.time.max.ms": 2000, "replica.high.watermark.checkpoint.interval.ms": 100},
    )
    old_leader, old_follower = lose_the_only_in_sync_replica(cluster)
    cluster.start(old_follower)
    # Registration runs the election synchronously, so once the broker shows as live the
    # decision has been made: offline, not unclean.
    cluster.wait_for(lambda: not fenced(cluster, old_follower), 20, f"broker {old_follower} to register")
    assert cluster.partition_state(TOPIC, 0)["leader"] == -1
    cluster.start(old_leader)
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] == int(old_leader),
        20,
        "the in-sync replica to be elected again",
    )
    wait_for_full_isr(cluster, TOPIC)
    assert [value for _, value in read_partition(cluster.bootstrap(), TOPIC)] == values("old", 5)


# ---- min.insync.replicas and acks=all timeouts ----------------------------------------------------


def test_min_insync_replicas_refuses_acks_all_below_the_minimum(
    start_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = start_cluster(brokers=3, settings={"min.insync.replicas": 2, "replica.lag.time.max.ms": 2000})
    cluster.create_topic(TOPIC, 1, 2)
    assert produce_all(cluster.bootstrap(), TOPIC, [b"with-two"]) == [0]
    state = cluster.partition_state(TOPIC, 0)
    follower = str(next(r for r in state["replicas"] if r != state["leader"]))
    cluster.kill(follower)
    cluster.wait_for(
        lambda: fenced(cluster, follower) and len(cluster.partition_state(TOPIC, 0)["isr"]) == 1,
        20,
        "the follower fenced and the ISR shrunk to one",
    )
    live = bootstrap_of(cluster, *(node for node in cluster.state["brokers"] if node != follower))

    producer = KafkaProducer(
        bootstrap_servers=live, acks="all", retries=0, enable_idempotence=False, request_timeout_ms=10000
    )
    try:
        with pytest.raises(NotEnoughReplicasError):
            producer.send(TOPIC, b"refused").get(timeout=30)
    finally:
        producer.close(timeout=5)
    # min.insync.replicas guards acks=all only.
    assert produce_all(live, TOPIC, [b"acks-one"], acks=1) == [1]

    cluster.start(follower)
    wait_for_full_isr(cluster, TOPIC)
    assert produce_all(cluster.bootstrap(), TOPIC, [b"with-two-again"]) == [2]
    assert [value for _, value in read_partition(cluster.bootstrap(), TOPIC)] == [
        b"with-two",
        b"acks-one",
        b"with-two-again",
    ]


def test_acks_all_times_out_while_a_follower_is_frozen(start_cluster: Callable[..., LocalCluster]) -> None:
    """A paused follower stays in the ISR (lag and session limits are long), so acks=all
    cannot complete; the leader answers REQUEST_TIMED_OUT after the request's own timeout.
    The write was appended all the same: a timeout is an unknown outcome, and the value
    is committed once the follower resumes."""
    cluster = start_cluster(
        brokers=2, settings={"replica.lag.time.max.ms": 30000, "broker.session.timeout.ms": 30000}
    )
    cluster.create_topic(TOPIC, 1, 2)
    state = cluster.partition_state(TOPIC, 0)
    follower = str(next(r for r in state["replicas"] if r != state["leader"]))
    reports: list[Any] = []
    producer = ConfluentProducer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "acks": "all",
            "request.timeout.ms": 500,
            "socket.timeout.ms": 20000,
            "message.send.max.retries": 0,
            "enable.idempotence": False,
        }
    )
    try:
        producer.produce(TOPIC, b"warm-up", on_delivery=lambda error, message: reports.append(error))
        assert producer.flush(20) == 0 and reports == [None]
        cluster.pause(follower)
        try:
            producer.produce(
                TOPIC, b"unknown-outcome", on_delivery=lambda error, message: reports.append(error)
            )
            assert producer.flush(20) == 0
        finally:
            cluster.resume(follower)
    finally:
        producer.flush(5)
    assert reports[1] is not None and reports[1].code() == KafkaError.REQUEST_TIMED_OUT
    assert cluster.partition_state(TOPIC, 0)["isr"] == state["isr"]  # the ISR never shrank
    cluster.wait_for(
        lambda: (
            [value for _, value in read_partition(cluster.bootstrap(), TOPIC)]
            == [b"warm-up", b"unknown-outcome"]
        ),
        20,
        "the timed-out write to be committed",
    )
