"""Consumer groups with real clients against real broker processes.

One three-broker cluster serves the module (each test has its own topic and group); the group
coordinator is whichever broker leads the group's ``__consumer_offsets`` partition, so client
traffic really goes to a coordinator found through FindCoordinator, not to the bootstrap broker.

* kafka-python ``KafkaConsumer(group_id=...)`` with ``subscribe()`` reads everything, commits,
  leaves; a second consumer of the group reads only what was produced after the commit -- with
  ``auto_offset_reset="earliest"``, so a lost or ignored commit would show as re-read values.
* Two kafka-python consumers split the partitions of a topic between them (a rebalance), and
  when one closes (LeaveGroup) the other ends up with every partition and reads from all.
* The same commit-and-resume round trip with confluent-kafka (librdkafka).
* A member that stops heartbeating (a hand-written protocol client: JoinGroup v5 with
  MEMBER_ID_REQUIRED, SyncGroup, then silence) is expired after its session timeout by the
  coordinator's clock, and the kafka-python member that kept heartbeating gets every partition.
* Both admin clients list and describe a running group (ListGroups, DescribeGroups) and read
  its committed offsets.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import ConsumerGroupState
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

from broker_impl import wire
from broker_impl.localcluster import LocalCluster

from .client_support import produce_all, subscribe_knowing_the_topic

pytestmark = pytest.mark.timeout(240)

SETTINGS = {"group.initial.rebalance.delay.ms": "0", "replica.lag.time.max.ms": "3000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = LocalCluster(Path(tmp_path_factory.mktemp("group-clients")) / "cluster")
    try:
        started.up(3, SETTINGS)
        yield started
    finally:
        started.down()


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{number:04d}".encode() for number in range(count)]


def kafka_python_consumer(
    cluster: LocalCluster, group: str, topic: str, listener: Any = None, **config: Any
) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap(),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **{"heartbeat_interval_ms": 500, "session_timeout_ms": 10000, "request_timeout_ms": 30000, **config},
    )
    subscribe_knowing_the_topic(consumer, topic, listener=listener)
    return consumer


def poll_until(consumer: KafkaConsumer, count: int, timeout: float = 60.0) -> list[bytes]:
    """Poll until ``count`` records arrived (raises on timeout), then once more briefly so that
    records beyond the expected ones would show."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records after {timeout} s"
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(record.value for record in batch)
    for batch in consumer.poll(timeout_ms=1000).values():
        got.extend(record.value for record in batch)
    return got


