"""The two KIP-101 scenarios, deterministic, against real broker processes.

Each scenario runs in both truncation modes and asserts both halves: the documented
anomaly appears with ``truncation.mode=high-watermark`` (pre-0.11 Kafka) and does not
appear with ``truncation.mode=leader-epoch`` (KIP-101).  Windows are held open with
SIGSTOP and by killing processes, never by sleeping: every wait is on a condition.

Timing knobs used (and why):

* ``replica.fetch.wait.max.ms=2000`` -- a follower learns a new HW on the fetch *after*
  the one that acknowledged the data; with no further produce that response waits the
  full 2 s, so a follower killed right after an ack deterministically holds the acked
  record but an older HW (the heart of scenario 1).
* ``replica.high.watermark.checkpoint.interval.ms=100`` -- HW checkpoints follow the
  in-memory HW closely, so "what the replica recovers with" is observable in the file.
* ``broker.session.timeout.ms=6000`` -- long enough that a restarted broker registers
  before the controller fences the stopped leader, short enough for a quick test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka import KafkaProducer

from broker_impl.checkpoints import HighWatermarkCheckpoint
from broker_impl.dump import dump_partition
from broker_impl.localcluster import LocalCluster

from .conftest import ClusterFactory

TOPIC = "kip101"
LEADER = "1"  # a fresh 2-broker cluster assigns partition 0 to replicas [1, 2]
FOLLOWER = "2"

SETTINGS = {
    "replica.fetch.wait.max.ms": 2000,
    "replica.high.watermark.checkpoint.interval.ms": 100,
    "broker.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 30000,
    "min.insync.replicas": 1,
    # Pre-0.11 Kafka had no Eligible Leader Replicas: a replica restarted after a crash kept
    # its ISR membership and could be elected -- the window both scenarios need.
    "eligible.leader.replicas.enable": False,
}


def produce(cluster: LocalCluster, value: str) -> int:
    """Send one message with acks=all; return its offset (raises if not acknowledged)."""
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap(),
        acks="all",
        retries=5,
        request_timeout_ms=10000,
        max_block_ms=20000,
    )
    try:
        metadata = producer.send(TOPIC, value=value.encode(), partition=0).get(timeout=30)
        return int(metadata.offset)
    finally:
        producer.close(timeout=5)


def replica(cluster: LocalCluster, node: str) -> dict[int, str]:
    """offset -> value of partition 0 in ``node``'s data directory (offline dump)."""
    directory = Path(cluster.state["brokers"][node]["data"]) / f"{TOPIC}-0"
    return {
        line["offset"]: line["value"]
        for line in dump_partition(directory, TOPIC, 0, 0)
        if line["type"] == "record"
    }


def checkpointed_high_watermark(cluster: LocalCluster, node: str) -> int:
    return HighWatermarkCheckpoint(Path(cluster.state["brokers"][node]["data"])).read().get((TOPIC, 0), -1)


def incarnation(cluster: LocalCluster, node: str) -> str:
    return str(cluster.describe()["brokers"][node]["incarnation"])


def restart_and_wait_registered(cluster: LocalCluster, node: str) -> None:
    before = incarnation(cluster, node)
    cluster.start(node)
    cluster.wait_for(lambda: incarnation(cluster, node) != before, 20, f"broker {node} to re-register")


def wait_for_leader(cluster: LocalCluster, node: str) -> None:
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] == int(node),
        30,
        f"broker {node} to lead {TOPIC}-0",
    )
    cluster.wait_for_leaders(TOPIC)


def wait_for_full_isr(cluster: LocalCluster) -> None:
    cluster.wait_for(
        lambda: sorted(cluster.partition_state(TOPIC, 0)["isr"]) == [1, 2],
        30,
        "both replicas back in the ISR",
    )


