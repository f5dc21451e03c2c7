"""Real Kafka clients and replica dumps for the broker's process-level tests.

Everything here talks to running broker processes the way users do: kafka-python and
confluent-kafka over TCP, and the offline dump tool over the data directories.  Reads go
through ``assign`` + seek to the beginning + poll until the end offset, so a test reads
exactly the committed log, not whatever a consumer group happens to have.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from broker_impl import dump
from broker_impl.localcluster import LocalCluster


@dataclasses.dataclass(frozen=True)
class ReplicaDump:
    records: list[tuple[int, str | None]]  # (offset, value) in log order
    summary: dict[str, Any]  # the dump's partition line: HW, LEO, epochs, torn bytes


def read_partition(
    bootstrap: str, topic: str, partition: int = 0, timeout: float = 60.0
) -> list[tuple[int, bytes]]:
    """Every committed record of one partition, (offset, value), read with a fresh consumer."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=10000,
        consumer_timeout_ms=1000,
    )
    try:
        target = TopicPartition(topic, partition)
        consumer.assign([target])
        consumer.seek_to_beginning(target)
        end = consumer.end_offsets([target], timeout_ms=int(timeout * 1000))[target]
        found: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while consumer.position(target) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(found)} records of {topic}-{partition}, end offset {end}")
            for batch in consumer.poll(timeout_ms=500).values():
                found.extend((record.offset, record.value) for record in batch)
        return found
    finally:
        consumer.close()


def subscribe_knowing_the_topic(
    consumer: KafkaConsumer, topic: str, timeout: float = 30.0, listener: Any = None
) -> None:
    """Subscribe ``consumer`` to ``topic`` only once its own metadata lists the topic's partitions.

    kafka-python joins a group without waiting for the metadata of a plain (non-pattern)
    subscription; a group leader whose first metadata had not arrived yet assigns nothing ("No
    partition metadata for topic"), and a metadata answer that lands while that JoinGroup is in
    flight is not noticed (the race of KAFKA-3949) -- the member then sits without partitions until
    its metadata ages out (5 minutes).  Two CI runs lost 60 s waits that way under load
    (2026-12-01).  Fetching the topic's metadata first (``partitions_for_topic`` blocks on it)
    makes the first assignment the real one.  ``listener``: a ``ConsumerRebalanceListener``."""
    deadline = time.monotonic() + timeout
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"the consumer's metadata never listed {topic} in {timeout} s"
        time.sleep(0.1)  # polling a condition, bounded by the deadline
    consumer.subscribe([topic], listener=listener)


def produce_all(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes],
    timeout: float = 60.0,
    one_batch_each: bool = False,
    **config: Any,
) -> list[int]:
    """Send with kafka-python (acks=all unless overridden) and return the acked offsets.

    ``one_batch_each`` waits for each ack before the next send, so every value is its own
    record batch -- for tests whose outcome depends on where batch boundaries fall.
    """
    settings = {"acks": "all", "request_timeout_ms": 10000, **config}
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    try:
        if one_batch_each:
            return [producer.send(topic, value).get(timeout=timeout).offset for value in values]
        futures = [producer.send(topic, value) for value in values]
        producer.flush(timeout=timeout)
        return [future.get(timeout=timeout).offset for future in futures]
    finally:
        producer.close(timeout=5)


def dump_replica(data_directory: str | Path, topic: str, partition: int = 0) -> ReplicaDump:
    """One replica's log as the offline dump tool sees it (works on a stopped broker too)."""
    output = io.StringIO()
    dump.dump(Path(data_directory), output)
    records: list[tuple[int, str | None]] = []
    summary: dict[str, Any] = {}
    for line in output.getvalue().splitlines():
        entry = json.loads(line)
        if entry["topic"] != topic or entry["partition"] != partition:
            continue
        if entry["type"] == "record":
            records.append((entry["offset"], entry["value"]))
        else:
            summary = entry
    return ReplicaDump(records, summary)


def bootstrap_of(cluster: LocalCluster, *nodes: str) -> str:
    """Bootstrap servers limited to ``nodes``.

    Tests that keep a broker frozen or dead bootstrap clients from the others: a frozen
    broker accepts TCP connections (the kernel answers) but never replies, and
    kafka-python's bootstrap then waits out a whole request timeout on it.
    """
    return ",".join(cluster.state["brokers"][node]["address"] for node in nodes)


def dumps_of(cluster: LocalCluster, topic: str, partition: int = 0) -> dict[str, ReplicaDump]:
    return {
        node: dump_replica(entry["data"], topic, partition)
        for node, entry in cluster.state["brokers"].items()
    }


def wait_for_full_isr(
    cluster: LocalCluster, topic: str, partition: int = 0, timeout: float = 60.0
) -> dict[str, Any]:
    """Wait until the ISR holds every replica again and the leader is known."""

    def healed() -> dict[str, Any] | None:
        state = cluster.partition_state(topic, partition)
        return state if state["leader"] >= 0 and sorted(state["isr"]) == sorted(state["replicas"]) else None

    state: dict[str, Any] = cluster.wait_for(
        healed, timeout, f"{topic}-{partition} ISR back to every replica"
    )
    return state


def wait_for_identical_dumps(
    cluster: LocalCluster, topic: str, partition: int = 0, timeout: float = 30.0
) -> dict[str, ReplicaDump]:
    """Wait until every replica's log holds the same records at the same offsets.

    Followers replicate asynchronously even with a full ISR (the ISR only says they were
    caught up recently), so the test waits for the condition rather than sampling once.
    On timeout the last dumps are returned and the caller's assertion shows the difference.
    """
    deadline = time.monotonic() + timeout
    while True:
        dumps = dumps_of(cluster, topic, partition)
        if len({tuple(replica.records) for replica in dumps.values()}) == 1 or time.monotonic() > deadline:
            return dumps
        time.sleep(0.1)


def broker_log_tail(cluster: LocalCluster, node: str, lines: int = 40) -> str:
    path = Path(cluster.state["brokers"][node]["dir"]) / "process.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"
