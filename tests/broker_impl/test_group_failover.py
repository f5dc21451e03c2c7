"""Committed offsets survive the coordinator's crash: the next coordinator loads them from the log.

Three brokers, ``__consumer_offsets`` with replication factor 3.  A kafka-python group consumes
and commits; the commit is acknowledged only once the HW passed its record, so at that moment
every ISR replica of the group's offsets partition holds it (checked offline with the dump tool,
record by record).  Then the coordinator's broker is SIGKILLed.  The controller elects another
replica; that broker never received an OffsetCommit, so the offsets it serves can only come from
replaying its replica of the log: a fresh consumer of the group must read exactly the committed
offsets from it, the surviving member must carry on (heartbeat, fetch, commit) through it, and a
broker that does not lead the group's partition must answer NOT_COORDINATOR.

And the acknowledgement itself is acks=all: with both followers of the offsets partition frozen
(SIGSTOP, inside the session and replica-lag timeouts, so the ISR stays whole), a commit is
appended by the leader but answered REQUEST_TIMED_OUT, and the committed offset does not move.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaConnectionError

from broker_impl import dump, wire
from broker_impl.group_records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    OffsetKey,
    decode,
    partition_for,
)
from broker_impl.localcluster import LocalCluster

from .client_support import bootstrap_of, produce_all, subscribe_knowing_the_topic

pytestmark = pytest.mark.timeout(240)

TOPIC = "failover"
GROUP = "failover-group"
PARTITIONS = 2
SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "replica.lag.time.max.ms": 3000,
    "offsets.topic.replication.factor": 3,
}


def raw(data: str | None) -> bytes | None:
    """A dump field back to bytes (the dump prints non-UTF-8 bytes as ``base64:...``)."""
    if data is None:
        return None
    return base64.b64decode(data[7:]) if data.startswith("base64:") else data.encode()


def commits_in_replica(data_directory: str, partition: int) -> dict[int, int]:
    """The last committed offset of each partition of TOPIC for GROUP, read from one replica's
    log of ``__consumer_offsets`` by the offline dump tool."""
    found: dict[int, int] = {}
    for _, key_text, value_text in dump_records(data_directory, partition):
        key, value = decode(raw(key_text), raw(value_text))
        if isinstance(key, OffsetKey) and key.group == GROUP and key.topic == TOPIC:
            assert isinstance(value, CommittedOffset)
            found[key.partition] = value.offset
    return found


def dump_records(data_directory: str, partition: int) -> list[tuple[int, str | None, str | None]]:
    output = io.StringIO()
    dump.dump(Path(data_directory), output)
    rows = [json.loads(line) for line in output.getvalue().splitlines()]
    return [
        (row["offset"], row["key"], row["value"])
        for row in rows
        if row["type"] == "record" and row["topic"] == OFFSETS_TOPIC and row["partition"] == partition
    ]


def call(address: str, api_key: int, version: int, request: Any, timeout: float = 15.0) -> Any:
    """One request of the group APIs straight to one broker; its decoded response."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(wire.encode_request(request, 7, "probe"))
        size = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))[0]
        payload = connection.recv(size, socket.MSG_WAITALL)
    return wire.decode_response(wire.APIS[api_key].response, version, payload)[1]


def offset_fetch(address: str, group: str) -> tuple[int, dict[tuple[str, int], int]]:
    """OffsetFetch v5 of every committed partition: (group error, offsets)."""
    response = call(address, 9, 5, wire.APIS[9].request(version=5, group_id=group, topics=None))
    offsets = {
        (topic.name, entry.partition_index): entry.committed_offset
        for topic in response.topics
        for entry in topic.partitions
    }
    return response.error_code, offsets


def offset_fetch_error(address: str, group: str) -> int:
    return offset_fetch(address, group)[0]


