"""tansu and PostgreSQL as local processes, from the harness's own command lines: what real Kafka
clients get acknowledged is exactly what the dump reads back from PostgreSQL -- through broker
restarts, a PostgreSQL crash and, with the data directory on the lazy filesystem, a power loss
that loses acknowledged writes only when PostgreSQL runs with ``fsync=off``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.cluster.kafka_admin import create_topic
from tests.conftest import unavailable
from tests.testbed.cluster.shared_store_processes import LocalSharedStore

pytestmark = pytest.mark.third_party

TOPIC = "queue"
Acked = dict[tuple[int, int], str]
"""(partition, offset) -> value of every acknowledged send."""


@pytest.fixture
def local(tansu_binary: Path, postgres_bin_dir: Path) -> Iterator[LocalSharedStore]:
    with LocalSharedStore(tansu_binary, postgres_bin_dir, brokers=2) as cluster:
        create_topic(cluster.bootstrap.split(",")[0], TOPIC, 2, 1)
        yield cluster


def produce_kafka_python(address: str, values: range) -> Acked:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=address, acks="all", linger_ms=5, request_timeout_ms=15000)
    try:
        futures = [(str(v), producer.send(TOPIC, value=str(v).encode(), partition=v % 2)) for v in values]
        acked = {}
        for value, future in futures:
            metadata = future.get(timeout=30)
            acked[(metadata.partition, metadata.offset)] = value
        return acked
    finally:
        producer.close(timeout=10)


def produce_confluent(address: str, values: range) -> Acked:
    from confluent_kafka import Producer

    acked: Acked = {}
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            acked[(message.partition(), message.offset())] = message.value().decode()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": address, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(TOPIC, value=str(value).encode(), partition=value % 2, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages still in flight after 30 s"
    assert not errors, errors
    return acked


def dumped(cluster: LocalSharedStore) -> Acked:
    lines = [json.loads(line) for line in cluster.dump()]
    assert {(line["topic"], line["partition"]) for line in lines if line["type"] == "partition"} == {
        (TOPIC, 0),
        (TOPIC, 1),
    }
    return {(r["partition"], r["offset"]): r["value"] for r in lines if r["type"] == "record"}


def test_the_dump_holds_exactly_what_both_clients_got_acknowledged_through_both_brokers(
    local: LocalSharedStore,
) -> None:
    first, second = local.bootstrap.split(",")
    acked = produce_kafka_python(first, range(0, 200))
    acked |= produce_confluent(second, range(200, 400))
    assert len(acked) == 400, "every send was acknowledged, each at its own offset"
    assert dumped(local) == acked


def test_broker_restarts_lose_nothing_acknowledged(local: LocalSharedStore) -> None:
    first, second = local.bootstrap.split(",")
    acked = produce_kafka_python(first, range(0, 100))
    local.kill_broker(0)
    acked |= produce_kafka_python(second, range(100, 200))
    local.start_broker(0)
    local.kill_broker(1)
    acked |= produce_confluent(first, range(200, 300))
    assert len(acked) == 300
    assert dumped(local) == acked


def test_a_postgresql_crash_loses_nothing_acknowledged(local: LocalSharedStore) -> None:
    first, _ = local.bootstrap.split(",")
    acked = produce_kafka_python(first, range(0, 100))
    local.crash_postgres()
    local.start_postgres()
    acked |= produce_confluent(first, range(100, 200))  # tansu reconnects to the restarted server
    assert len(acked) == 200
    assert dumped(local) == acked


@pytest.mark.parametrize("fsync", ["on", "off"])
def test_power_loss_of_postgresql_loses_acknowledged_writes_only_with_fsync_off(
    tansu_binary: Path, postgres_bin_dir: Path, fsync: str
) -> None:
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        unavailable("the lazy filesystem needs root and /dev/fuse")
    settings = {"postgresql.fsync": fsync}
    with LocalSharedStore(tansu_binary, postgres_bin_dir, brokers=1, settings=settings, lazy=True) as cluster:
        create_topic(cluster.bootstrap, TOPIC, 2, 1)
        cluster.settle()  # as TansuCluster.wait_for_leaders does: the set-up is on disk
        acked = produce_kafka_python(cluster.bootstrap, range(0, 60))
        assert len(acked) == 60
        cluster.kill_broker(0)
        cluster.crash_postgres(power_loss=True)
        cluster.start_postgres()
        after = dumped(cluster)
    lost = {position: value for position, value in acked.items() if after.get(position) != value}
    if fsync == "on":
        assert lost == {}, f"{len(lost)} acknowledged records lost with fsync=on"
    else:
        assert len(lost) == len(acked), "fsync=off: nothing written since the set-up was synced survives"
