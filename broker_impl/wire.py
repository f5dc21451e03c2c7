"""The Kafka wire protocol, for both sides: the one adapter over kafka-python's codec.

kafka-python 3.0 generates its protocol classes from Apache Kafka's JSON message
schemas; each class encodes and decodes every version, flexible ones included.  That
module is not documented public API, so every use of it in the broker goes through this
file (kafka-python is pinned to ``>=3.0.12,<3.1`` and ``tests/broker_impl/test_wire.py``
round-trips every supported API and version).

The broker speaks it as a server (clients' requests) and as a client (followers fetch
from leaders with the real Fetch and OffsetForLeaderEpoch APIs, as Kafka's replica
fetchers do).
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

# Error codes (Kafka's numbers).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
MEMBER_ID_REQUIRED = 79
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_RECORD = 87

MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Kafka's ``socket.request.max.bytes`` default: larger frames close the connection."""


@dataclasses.dataclass(frozen=True)
class Api:
    key: int
    request: Any
    response: Any
    min_version: int
    max_version: int
    broker_max_version: int = -1
    """A higher version served to other brokers only, never advertised to clients (-1: none)."""
    tv1_max_version: int = -1
    """The ceiling advertised under ``transaction.version=1`` (-1: ``max_version`` at every level)."""

    def advertised_max(self, transaction_version: int) -> int:
        """The highest version ApiVersions offers clients at ``transaction_version``."""
        if transaction_version < 2 and self.tv1_max_version >= 0:
            return self.tv1_max_version
        return self.max_version


