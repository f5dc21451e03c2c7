"""Protocol fuzzing against a running broker process: it must never die or wedge.

Hypothesis sends random frames and mutated valid requests (bytes flipped, cut, extended,
size prefixes lied about, API keys and versions changed, illegal field values) to the
broker of a real one-broker cluster.  After every frame the broker process must be alive
and answer ApiVersions on a fresh connection; after the whole run a metadata change must
still be applied (a new topic gets a leader) and real clients must still produce with
acks=all and fetch everything back -- so damage that only shows later (a poisoned
metadata entry, a stalled high watermark) fails the test too.

Targeted cases that the random search is unlikely to reach in a bounded run (illegal
topic names, follower fetches from a stranger's replica id) have their own tests.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_impl import wire
from broker_impl.localcluster import LocalCluster, api_versions_answer

from .batch_builder import make_batch
from .client_support import broker_log_tail, produce_all, read_partition
from .txn_requests import realistic_txn_request

TOPIC = "fuzz"
RESPONSE_WAIT_SECONDS = 1.0


# ---- realistic requests of every API, at every supported version -----------------------------


def realistic_request(api_key: int, version: int, topic: str = TOPIC) -> Any:
    """A request as a client would send it, so that mutations land near deep code paths."""
    request_class = wire.APIS[api_key].request

    def part(*path: str) -> Any:
        return wire.nested(request_class, *path)

    if api_key == 0:
        data = part("TopicProduceData", "PartitionProduceData")(index=0, records=bytes(make_batch([b"fuzz"])))
        return request_class(
            version=version,
            transactional_id=None,
            acks=-1,
            timeout_ms=2000,
            topic_data=[part("TopicProduceData")(name=topic, partition_data=[data])],
        )
    if api_key == 1:
        partition = part("FetchTopic", "FetchPartition")(
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=65536,
        )
        return request_class(
            version=version,
            replica_id=-1,
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=65536,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[part("FetchTopic")(topic=topic, partitions=[partition])],
            forgotten_topics_data=[],
            rack_id="",
        )
    if api_key == 2:
        partition = part("ListOffsetsTopic", "ListOffsetsPartition")(
            partition_index=0, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1
        )
        return request_class(
            version=version,
            replica_id=-1,
            isolation_level=0,
            timeout_ms=1000,
            topics=[part("ListOffsetsTopic")(name=topic, partitions=[partition])],
        )
    if api_key == 3:
        return request_class(
            version=version,
            topics=[part("MetadataRequestTopic")(name=topic)],
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    if api_key == 10:
        return request_class(version=version, key="group", key_type=0, coordinator_keys=["group"])
    if api_key == 18:
        return request_class(version=version, client_software_name="fuzz", client_software_version="1")
    if api_key == 19:
        created = part("CreatableTopic")(
            name=f"{topic}-created", num_partitions=1, replication_factor=1, assignments=[], configs=[]
        )
        return request_class(version=version, topics=[created], timeout_ms=2000, validate_only=False)
    if api_key == 22:
        return request_class(
            version=version,
            transactional_id=None,
            transaction_timeout_ms=1000,
            producer_id=-1,
            producer_epoch=-1,
        )
    if api_key == 23:
        partition = part("OffsetForLeaderTopic", "OffsetForLeaderPartition")(
            partition=0, current_leader_epoch=-1, leader_epoch=0
        )
        return request_class(
            version=version,
            replica_id=-1,
            topics=[part("OffsetForLeaderTopic")(topic=topic, partitions=[partition])],
        )
    return realistic_group_request(api_key, version, topic)


GROUP = "fuzz-group"


def realistic_group_request(api_key: int, version: int, topic: str) -> Any:
    """A group coordinator request as a consumer sends it (fields a version lacks are ignored)."""
    request_class = wire.APIS[api_key].request
    member = {"group_id": GROUP, "generation_id": 1, "member_id": "fuzz-member", "group_instance_id": None}

    def part(*path: str) -> Any:
        return wire.nested(request_class, *path)

    if api_key == 8:
        partition = part("OffsetCommitRequestTopic", "OffsetCommitRequestPartition")(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
        )
        return request_class(
            version=version,
            group_id=GROUP,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time_ms=-1,
            topics=[part("OffsetCommitRequestTopic")(name=topic, partitions=[partition])],
        )
    if api_key == 9:
        fetched = part("OffsetFetchRequestTopic")(name=topic, partition_indexes=[0])
        return request_class(version=version, group_id=GROUP, topics=[fetched], require_stable=False)
    if api_key == 11:
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", 0)
        protocol = part("JoinGroupRequestProtocol")(name="range", metadata=subscription)
        return request_class(
            version=version,
            group_id=GROUP,
            session_timeout_ms=6000,
            rebalance_timeout_ms=6000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[protocol],
        )
    if api_key == 12:
        return request_class(version=version, **member)
    if api_key == 13:
        leaving = part("MemberIdentity")(member_id="fuzz-member", group_instance_id=None)
        return request_class(version=version, group_id=GROUP, member_id="fuzz-member", members=[leaving])
    if api_key == 14:
        return request_class(
            version=version, protocol_type="consumer", protocol_name="range", assignments=[], **member
        )
    if api_key == 15:
        return request_class(version=version, groups=[GROUP], include_authorized_operations=False)
    if api_key == 16:
        return request_class(version=version, states_filter=[])
    return realistic_txn_request(api_key, version, topic)


ADMIN_FORWARDED = (43, 45, 46)
"""The APIs a broker forwards to the controller (broker_impl.admin_handlers)."""

VALID_FRAMES = [
    wire.encode_request(realistic_request(api.key, version), correlation_id=1, client_id="fuzzer")
    for api in wire.APIS.values()
    for version in range(api.min_version, api.max_version + 1)
    # CreateTopics is left out of byte-level mutation: a flipped partition count asks the
    # cluster for millions of partitions -- a legitimate (if silly) admin request, not a
    # protocol fault, and it would only measure how long creating them takes.  So are the
    # membership admin requests (ElectLeaders, Alter/ListPartitionReassignments): a flipped
    # replica id is a legitimate reassignment that moves the fuzzed partitions mid-test.
    if api.key not in (19, *ADMIN_FORWARDED)
]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    original = draw(st.sampled_from(VALID_FRAMES))
    payload = bytearray(original[4:])
    how = draw(
        st.sampled_from(
            ["flip", "cut", "cut-keep-size", "extend", "size-lie", "version", "api-key", "splice"]
        )
    )
    if how == "flip":
        for _ in range(draw(st.integers(min_value=1, max_value=6))):
            position = draw(st.integers(min_value=0, max_value=len(payload) - 1))
            payload[position] = draw(st.integers(min_value=0, max_value=255))
        return frame(bytes(payload))
    if how == "cut":
        return frame(bytes(payload[: draw(st.integers(min_value=0, max_value=len(payload) - 1))]))
    if how == "cut-keep-size":  # the size prefix promises more than ever arrives
        return original[: draw(st.integers(min_value=0, max_value=len(original) - 1))]
    if how == "extend":
        return frame(bytes(payload) + draw(st.binary(min_size=1, max_size=64)))
    if how == "size-lie":
        size = draw(
            st.sampled_from(
                [
                    -1,
                    -(2**31),
                    0,
                    1,
                    7,
                    len(payload) - 1,
                    len(payload) + 1,
                    wire.MAX_FRAME_BYTES + 1,
                    2**31 - 1,
                ]
            )
        )
        return struct.pack(">i", size) + bytes(payload)
    if how == "version":
        struct.pack_into(">h", payload, 2, draw(st.integers(min_value=-(2**15), max_value=2**15 - 1)))
        return frame(bytes(payload))
    if how == "api-key":
        struct.pack_into(">h", payload, 0, draw(st.sampled_from([*wire.APIS, -1, 4, 9, 11, 67, 32767])))
        return frame(bytes(payload))
    other = draw(st.sampled_from(VALID_FRAMES))[4:]  # header of one API, body of another
    return frame(bytes(payload[:8]) + other[8:])


random_frames = st.one_of(
    st.binary(max_size=200),  # anything at all, size prefix included
    st.binary(max_size=200).map(frame),  # a well-sized frame of garbage
    st.tuples(
        st.sampled_from(sorted(wire.APIS)), st.integers(min_value=-1, max_value=20), st.binary(max_size=200)
    ).map(lambda t: frame(struct.pack(">hhi", t[0], t[1], 9) + t[2])),
)

# Valid requests carrying values no client would send.
odd_topic_names = st.one_of(
    st.text(max_size=40), st.sampled_from(["", ".", "..", "a/b", "../../outside", "x" * 300, "nul\x00byte"])
)
odd_field_frames = st.one_of(
    st.builds(
        lambda name, version: wire.encode_request(realistic_request(3, version, name), 1, "f"),
        odd_topic_names,
        st.integers(min_value=4, max_value=12),
    ),
    st.builds(
        lambda name, version: wire.encode_request(realistic_request(0, version, name), 1, "f"),
        odd_topic_names,
        st.integers(min_value=3, max_value=10),
    ),
)


# ---- the harness -----------------------------------------------------------------------------


def send_frame(address: str, data: bytes) -> None:
    """Send ``data``, half-close, and read whatever comes back until EOF or a short wait."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        try:
            connection.sendall(data)
            connection.shutdown(socket.SHUT_WR)
            connection.settimeout(RESPONSE_WAIT_SECONDS)
            while connection.recv(65536):
                pass
        except (TimeoutError, ConnectionError):
            pass  # a long-polling fetch, or the broker closed on us: both are fine


