"""The ``__consumer_offsets`` topic: which partition owns a group, and its record format.

A group's coordinator is the leader of partition ``abs(hashCode(group id)) % partitions`` of
``__consumer_offsets`` -- Kafka's rule, with Java's ``String.hashCode`` (UTF-16 code units,
32-bit overflow) and Kafka's ``Utils.abs`` (``Integer.MIN_VALUE`` maps to 0).  Clients never
compute this themselves, but a Kafka-compatible placement keeps the harness's intuition about
"which broker coordinates group g" the same as on a real cluster.

Every coordinator write is one ordinary record in a v2 record batch appended to that
partition, so commits go through the same log, replication, truncation and flush code as user
data.  Keys and values are laid out as Kafka's (big-endian, ``int16`` version first; strings
``int16``-length-prefixed with -1 for null, bytes ``int32``-length-prefixed):

* offset commit -- key v1 ``(group, topic, partition)``; value v3 ``(offset, leader epoch,
  metadata, commit timestamp)``;
* group metadata -- key v2 ``(group)``; value v3 ``(protocol type, generation, protocol,
  leader, state timestamp, members[(member id, group instance id, client id, client host,
  rebalance timeout, session timeout, subscription, assignment)])``;
* a null value is a tombstone (the key's entry is deleted on replay).

Kafka's readers of these records are not tested against ours; the layout is Kafka's so that
a dump stays readable to anyone who knows Kafka's, not as a compatibility promise.
"""

from __future__ import annotations

import dataclasses
import struct

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes that are not a coordinator record of a version this broker writes."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit integer."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (value * 31 + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def kafka_abs(number: int) -> int:
    """Kafka's ``Utils.abs``: like ``Math.abs`` except that ``Integer.MIN_VALUE`` gives 0."""
    return 0 if number == -(2**31) else abs(number)


def partition_for(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id`` (Kafka's rule)."""
    return kafka_abs(java_string_hash(group_id)) % partition_count


# ---- record contents ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class GroupKey:
    group: str


@dataclasses.dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclasses.dataclass(frozen=True)
class MemberRecord:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupRecord:
    """A group's generation as the coordinator stored it: enough for a new coordinator to
    carry on with the same generation, members and assignment after a failover."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberRecord, ...]


Key = OffsetKey | GroupKey
Value = CommittedOffset | GroupRecord


# ---- encoding ---------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> None:
        self.parts.append(_INT16.pack(value))

    def int32(self, value: int) -> None:
        self.parts.append(_INT32.pack(value))

    def int64(self, value: int) -> None:
        self.parts.append(_INT64.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        encoded = value.encode("utf-8")
        if len(encoded) > 32767:
            raise RecordFormatError(f"string of {len(encoded)} bytes is too long for a record")
        self.int16(len(encoded))
        self.parts.append(encoded)

    def blob(self, value: bytes) -> None:
        self.int32(len(value))
        self.parts.append(value)

    def done(self) -> bytes:
        return b"".join(self.parts)


def encode_key(key: Key) -> bytes:
    writer = _Writer()
    if isinstance(key, OffsetKey):
        writer.int16(OFFSET_KEY_VERSION)
        writer.string(key.group)
        writer.string(key.topic)
        writer.int32(key.partition)
    else:
        writer.int16(GROUP_KEY_VERSION)
        writer.string(key.group)
    return writer.done()


def encode_value(value: Value) -> bytes:
    writer = _Writer()
    if isinstance(value, CommittedOffset):
        writer.int16(OFFSET_VALUE_VERSION)
        writer.int64(value.offset)
        writer.int32(value.leader_epoch)
        writer.string(value.metadata)
        writer.int64(value.commit_timestamp)
        return writer.done()
    writer.int16(GROUP_VALUE_VERSION)
    writer.string(value.protocol_type)
    writer.int32(value.generation)
    writer.string(value.protocol)
    writer.string(value.leader)
    writer.int64(value.state_timestamp)
    writer.int32(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        writer.string(None)  # group instance id: static membership (KIP-345) is not supported
        writer.string(member.client_id)
        writer.string(member.client_host)
        writer.int32(member.rebalance_timeout_ms)
        writer.int32(member.session_timeout_ms)
        writer.blob(member.subscription)
        writer.blob(member.assignment)
    return writer.done()


# ---- decoding -------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise RecordFormatError(f"record cut off at byte {self.position} (needs {size} more)")
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk

    def int16(self) -> int:
        value: int = _INT16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _INT64.unpack(self._take(8))[0]
        return value

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size == -1:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"string is not UTF-8: {error}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def blob(self) -> bytes:
        return self._take(self.int32())

    def finish(self) -> None:
        if self.position != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.position} bytes after the record's end")


def decode_key(data: bytes) -> Key:
    reader = _Reader(data)
    version = reader.int16()
    key: Key
    if version in (0, 1):
        key = OffsetKey(reader.string(), reader.string(), reader.int32())
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.string())
    else:
        raise RecordFormatError(f"unknown coordinator key version {version}")
    reader.finish()
    return key


def decode_offset(data: bytes) -> CommittedOffset:
    reader = _Reader(data)
    version = reader.int16()
    if version != OFFSET_VALUE_VERSION:
        raise RecordFormatError(
            f"offset commit value version {version}, this broker reads {OFFSET_VALUE_VERSION}"
        )
    value = CommittedOffset(reader.int64(), reader.int32(), reader.string(), reader.int64())
    reader.finish()
    return value


def decode_group(data: bytes) -> GroupRecord:
    reader = _Reader(data)
    version = reader.int16()
    if version != GROUP_VALUE_VERSION:
        raise RecordFormatError(
            f"group metadata value version {version}, this broker reads {GROUP_VALUE_VERSION}"
        )
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.int64()
    count = reader.int32()
    if count < 0:
        raise RecordFormatError(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id = reader.string()
        reader.nullable_string()  # group instance id (always null here)
        members.append(
            MemberRecord(
                member_id=member_id,
                client_id=reader.string(),
                client_host=reader.string(),
                rebalance_timeout_ms=reader.int32(),
                session_timeout_ms=reader.int32(),
                subscription=reader.blob(),
                assignment=reader.blob(),
            )
        )
    reader.finish()
    return GroupRecord(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def decode(key: bytes | None, value: bytes | None) -> tuple[Key, Value | None]:
    """A coordinator record as (key, value); a ``None`` value is a tombstone.

    Raises :class:`RecordFormatError` for anything else (a record without a key, an
    unknown version, bytes that do not parse)."""
    if key is None:
        raise RecordFormatError("coordinator record without a key")
    decoded_key = decode_key(key)
    if value is None:
        return decoded_key, None
    if isinstance(decoded_key, OffsetKey):
        return decoded_key, decode_offset(value)
    return decoded_key, decode_group(value)