def end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    probe = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), group_id=None)
    try:
        ends = probe.end_offsets([TopicPartition(topic, index) for index in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        probe.close()


def committed(cluster: LocalCluster, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets as a fresh consumer of the group reads them (OffsetFetch)."""
    reader = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), group_id=group, enable_auto_commit=False)
    try:
        return {index: reader.committed(TopicPartition(topic, index)) for index in range(partitions)}
    finally:
        reader.close()


def commit_positions(consumer: KafkaConsumer, timeout: float = 60.0) -> None:
    """Commit the positions ``consumer`` has now, through a rebalance if one is in progress.

    A kafka-python member rejoins on its own at times (a heartbeat's REBALANCE_IN_PROGRESS that
    arrives after the rebalance it reported, a metadata change it saw as the group's leader), and a
    commit meanwhile is refused with RebalanceInProgressError -- the client's own advice is to poll,
    which completes the rebalance, and retry (the resume test lost a commit that way in loaded runs,
    2026-12-02).
    The positions are taken once, before the first try: a rejoined member may start again from the
    committed offsets, and what it re-reads then must not move what is committed."""
    positions = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(positions)
            return
        except RebalanceInProgressError:
            assert time.monotonic() < deadline, f"the group still rebalancing after {timeout} s"
            consumer.poll(timeout_ms=1000)  # completes the rejoin; re-read records are not asserted


# ---- kafka-python: commit, then resume from the commit -------------------------------------------


def test_kafka_python_group_consumes_commits_and_a_successor_resumes_from_the_commit(
    cluster: LocalCluster,
) -> None:
    topic, group = "kp-resume", "kp-resume-group"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    first_batch = values("first", 300)
    produce_all(cluster.bootstrap(), topic, first_batch)

    first = kafka_python_consumer(cluster, group, topic)
    try:
        read = poll_until(first, len(first_batch))
        assert sorted(read) == first_batch
        assert {tp.partition for tp in first.assignment()} == {0, 1, 2}
        commit_positions(first)
    finally:
        first.close()  # LeaveGroup
    ends = end_offsets(cluster, topic, 3)
    assert sum(ends.values()) == 300
    assert committed(cluster, group, topic, 3) == ends

    second_batch = values("second", 100)
    produce_all(cluster.bootstrap(), topic, second_batch)
    second = kafka_python_consumer(cluster, group, topic)
    try:
        read = poll_until(second, len(second_batch))
        assert sorted(read) == second_batch  # nothing of the first batch: it started at the commit
        commit_positions(second)
    finally:
        second.close()
    assert committed(cluster, group, topic, 3) == end_offsets(cluster, topic, 3)


# ---- kafka-python: two members split the partitions, one leaves ----------------------------------


LONG_SESSION_MS = 120_000
"""A session no wait of a test outlasts: a member that has it leaves the group only by LeaveGroup."""


class AssignmentLog(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Every assignment a kafka-python member applied, as its rebalance listener is told of it.

    The only faithful record of a short-lived assignment: a member that completes a join, then
    learns in the same ``poll`` that the group rebalances again, rejoins before that ``poll``
    returns, so its assignment between two polls never shows it (a CI run lost a 30 s wait that
    way, 2026-12-01).  The eager protocol hands the listener the whole new assignment each time."""

    def __init__(self) -> None:
        self._assigned: list[frozenset[int]] = []
        self._lock = threading.Lock()  # its own: the listener may run on the client's network thread

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass  # nothing to commit: the members here never do

    def on_partitions_assigned(self, assigned: Any) -> None:
        with self._lock:
            self._assigned.append(frozenset(tp.partition for tp in assigned))

    def held(self, assignment: frozenset[int], since: int = 0) -> bool:
        """Whether the member was assigned exactly ``assignment`` after its first ``since`` assignments."""
        with self._lock:
            return assignment in self._assigned[since:]

    def count(self) -> int:
        """How many assignments the member has applied so far."""
        with self._lock:
            return len(self._assigned)


class PollingMember:
    """A kafka-python consumer polling in its own thread (consumers are not thread-safe), noting
    its assignment after every poll, every assignment it applied, and everything it reads."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, **config: Any) -> None:
        self._lock = threading.Lock()
        self._log = AssignmentLog()
        self.consumer = kafka_python_consumer(cluster, group, topic, listener=self._log, **config)
        self.assignment: frozenset[int] = frozenset()
        self.read: list[bytes] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batches = self.consumer.poll(timeout_ms=200)
                with self._lock:
                    for batch in batches.values():
                        self.read.extend(record.value for record in batch)
                    self.assignment = frozenset(tp.partition for tp in self.consumer.assignment())
        except BaseException as error:  # reported by the test, not swallowed
            self.errors.append(error)
        finally:
            self.consumer.close()

    def snapshot(self) -> tuple[frozenset[int], list[bytes]]:
        with self._lock:
            return self.assignment, list(self.read)

    def has_held(self, assignment: frozenset[int], since: int = 0) -> bool:
        """Whether the member was assigned exactly ``assignment``, however briefly, after the first
        ``since`` assignments it applied (:meth:`assignments_applied`)."""
        return self._log.held(assignment, since)

    def assignments_applied(self) -> int:
        return self._log.count()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "consumer thread did not stop"


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def test_two_kafka_python_members_split_the_partitions_and_the_survivor_takes_all(
    cluster: LocalCluster,
) -> None:
    topic, group = "kp-split", "kp-split-group"
    cluster.create_topic(topic, partitions=4, replication_factor=3)
    # The first member's session outlasts every wait below, so only its LeaveGroup can hand its
    # partitions over in time: an expiry of its session cannot (a bound on time said this before,
    # and failed on a loaded machine).
    one = PollingMember(
        cluster, group, topic, session_timeout_ms=LONG_SESSION_MS, request_timeout_ms=LONG_SESSION_MS + 5000
    )
    two: PollingMember | None = None
    try:
        wait_for(lambda: one.snapshot()[0] == {0, 1, 2, 3}, 60, "the first member to own every partition")
        two = PollingMember(cluster, group, topic)

        def split() -> bool:
            mine, theirs = one.snapshot()[0], two.snapshot()[0]  # type: ignore[union-attr]
            return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == {0, 1, 2, 3}

        wait_for(split, 60, "the two members to split the four partitions")
        assert len(one.snapshot()[0]) == len(two.snapshot()[0]) == 2  # range assignor: 2 and 2

        one.close()  # close() sends LeaveGroup: the survivor rebalances without waiting for a timeout
        wait_for(lambda: two.snapshot()[0] == {0, 1, 2, 3}, 60, "the survivor to own every partition")

        produced = values("after", 80)
        produce_all(cluster.bootstrap(), topic, produced)
        wait_for(lambda: set(produced) <= set(two.snapshot()[1]), 60, "the survivor to read all partitions")
        assert not one.errors and not two.errors, (one.errors, two.errors)
    finally:
        one.close()
        if two is not None:
            two.close()


# ---- confluent-kafka: commit, then resume from the commit ----------------------------------------


def confluent_consumer(cluster: LocalCluster, group: str, topic: str) -> ConfluentConsumer:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    return consumer


def confluent_poll_until(consumer: ConfluentConsumer, count: int, timeout: float = 60.0) -> list[bytes]:
    """As :func:`poll_until`, for librdkafka: ``count`` records, then one more second of polling."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    extra_until: float | None = None
    while extra_until is None or time.monotonic() < extra_until:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records after {timeout} s"
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            got.append(message.value())
        if extra_until is None and len(got) >= count:
            extra_until = time.monotonic() + 1.0
    return got


def test_confluent_group_consumes_commits_and_a_successor_resumes_from_the_commit(
    cluster: LocalCluster,
) -> None:
    topic, group = "ck-resume", "ck-resume-group"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    first_batch = values("first", 300)
    produce_all(cluster.bootstrap(), topic, first_batch)

    first = confluent_consumer(cluster, group, topic)
    try:
        assert sorted(confluent_poll_until(first, len(first_batch))) == first_batch
        assert {tp.partition for tp in first.assignment()} == {0, 1, 2}
        stored = first.commit(asynchronous=False)
        assert stored is not None and all(tp.error is None for tp in stored)
    finally:
        first.close()
    ends = end_offsets(cluster, topic, 3)
    assert committed(cluster, group, topic, 3) == ends  # kafka-python reads what librdkafka committed

    second_batch = values("second", 100)
    produce_all(cluster.bootstrap(), topic, second_batch)
    second = confluent_consumer(cluster, group, topic)
    try:
        assert sorted(confluent_poll_until(second, len(second_batch))) == second_batch
        second.commit(asynchronous=False)
        positions = second.committed([ConfluentPartition(topic, index) for index in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in positions} == end_offsets(cluster, topic, 3)
    finally:
        second.close()


# ---- admin clients: ListGroups and DescribeGroups -------------------------------------------------


def test_admin_clients_list_and_describe_a_running_group(cluster: LocalCluster) -> None:
    topic, group = "admin-view", "admin-view-group"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    produce_all(cluster.bootstrap(), topic, values("seen", 20))
    member = kafka_python_consumer(cluster, group, topic)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap())
    try:
        assert sorted(poll_until(member, 20)) == values("seen", 20)
        commit_positions(member)
        listed = {entry["group_id"]: entry for entry in admin.list_groups()}
        assert listed[group]["group_state"] == "Stable" and listed[group]["protocol_type"] == "consumer"
        described = admin.describe_groups([group, "no-such-group"])
        assert described["no-such-group"]["group_state"] == "Dead"
        (only,) = described[group]["members"]
        assert only["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1]}]
        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: entry.offset for tp, entry in offsets.items()} == end_offsets(cluster, topic, 2)

        confluent = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        groups = confluent.list_consumer_groups().result(timeout=20)
        assert any(entry.group_id == group for entry in groups.valid) and not groups.errors
        description = confluent.describe_consumer_groups([group])[group].result(timeout=20)
        assert description.state is ConsumerGroupState.STABLE and description.partition_assignor == "range"
        assert [
            sorted(tp.partition for tp in m.assignment.topic_partitions) for m in description.members
        ] == [[0, 1]]
    finally:
        admin.close()
        member.close()


# ---- a member that falls silent is expired -------------------------------------------------------


SILENT_REBALANCE_TIMEOUT_MS = 180_000
"""Past every wait of the expiry test: a rebalance waits this long for the silent member to rejoin,
so the group can lose it in time only by its 6 s session running out."""


class RawMember:
    """A group member speaking the protocol by hand over one connection to the coordinator."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        found = self._call(cluster.bootstrap().split(",")[0], wire.APIS[10], 2, key=group, key_type=0)
        assert found.error_code == wire.NONE
        self.address = f"{found.host}:{found.port}"
        self.member_id = ""
        self.generation = -1

    def _call(self, address: str, api: wire.Api, version: int, **fields: Any) -> Any:
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as connection:
            connection.sendall(wire.encode_request(api.request(version=version, **fields), 1, "raw-member"))
            size = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))[0]
            return wire.decode_response(api.response, version, connection.recv(size, socket.MSG_WAITALL))[1]

    def join(self) -> Any:
        """JoinGroup v5 with the subscription kafka-python's assignors read (consumer protocol v0)."""
        topic = self.topic.encode()
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic + struct.pack(">i", 0)
        api = wire.APIS[11]
        protocol = wire.nested(api.request, "JoinGroupRequestProtocol")(name="range", metadata=subscription)
        return self._call(
            self.address,
            api,
            5,
            group_id=self.group,
            session_timeout_ms=6000,
            rebalance_timeout_ms=SILENT_REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[protocol],
        )

    def sync(self) -> Any:
        return self._call(
            self.address,
            wire.APIS[14],
            3,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            assignments=[],
        )

    def heartbeat(self) -> int:
        response = self._call(
            self.address,
            wire.APIS[12],
            3,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        error: int = response.error_code
        return error


def assigned_partitions(assignment: bytes) -> list[int]:
    """The partitions in a consumer-protocol assignment (version, [(topic, [partition])], user data)."""
    position = 6  # int16 version, int32 topic count (one topic here)
    (length,) = struct.unpack_from(">h", assignment, position)
    position += 2 + length
    (count,) = struct.unpack_from(">i", assignment, position)
    return list(struct.unpack_from(f">{count}i", assignment, position + 4))


def test_a_member_that_stops_heartbeating_is_expired_and_the_survivor_takes_all(
    cluster: LocalCluster,
) -> None:
    topic, group = "expiry", "expiry-group"
    cluster.create_topic(topic, partitions=4, replication_factor=3)
    survivor = PollingMember(cluster, group, topic)
    try:
        wait_for(
            lambda: survivor.snapshot()[0] == {0, 1, 2, 3}, 60, "the first member to own every partition"
        )
        silent = RawMember(cluster, group, topic)
        required = silent.join()
        assert required.error_code == wire.MEMBER_ID_REQUIRED and required.member_id
        silent.member_id = required.member_id
        joined = silent.join()  # waits until the survivor, told by its heartbeat, has rejoined
        assert joined.error_code == wire.NONE and joined.member_id == silent.member_id
        silent.generation = joined.generation_id
        synced = silent.sync()
        assert synced.error_code == wire.NONE
        mine = assigned_partitions(synced.assignment)
        assert len(mine) == 2
        went_silent, applied = time.monotonic(), survivor.assignments_applied()
        # Every partition again, in a generation after the silent member's: only the silent member's
        # removal makes one, and with its rebalance timeout past every wait here (a rebalance's
        # deadline removes who did not rejoin) only its session's expiry can remove it.  The
        # survivor's half of that generation is not waited for: kafka-python acts on a heartbeat's
        # REBALANCE_IN_PROGRESS that arrives after the rebalance it reported has completed (it does
        # not compare the generation it sent, as the Java client does) and rejoins at once, and on a
        # loaded machine may never apply the half (3 of 15 loaded runs, 2026-12-02).
        every = frozenset({0, 1, 2, 3})
        wait_for(lambda: survivor.has_held(every, since=applied), 60, "the survivor to take every partition")
        assert time.monotonic() - went_silent >= 5.5  # the 6 s session ran out; nothing earlier did it
        assert silent.heartbeat() == wire.UNKNOWN_MEMBER_ID
        assert not survivor.errors, survivor.errors
    finally:
        survivor.close()
