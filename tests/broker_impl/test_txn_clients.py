"""Transactions with real clients against real broker processes (a local three-broker cluster).

* confluent-kafka (librdkafka) transactional producer: ``init_transactions`` finds its coordinator
  (FindCoordinator key type 1, creating ``__transaction_state``), commits one transaction, aborts
  one, commits another, over two partitions; a read_committed consumer sees exactly the committed
  values, a read_uncommitted one the aborted ones too.
* A second producer with the same ``transactional.id`` fences the first: the first's commit fails
  fatally, and its open transaction is aborted by the coordinator (never seen read_committed).
* While a transaction is open, a read_committed consumer stops at its first offset (the LSO) and
  ListOffsets read_committed answers that LSO; after the commit both move past it.
* kafka-python's transactional producer commits and aborts against the same brokers.
* Read-process-write: offsets sent to a transaction (AddOffsetsToTxn, TxnOffsetCommit) become the
  group's committed offsets when it commits, and not when it aborts.
* The coordinator broker is killed between a transaction's produce and its commit: the client
  finds the new coordinator, which loaded ``__transaction_state``, and the commit is exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from broker_impl import wire
from broker_impl.localcluster import LocalCluster, _call
from broker_impl.txn_records import TRANSACTION_STATE_TOPIC, transaction_partition

pytestmark = pytest.mark.timeout(300)

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = LocalCluster(Path(tmp_path_factory.mktemp("txn-clients")) / "cluster")
    try:
        started.up(3, SETTINGS)
        yield started
    finally:
        started.down()


def topic_of(cluster: LocalCluster, name: str, partitions: int = 2) -> str:
    cluster.create_topic(name, partitions, 3)
    cluster.wait_for_leaders(name)
    return name


def producer(cluster: LocalCluster, transactional_id: str, **config: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 20000,
            **config,
        }
    )


def read_all(cluster: LocalCluster, topic: str, partitions: int, isolation: str, expected: int) -> list[str]:
    """Every value a fresh consumer of ``isolation`` reads from the start (polls until
    ``expected`` arrived, then once more so that extra values would show)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": f"reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    got: list[str] = []
    deadline = time.monotonic() + 30
    quiet_until = 0.0
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is None or message.error():
                if len(got) >= expected and time.monotonic() > quiet_until:
                    break
                continue
            value = message.value()
            got.append(value.decode() if value is not None else "")
            quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()
    return sorted(got)


def test_confluent_commit_and_abort_seen_per_isolation_level(cluster: LocalCluster) -> None:
    topic = topic_of(cluster, "txn-basic")
    client = producer(cluster, "txn-basic-producer")
    client.init_transactions(30)
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        client.begin_transaction()
        for number in range(6):
            client.produce(topic, value=f"{prefix}{number}".encode(), partition=number % 2)
        if commit:
            client.commit_transaction(30)
        else:
            client.flush(30)
            client.abort_transaction(30)
    committed = sorted(f"{prefix}{number}" for prefix in "cd" for number in range(6))
    assert read_all(cluster, topic, 2, "read_committed", 12) == committed
    aborted = [f"a{number}" for number in range(6)]
    assert read_all(cluster, topic, 2, "read_uncommitted", 18) == sorted(committed + aborted)


def test_a_newer_producer_fences_the_older_and_aborts_its_transaction(cluster: LocalCluster) -> None:
    topic = topic_of(cluster, "txn-fence")
    older = producer(cluster, "txn-fence-producer")
    older.init_transactions(30)
    older.begin_transaction()
    older.produce(topic, value=b"zombie", partition=0)
    older.flush(30)
    newer = producer(cluster, "txn-fence-producer")
    newer.init_transactions(60)  # bumps the epoch after aborting the open transaction
    newer.begin_transaction()
    newer.produce(topic, value=b"fresh", partition=0)
    newer.commit_transaction(30)
    with pytest.raises(KafkaException):
        older.produce(topic, value=b"late", partition=0)
        older.commit_transaction(10)
    assert read_all(cluster, topic, 2, "read_committed", 1) == ["fresh"]
    assert "zombie" in read_all(cluster, topic, 2, "read_uncommitted", 2)


