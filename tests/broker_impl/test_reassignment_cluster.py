"""Partition reassignment and preferred-leader election on a real local cluster, driven by a real
client: kafka-python's ``KafkaAdminClient`` (AlterPartitionReassignments, ListPartitionReassignments
and ElectLeaders reach a broker, which forwards them to the controller, as KRaft brokers do).

Records are produced with ``acks=all`` while a partition moves from brokers [1, 2, 3] to
[4, 2, 3] -- the new broker first, so it becomes the leader once the move completes -- and the test
asserts what Kafka promises: the new replica holds every acknowledged record, the removed one's
replica is gone from its disk, and a consumer reads every acknowledged record back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from tests.local_cluster import ClusterFactory

from .client_support import dump_replica, read_partition

TOPIC = "moving"

pytestmark = pytest.mark.timeout(240)


class Producing:
    """A kafka-python producer (acks=all) sending numbered values until stopped; the acked values."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", retries=20, request_timeout_ms=10000
        )
        self.acked: list[str] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            value = f"v{number}"
            try:
                self.producer.send(TOPIC, value.encode(), partition=0).get(timeout=15)
                self.acked.append(value)
            except Exception:  # a failed send is simply not acknowledged
                self.failed += 1
            number += 1

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.producer.close(timeout=5)


@pytest.fixture
def admin_of() -> Iterator[list[KafkaAdminClient]]:
    opened: list[KafkaAdminClient] = []
    yield opened
    for client in opened:
        client.close()


def test_a_partition_moves_under_load_and_the_new_replica_holds_every_acked_record(
    start_cluster: ClusterFactory, admin_of: list[KafkaAdminClient]
) -> None:
    cluster = start_cluster(4, {"min.insync.replicas": 2})
    cluster.create_topic(TOPIC, 1, 3)
    assert cluster.partition_state(TOPIC, 0)["replicas"] == [1, 2, 3]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=10000)
    admin_of.append(admin)
    partition = TopicPartition(TOPIC, 0)
    with Producing(cluster.bootstrap()) as producing:
        cluster.wait_for(lambda: len(producing.acked) >= 50, 30, "50 acknowledged records before the move")
        assert admin.alter_partition_reassignments({partition: [4, 2, 3]}) == {partition: None}

        def completed() -> bool:
            state = cluster.partition_state(TOPIC, 0)
            return bool(state["replicas"] == [4, 2, 3] and not admin.list_partition_reassignments())

        cluster.wait_for(completed, 60, "the reassignment to [4, 2, 3] to complete")
        moved = len(producing.acked)
        cluster.wait_for(
            lambda: len(producing.acked) >= moved + 50, 30, "50 more acknowledged records after it"
        )
    state = cluster.partition_state(TOPIC, 0)
    assert (state["leader"], sorted(state["isr"])) == (4, [2, 3, 4])
    acked = set(producing.acked)
    read = [value.decode() for _offset, value in read_partition(cluster.bootstrap(), TOPIC)]
    assert acked <= set(read), sorted(acked - set(read))[:10]
    new_replica = {
        value for _offset, value in dump_replica(cluster.state["brokers"]["4"]["data"], TOPIC).records
    }
    assert acked <= new_replica, sorted(acked - new_replica)[:10]
    removed = Path(cluster.state["brokers"]["1"]["data"]) / f"{TOPIC}-0"
    cluster.wait_for(lambda: not removed.exists(), 10, "broker 1 to delete its replica")


def test_a_preferred_election_through_a_real_admin_client(
    start_cluster: ClusterFactory, admin_of: list[KafkaAdminClient]
) -> None:
    cluster = start_cluster(3)
    cluster.create_topic(TOPIC, 1, 3)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=10000)
    admin_of.append(admin)
    partition = TopicPartition(TOPIC, 0)
    assert admin.alter_partition_reassignments({partition: [2, 1, 3]}) == {partition: None}
    assert cluster.partition_state(TOPIC, 0)["leader"] == 1  # a reordering moves no leadership
    admin.elect_leaders(0, {TOPIC: [0]})
    cluster.wait_for(lambda: cluster.partition_state(TOPIC, 0)["leader"] == 2, 10, "broker 2 to lead")
    cluster.wait_for_leaders(TOPIC)  # and the brokers follow it