def check_alive(cluster: LocalCluster, what: str) -> None:
    address = cluster.state["brokers"]["1"]["address"]
    if not (cluster.is_alive("1") and api_versions_answer(address)):
        raise AssertionError(
            f"broker died or stopped answering after {what}\n{broker_log_tail(cluster, '1')}"
        )


def check_clients_still_work(cluster: LocalCluster, topic: str) -> None:
    """A metadata change is applied, and real clients produce (acks=all) and fetch."""
    values = [f"after-fuzz-{number}".encode() for number in range(50)]
    try:
        cluster.create_topic(topic, 1, 1, timeout=20)
        offsets = produce_all(cluster.bootstrap(), topic, values, timeout=20)
        read_back = [value for _, value in read_partition(cluster.bootstrap(), topic, timeout=20)]
    except Exception as error:
        raise AssertionError(
            f"the cluster no longer serves clients: {error!r}; broker alive: "
            f"{cluster.is_alive('1')}\n{broker_log_tail(cluster, '1')}"
        ) from error
    assert offsets == list(range(50))
    assert read_back == values


@pytest.fixture
def fuzz_cluster(start_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    cluster = start_cluster(brokers=1, settings={"replica.lag.time.max.ms": 3000})
    cluster.create_topic(TOPIC, 1, 1)
    produce_all(cluster.bootstrap(), TOPIC, [f"seed-{number}".encode() for number in range(20)])
    return cluster


def test_fuzzed_frames_never_kill_or_wedge_the_broker(fuzz_cluster: LocalCluster) -> None:
    address = fuzz_cluster.state["brokers"]["1"]["address"]
    sent = {"count": 0}

    @settings(
        max_examples=1000,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.one_of(mutated_frames(), random_frames, odd_field_frames))
    def one_frame(data: bytes) -> None:
        sent["count"] += 1
        send_frame(address, data)
        check_alive(fuzz_cluster, f"frame {data[:64].hex()}...")

    started = time.monotonic()
    one_frame()
    assert sent["count"] >= 1000
    check_clients_still_work(fuzz_cluster, "after-fuzz")
    # The fuzzed topic itself must still take acks=all writes: nothing wedged its HW.
    assert len(produce_all(fuzz_cluster.bootstrap(), TOPIC, [b"last"], timeout=20)) == 1
    assert time.monotonic() - started < 300  # a bound on the run, not a performance claim


def test_pipelined_garbage_after_valid_requests_closes_only_that_connection(
    fuzz_cluster: LocalCluster,
) -> None:
    """Valid requests answered in order, then garbage: the connection closes, the broker lives."""
    address = fuzz_cluster.state["brokers"]["1"]["address"]
    host, port = address.rsplit(":", 1)
    requests = [
        wire.encode_request(realistic_request(18, 3), correlation_id, "p") for correlation_id in (1, 2)
    ]
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(b"".join(requests) + frame(b"\x00\x00\xff\xff garbage"))
        received = b""
        with contextlib.suppress(ConnectionError):
            while chunk := connection.recv(65536):
                received += chunk
    correlation_ids = []
    while received:
        size = struct.unpack(">i", received[:4])[0]
        correlation_ids.append(struct.unpack(">i", received[4:8])[0])
        received = received[4 + size :]
    assert correlation_ids == [1, 2]
    check_alive(fuzz_cluster, "pipelined garbage")


# ---- targeted abuse -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["nul\x00byte", "../../outside", "x" * 300, "..", "a/b"],
    ids=["nul", "dotdot-path", "too-long", "dotdot", "slash"],
)
def test_illegal_topic_names_are_refused_and_leave_the_cluster_working(
    fuzz_cluster: LocalCluster, name: str
) -> None:
    """Kafka refuses topic names outside ``[a-zA-Z0-9._-]{1,249}`` (and "." / "..") with
    INVALID_TOPIC_EXCEPTION (17).  A name becomes a directory name on every replica, so an
    unchecked one escapes the data directory ("../") or makes every broker that applies
    the metadata fail for good (a NUL byte, more than 255 bytes)."""
    address = fuzz_cluster.state["brokers"]["1"]["address"]
    send_frame(address, wire.encode_request(realistic_request(3, 12, name), 1, "odd-names"))
    data_root = Path(fuzz_cluster.state["brokers"]["1"]["data"]).parent.parent
    assert not list(data_root.glob("outside*")), "a topic directory escaped the data directory"
    assert name not in fuzz_cluster.describe()["topics"]
    check_clients_still_work(fuzz_cluster, "after-odd-name")
    check_alive(fuzz_cluster, f"metadata request for topic {name!r}")


def test_fetch_from_a_replica_id_outside_the_replica_set_changes_nothing(fuzz_cluster: LocalCluster) -> None:
    """A Fetch claiming to come from replica 99 (not a replica of the partition) must not
    be counted as a follower: Kafka answers NOT_LEADER_OR_FOLLOWER.  Counted, the stranger
    becomes an ISR-expansion candidate; the controller refuses it every time, the leader
    keeps computing the HW over the proposed larger ISR, and acks=all stalls for good."""
    address = fuzz_cluster.state["brokers"]["1"]["address"]
    request = realistic_request(1, 12)
    request.replica_id = 99
    request.topics[0].partitions[0].fetch_offset = 20  # "caught up" with the seed records
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(wire.encode_request(request, 5, "stranger"))
        size = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))[0]
        _, response = wire.decode_response(
            wire.APIS[1].response, 12, connection.recv(size, socket.MSG_WAITALL)
        )
    assert response.responses[0].partitions[0].error_code == wire.NOT_LEADER_OR_FOLLOWER
    assert produce_all(fuzz_cluster.bootstrap(), TOPIC, [b"after-stranger"], timeout=20) == [20]
    assert fuzz_cluster.partition_state(TOPIC, 0)["isr"] == [1]