def list_offset(cluster: LocalCluster, topic: str, isolation: int) -> int:
    """ListOffsets v4 LATEST of partition 0 at its leader, with ``isolation``."""
    leader = cluster.partition_state(topic, 0)["leader"]
    address = cluster.summary()["brokers"][str(leader)]["address"]
    api = wire.APIS[2]
    topic_class = wire.nested(api.request, "ListOffsetsTopic")
    partition_class = wire.nested(topic_class, "ListOffsetsPartition")
    request = api.request(
        version=4,
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            topic_class(
                name=topic,
                partitions=[partition_class(partition_index=0, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    )
    response = _call(address, 2, 4, request)
    return int(response.topics[0].partitions[0].offset)


def test_an_open_transaction_holds_the_last_stable_offset(cluster: LocalCluster) -> None:
    topic = topic_of(cluster, "txn-lso", partitions=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap()})
    plain.produce(topic, value=b"before")
    plain.flush(30)
    client = producer(cluster, "txn-lso-producer")
    client.init_transactions(30)
    client.begin_transaction()
    client.produce(topic, value=b"inside")
    client.flush(30)
    plain.produce(topic, value=b"beside")  # after the open transaction: held back by it
    plain.flush(30)
    assert list_offset(cluster, topic, 0) == 3  # the HW
    assert list_offset(cluster, topic, 1) == 1  # the LSO: the open transaction's first offset
    assert read_all(cluster, topic, 1, "read_committed", 1) == ["before"]
    client.commit_transaction(30)
    # EndTxn is answered once the commit is prepared; the markers follow (as in Kafka).
    cluster.wait_for(lambda: list_offset(cluster, topic, 1) == 4, 10, "the LSO past the commit marker")
    assert read_all(cluster, topic, 1, "read_committed", 3) == ["before", "beside", "inside"]


def test_kafka_python_transactional_producer(cluster: LocalCluster) -> None:
    topic = topic_of(cluster, "txn-kafka-python")
    client = KafkaProducer(
        bootstrap_servers=cluster.bootstrap(), transactional_id="txn-kafka-python-producer"
    )
    try:
        client.init_transactions()
        client.begin_transaction()
        for number in range(4):
            client.send(topic, value=f"kc{number}".encode(), partition=number % 2)
        client.commit_transaction()
        client.begin_transaction()
        for number in range(4):
            client.send(topic, value=f"ka{number}".encode(), partition=number % 2)
        client.flush()
        client.abort_transaction()
    finally:
        client.close()
    assert read_all(cluster, topic, 2, "read_committed", 4) == [f"kc{number}" for number in range(4)]
    assert len(read_all(cluster, topic, 2, "read_uncommitted", 8)) == 8


def test_offsets_sent_to_a_transaction_count_only_when_it_commits(cluster: LocalCluster) -> None:
    """Read-process-write: a consumer group's offsets go through TxnOffsetCommit to the group
    coordinator; an aborted transaction leaves the committed offsets where they were."""
    source = topic_of(cluster, "txn-offsets-in", partitions=1)
    sink = topic_of(cluster, "txn-offsets-out", partitions=1)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap()})
    for number in range(10):
        feeder.produce(source, value=f"in{number}".encode())
    feeder.flush(30)
    group = "txn-offsets-group"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    client = producer(cluster, "txn-offsets-producer")
    client.init_transactions(30)
    try:
        for commit, wanted in ((True, 4), (False, 3)):
            taken: list[Any] = []
            deadline = time.monotonic() + 30
            while len(taken) < wanted and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    taken.append(message)
            assert len(taken) == wanted
            client.begin_transaction()
            for message in taken:
                client.produce(sink, value=message.value().upper())
            client.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            if commit:
                client.commit_transaction(30)
            else:
                client.abort_transaction(30)
        committed = consumer.committed([TopicPartition(source, 0)], 30)
    finally:
        consumer.close()
    assert committed[0].offset == 4  # the first transaction's, not the aborted one's 7
    assert read_all(cluster, sink, 1, "read_committed", 4) == sorted(f"IN{number}" for number in range(4))


def coordinator_of(cluster: LocalCluster, transactional_id: str) -> str:
    partitions = cluster.describe()["topics"][TRANSACTION_STATE_TOPIC]["partitions"]
    return str(partitions[transaction_partition(transactional_id, len(partitions))]["leader"])


def test_a_new_coordinator_loads_the_transaction_and_commits_it(cluster: LocalCluster) -> None:
    """Runs last in the module: it kills a broker and starts it again."""
    topic = topic_of(cluster, "txn-failover")
    transactional_id = "txn-failover-producer"
    client = producer(cluster, transactional_id, **{"transaction.timeout.ms": 60000})
    client.init_transactions(30)
    client.begin_transaction()
    for number in range(6):
        client.produce(topic, value=f"f{number}".encode(), partition=number % 2)
    client.flush(30)
    old = coordinator_of(cluster, transactional_id)
    cluster.kill(old)
    try:
        cluster.wait_for(
            lambda: coordinator_of(cluster, transactional_id) not in (old, "-1"), 30, "a new coordinator"
        )
        client.commit_transaction(60)
    finally:
        cluster.start(old)
    assert read_all(cluster, topic, 2, "read_committed", 6) == [f"f{number}" for number in range(6)]