def simple_commit(address: str, group: str, partition: int, offset: int) -> int:
    """OffsetCommit v8 as an ``assign()`` consumer sends it (generation -1, no member id)."""
    request_class = wire.APIS[8].request
    topic_class = wire.nested(request_class, "OffsetCommitRequestTopic")
    partition_class = wire.nested(topic_class, "OffsetCommitRequestPartition")
    request = request_class(
        version=8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            topic_class(
                name=TOPIC,
                partitions=[
                    partition_class(
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )
    error: int = call(address, 8, 8, request).topics[0].partitions[0].error_code
    return error


def committed_via(bootstrap: str, timeout: float = 30.0) -> dict[int, int | None]:
    """The group's committed offsets as a fresh member sees them.

    Right after a broker dies, the cluster's metadata still names it until the controller fences
    it, and kafka-python may pick it for a metadata refresh and raise the refused connection out
    of ``committed()`` instead of trying another broker: that is the client giving up early, not
    an answer, so the read is repeated (with a fresh client) until one comes or ``timeout`` ends.
    """
    deadline = time.monotonic() + timeout
    while True:
        reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
        try:
            return {index: reader.committed(TopicPartition(TOPIC, index)) for index in range(PARTITIONS)}
        except KafkaConnectionError:
            if time.monotonic() >= deadline:
                raise
        finally:
            reader.close()


def poll_values(consumer: KafkaConsumer, count: int, timeout: float = 60.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} in {timeout} s"
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(record.value for record in batch)
    return got


def test_a_new_coordinator_serves_the_commits_it_loaded_from_the_log(
    start_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = start_cluster(brokers=3, settings=SETTINGS)
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    before = [f"before-{number}".encode() for number in range(200)]
    produce_all(cluster.bootstrap(), TOPIC, before)

    member = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap(),
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=500,
        session_timeout_ms=20000,
        request_timeout_ms=15000,
        retry_backoff_ms=200,
    )
    try:
        subscribe_knowing_the_topic(member, TOPIC)
        assert sorted(poll_values(member, len(before))) == sorted(before)
        member.commit()
        acknowledged = {tp.partition: member.committed(tp) for tp in member.assignment()}
        assert sum(acknowledged.values()) == len(before)

        # The coordinator leads the group's partition; its ISR replicas all hold the commits.
        index = partition_for(GROUP, len(cluster.describe()["topics"][OFFSETS_TOPIC]["partitions"]))
        state = cluster.partition_state(OFFSETS_TOPIC, index)
        assert sorted(state["replicas"]) == [1, 2, 3]
        coordinator = str(state["leader"])
        for node in map(str, state["isr"]):
            held = commits_in_replica(cluster.state["brokers"][node]["data"], index)
            assert held == acknowledged, f"replica {node} of {OFFSETS_TOPIC}-{index}"
        survivors = [node for node in ("1", "2", "3") if node != coordinator]

        cluster.kill(coordinator)
        new_state = cluster.wait_for(
            lambda: (
                (s := cluster.partition_state(OFFSETS_TOPIC, index))["leader"] not in (-1, int(coordinator))
                and s
            ),
            30,
            f"a new leader of {OFFSETS_TOPIC}-{index}",
        )
        new_coordinator = str(new_state["leader"])
        assert new_state["leader_epoch"] > state["leader_epoch"]

        # A fresh consumer of the group reads the commits from the new coordinator.
        live = bootstrap_of(cluster, *survivors)
        assert committed_via(live) == acknowledged

        # The surviving member carries on through the new coordinator: reads and commits more.
        after = [f"after-{number}".encode() for number in range(60)]
        produce_all(live, TOPIC, after)
        assert sorted(poll_values(member, len(after))) == sorted(after)
        member.commit()
        advanced = committed_via(live)
        assert sum(value or 0 for value in advanced.values()) == len(before) + len(after)
        held = commits_in_replica(cluster.state["brokers"][new_coordinator]["data"], index)
        assert held == advanced

        # Only the partition's leader coordinates the group.
        other = next(node for node in survivors if node != new_coordinator)
        assert offset_fetch_error(cluster.state["brokers"][other]["address"], GROUP) == wire.NOT_COORDINATOR
        assert offset_fetch_error(cluster.state["brokers"][new_coordinator]["address"], GROUP) == wire.NONE
    finally:
        member.close()


STALL_SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.replication.factor": 3,
    "offsets.commit.timeout.ms": 2000,
    "min.insync.replicas": 2,
    "replica.lag.time.max.ms": 30000,  # the frozen followers stay in the ISR ...
    "broker.session.timeout.ms": 15000,  # ... and stay registered
}


def test_a_commit_is_acknowledged_only_once_replicated(start_cluster: Callable[..., LocalCluster]) -> None:
    cluster = start_cluster(brokers=3, settings=STALL_SETTINGS)
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    group = "stall-group"
    # Any group's first coordinator lookup creates __consumer_offsets; then find this group's.
    assert committed_via(cluster.bootstrap()) == {0: None, 1: None}
    index = partition_for(group, len(cluster.describe()["topics"][OFFSETS_TOPIC]["partitions"]))
    cluster.wait_for_leaders(OFFSETS_TOPIC)
    state = cluster.partition_state(OFFSETS_TOPIC, index)
    leader = cluster.state["brokers"][str(state["leader"])]["address"]
    followers = [str(node) for node in state["replicas"] if node != state["leader"]]

    def coordinator_ready() -> bool:
        return offset_fetch_error(leader, group) == wire.NONE

    cluster.wait_for(coordinator_ready, 30, "the coordinator to load its partition")
    assert simple_commit(leader, group, 0, 10) == wire.NONE
    assert offset_fetch(leader, group) == (wire.NONE, {(TOPIC, 0): 10})
    end_before = dump_records(cluster.state["brokers"][str(state["leader"])]["data"], index)

    for node in followers:
        cluster.pause(node)
    try:
        started = time.monotonic()
        assert simple_commit(leader, group, 0, 20) == wire.REQUEST_TIMED_OUT
        assert time.monotonic() - started >= 1.9  # it waited for the HW for offsets.commit.timeout.ms
        assert offset_fetch(leader, group) == (wire.NONE, {(TOPIC, 0): 10})
        appended = dump_records(cluster.state["brokers"][str(state["leader"])]["data"], index)
        assert len(appended) == len(end_before) + 1  # the leader did append it: only the ack was withheld
    finally:
        for node in followers:
            cluster.resume(node)
    assert sorted(cluster.partition_state(OFFSETS_TOPIC, index)["isr"]) == [1, 2, 3]
    assert simple_commit(leader, group, 0, 30) == wire.NONE  # replication resumed: commits go through
    assert offset_fetch(leader, group) == (wire.NONE, {(TOPIC, 0): 30})