APIS: dict[int, Api] = {
    api.key: api
    for api in (
        # The replicated log's: what producers, consumers and followers use.  Fetch is capped at
        # 12 because 13+ names topics by UUID only (FIELD-NOTES).
        Api(0, ProduceRequest, ProduceResponse, 3, 10),
        Api(1, FetchRequest, FetchResponse, 4, 12),
        Api(2, ListOffsetsRequest, ListOffsetsResponse, 1, 9),
        Api(3, MetadataRequest, MetadataResponse, 0, 12),
        Api(18, ApiVersionsRequest, ApiVersionsResponse, 0, 4),
        Api(19, CreateTopicsRequest, CreateTopicsResponse, 2, 7),
        Api(22, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        Api(23, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
        # The group coordinator's (broker_impl.group_handlers).  Version ceilings: kafka-python
        # 3.0 asks for at most JoinGroup 7, SyncGroup 5, OffsetCommit 8 and OffsetFetch 8;
        # librdkafka 2.x for at most JoinGroup 5 (and it counts a broker as group-capable only if
        # JoinGroup, SyncGroup, Heartbeat and LeaveGroup offer v0 and OffsetFetch v1).  JoinGroup
        # 9 would make kafka-python take the broker for Kafka 3.2 and OffsetCommit/OffsetFetch 9
        # need KIP-848 member epochs; neither is offered.
        Api(8, OffsetCommitRequest, OffsetCommitResponse, 2, 8),
        Api(9, OffsetFetchRequest, OffsetFetchResponse, 1, 8),
        Api(10, FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
        Api(11, JoinGroupRequest, JoinGroupResponse, 0, 7),
        Api(12, HeartbeatRequest, HeartbeatResponse, 0, 4),
        Api(13, LeaveGroupRequest, LeaveGroupResponse, 0, 5),
        Api(14, SyncGroupRequest, SyncGroupResponse, 0, 5),
        Api(15, DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
        Api(16, ListGroupsRequest, ListGroupsResponse, 0, 4),
        # Transactions' (broker_impl.txn_handlers).  AddPartitionsToTxn 4 is the brokers' batched
        # form (verify_only: transaction.partition.verification.enable), served but not advertised.
        # EndTxn 5 is KIP-890 part 2's epoch bump per transaction (its answer carries the new
        # producer id and epoch); 4 only adds TRANSACTION_ABORTABLE, which this broker never
        # answers.  Both are offered only under transaction.version=2 (the default); at 1 EndTxn
        # stops at 3.  Not offered at either level: part 2's implicit partition adds (Produce 12,
        # AddPartitionsToTxn 5 from leaders, TxnOffsetCommit 5, AddOffsetsToTxn 4) -- a client keeps
        # adding partitions itself, which Kafka's TV2 coordinator accepts too.  WriteTxnMarkers is
        # broker to broker.
        Api(24, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3, broker_max_version=4),
        Api(25, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
        Api(26, EndTxnRequest, EndTxnResponse, 0, 5, tv1_max_version=3),
        Api(27, WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
        Api(28, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
        # Membership changes, forwarded to the controller (broker_impl.admin_handlers).
        # AlterPartitionReassignments 1 adds AllowReplicationFactorChange, not offered.
        Api(43, ElectLeadersRequest, ElectLeadersResponse, 0, 2),
        Api(45, AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, 0, 0),
        Api(46, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0),
    )
}
"""Every API a broker serves and advertises in ApiVersions, by key."""
API_VERSIONS_KEY = 18
END_TXN_EPOCH_BUMP_VERSION = 5
"""The first EndTxn version of KIP-890 part 2: the coordinator bumps the epoch and answers it."""

_KEY_AND_VERSION = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class ProtocolError(Exception):
    """A frame that cannot be a request we serve; the connection is closed (as Kafka does)."""


@dataclasses.dataclass(frozen=True)
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One size-prefixed frame; raises ``asyncio.IncompleteReadError`` at EOF."""
    size = _SIZE.unpack(await reader.readexactly(4))[0]
    if size < 0 or size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame size {size} out of range")
    return await reader.readexactly(size)


def peek_header(payload: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame, before decoding."""
    if len(payload) < _KEY_AND_VERSION.size:
        raise ProtocolError(f"request of {len(payload)} bytes is shorter than a header")
    key, version, correlation_id = _KEY_AND_VERSION.unpack_from(payload, 0)
    return key, version, correlation_id


def decode_request(payload: bytes) -> Request:
    """Decode a request of one of :data:`APIS`; :class:`ProtocolError` for other APIs,
    unsupported versions or garbage.

    An ApiVersions request of an unsupported version is *not* an error here: the caller
    answers it with UNSUPPORTED_VERSION and the supported ranges (clients retry lower).
    """
    key, version, correlation_id = peek_header(payload)
    api = APIS.get(key)
    if api is None:
        raise ProtocolError(f"unsupported API key {key}")
    if not api.min_version <= version <= max(api.max_version, api.broker_max_version):
        if key == API_VERSIONS_KEY:
            return Request(api, version, correlation_id, None, None)
        raise ProtocolError(f"unsupported version {version} of API {key}")
    try:
        body = api.request.decode(payload, version=version, header=True)
    except Exception as error:  # the codec raises many kinds on garbage
        raise ProtocolError(f"cannot decode API {key} v{version}: {type(error).__name__}: {error}") from None
    return Request(api, version, correlation_id, body.header.client_id, body)


def encode_response(request: Request, body: Any) -> bytes:
    """Frame ``body`` (built with :func:`response`) as the answer to ``request``."""
    body.with_header(correlation_id=request.correlation_id)
    encoded: bytes = body.encode(header=True, framed=True)
    return encoded


def response(request: Request, **fields: Any) -> Any:
    """Build the response object of ``request``'s API at its version."""
    return request.api.response(version=request.version, **fields)


def api_versions_response(request: Request, transaction_version: int = 2) -> Any:
    """The ApiVersions answer listing :data:`APIS` as offered at ``transaction_version`` (the
    broker's ``transaction.version``); error 35 with a v0 body when the version is unsupported.

    The feature ``transaction.version`` itself is not announced (no finalized features): Kafka's
    Java client reads level 2 as "partitions join a transaction implicitly through Produce v12",
    the half of KIP-890 part 2 this broker does not offer; a client opts into EndTxn v5 by the
    version advertised here alone (as :mod:`workloads.txn_kip890` does)."""
    api_keys = [
        ApiVersionsResponse.ApiVersion(
            api_key=api.key, min_version=api.min_version, max_version=api.advertised_max(transaction_version)
        )
        for api in APIS.values()
    ]
    if request.body is None:
        return ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION, api_keys=api_keys)
    return ApiVersionsResponse(
        version=request.version, error_code=NONE, api_keys=api_keys, throttle_time_ms=0
    )


def nested(message_class: Any, *path: str) -> Any:
    """A nested struct class, e.g. ``nested(ProduceResponse, 'TopicProduceResponse',
    'PartitionProduceResponse')``."""
    current = message_class
    for name in path:
        current = getattr(current, name)
    return current


# ---- client side (replica fetchers) -----------------------------------------------------


def encode_request(message: Any, correlation_id: int, client_id: str) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    encoded: bytes = message.encode(header=True, framed=True)
    return encoded


def decode_response(response_class: Any, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame's payload."""
    body = response_class.decode(payload, version=version, header=True)
    return body.header.correlation_id, body


class KafkaConnection:
    """A minimal request/response Kafka client connection (one request in flight).

    Used by followers to talk to leaders.  Every call has a deadline; any failure
    closes the connection and raises ``ConnectionError`` or ``TimeoutError``.
    """

    def __init__(self, host: str, port: int, client_id: str, timeout: float) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def call(
        self, message: Any, response_class: Any, version: int, timeout: float | None = None
    ) -> Any:
        deadline = timeout if timeout is not None else self._timeout
        try:
            return await asyncio.wait_for(self._call(message, response_class, version), deadline)
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as error:
            self.close()
            raise ConnectionError(f"{self.host}:{self.port}: {error}") from None
        except TimeoutError:
            self.close()
            raise

    async def _call(self, message: Any, response_class: Any, version: int) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._correlation_id += 1
        self._writer.write(encode_request(message, self._correlation_id, self._client_id))
        await self._writer.drain()
        payload = await read_frame(self._reader)
        correlation_id, body = decode_response(response_class, version, payload)
        if correlation_id != self._correlation_id:
            raise ProtocolError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = None
        self._writer = None