@pytest.mark.parametrize("mode", ["high-watermark", "leader-epoch"])
def test_scenario_1_follower_restart_then_leader_crash(start_cluster: ClusterFactory, mode: str) -> None:
    """KIP-101 scenario 1: follower B holds acked m2 but checkpointed HW 1; B restarts and
    (pre-0.11) truncates m2; leader A dies before B re-fetches; B is elected; A returns
    and follows B.  m2 was acknowledged and is gone from every replica."""
    cluster = start_cluster(2, {**SETTINGS, "truncation.mode": mode})
    cluster.create_topic(TOPIC, partitions=1, replication_factor=2)

    assert produce(cluster, "m1") == 0
    cluster.wait_for(
        lambda: checkpointed_high_watermark(cluster, FOLLOWER) >= 1, 10, "follower HW checkpoint 1"
    )
    assert produce(cluster, "m2") == 1  # acked: the follower holds it (the leader's HW needed its fetch)

    # The window: freeze the leader, crash and restart the follower at once.
    cluster.pause(LEADER)
    cluster.kill(FOLLOWER)
    assert replica(cluster, FOLLOWER) == {0: "m1", 1: "m2"}, "the follower must hold the acked m2"
    assert checkpointed_high_watermark(cluster, FOLLOWER) == 1, "the follower's HW must lag (fetch wait 2 s)"
    restart_and_wait_registered(cluster, FOLLOWER)

    # The controller fences the frozen leader and elects the follower (it is in the ISR).
    wait_for_leader(cluster, FOLLOWER)
    cluster.kill(LEADER)
    restart_and_wait_registered(cluster, LEADER)
    wait_for_full_isr(cluster)
    cluster.wait_for(
        lambda: replica(cluster, LEADER) == replica(cluster, FOLLOWER), 20, "replicas to converge"
    )

    final = replica(cluster, FOLLOWER)
    if mode == "high-watermark":
        assert final == {0: "m1"}, "pre-0.11 truncation must lose the acknowledged m2"
    else:
        assert final == {0: "m1", 1: "m2"}, "KIP-101 truncation must keep the acknowledged m2"
    assert replica(cluster, LEADER) == final


@pytest.mark.parametrize("mode", ["high-watermark", "leader-epoch"])
def test_scenario_2_power_loss_of_both_then_shorter_log_elected(
    start_cluster: ClusterFactory, mode: str
) -> None:
    """KIP-101 scenario 2: leader A and follower B crash together; B loses its un-flushed
    m2 (we cut its segment as the page cache would be lost); B returns first, is elected
    and writes m3 at offset 1; A returns with m2 at offset 1 and HW 2.  Pre-0.11, A keeps
    m2: the replicas diverge forever.  With leader epochs A truncates to B's epoch end."""
    cluster = start_cluster(2, {**SETTINGS, "truncation.mode": mode})
    cluster.create_topic(TOPIC, partitions=1, replication_factor=2)

    assert produce(cluster, "m1") == 0
    cluster.wait_for(lambda: replica(cluster, FOLLOWER) == {0: "m1"}, 10, "follower to hold m1")
    segment = Path(cluster.state["brokers"][FOLLOWER]["data"]) / f"{TOPIC}-0" / f"{0:020d}.log"
    flushed_size = segment.stat().st_size
    assert produce(cluster, "m2") == 1
    cluster.wait_for(lambda: checkpointed_high_watermark(cluster, LEADER) == 2, 10, "leader HW checkpoint 2")
    # B knows m1 is committed (HW 1, learned with the fetch that brought m2): as in the
    # KIP, its own HW is not what loses m1 -- only the power loss takes m2.
    cluster.wait_for(
        lambda: checkpointed_high_watermark(cluster, FOLLOWER) >= 1, 10, "follower HW checkpoint 1"
    )

    cluster.kill(LEADER)
    cluster.kill(FOLLOWER)
    os.truncate(segment, flushed_size)  # B's power loss: its un-flushed tail (m2) is gone
    assert replica(cluster, FOLLOWER) == {0: "m1"}

    restart_and_wait_registered(cluster, FOLLOWER)
    wait_for_leader(cluster, FOLLOWER)  # A's session expires; B (in the ISR) is elected
    assert produce(cluster, "m3") == 1  # the new leader writes m3 at offset 1

    restart_and_wait_registered(cluster, LEADER)
    wait_for_full_isr(cluster)
    leader_log, follower_log = replica(cluster, LEADER), replica(cluster, FOLLOWER)
    assert follower_log == {0: "m1", 1: "m3"}
    if mode == "high-watermark":
        assert leader_log == {0: "m1", 1: "m2"}, "pre-0.11: A keeps m2 at offset 1 -- divergence"
    else:
        assert leader_log == follower_log, "KIP-101: A truncates m2 and fetches m3 -- no divergence"
