"""A transactional id expires (``transactional.id.expiration.ms``, the Dead state) under a real
client that still holds it: confluent-kafka's producer commits, idles past the expiration, and its
next transaction meets a coordinator that no longer knows its producer id.

What Kafka's rules give, and this pins: the expiry is a tombstone (``txn-state`` ``Dead`` in the
broker's event log); the idle producer's next transaction fails with INVALID_PRODUCER_ID_MAPPING,
which a KIP-360 client (librdkafka) treats as abortable -- it aborts, asks InitProducerId again and
gets a *new* producer id at epoch 0 -- and nothing of the failed transaction is ever read
read_committed, while the transactions before and after it are read exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from broker_impl.localcluster import LocalCluster

from .test_txn_clients import read_all

pytestmark = pytest.mark.timeout(120)

SETTINGS = {
    "transactional.id.expiration.ms": "2000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "min.insync.replicas": "1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    started = LocalCluster(tmp_path / "cluster")
    try:
        started.up(1, SETTINGS)
        yield started
    finally:
        started.down()


def dead_ids(cluster: LocalCluster) -> set[str]:
    events = cluster.events_path("1").read_text(encoding="utf-8").splitlines()
    return {
        event["transactional_id"]
        for event in map(json.loads, events)
        if event.get("kind") == "txn-state" and event.get("state") == "Dead"
    }


def test_an_idle_producer_whose_id_expired_aborts_and_starts_over_with_a_new_producer_id(
    cluster: LocalCluster,
) -> None:
    topic = "expiring"
    cluster.create_topic(topic, 1, 1)
    client = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": "idle-tx"})
    client.init_transactions(30)
    client.begin_transaction()
    client.produce(topic, value=b"before", partition=0)
    client.commit_transaction(30)

    cluster.wait_for(lambda: "idle-tx" in dead_ids(cluster), 20, "the idle transactional id to expire")

    client.begin_transaction()
    client.produce(topic, value=b"lost-mapping", partition=0)
    with pytest.raises(KafkaException) as failed:
        client.commit_transaction(30)
    error = failed.value.args[0]
    assert error.txn_requires_abort() and not error.fatal(), error
    client.abort_transaction(30)
    client.begin_transaction()
    client.produce(topic, value=b"after", partition=0)
    client.commit_transaction(30)

    assert read_all(cluster, topic, 1, "read_committed", 2) == ["after", "before"]
