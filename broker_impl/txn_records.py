"""The ``__transaction_state`` topic: where a transactional id's coordinator lives, and its records.

As for groups (:mod:`broker_impl.group_records`), a transactional id belongs to partition
``abs(hashCode(id)) % partitions`` of the internal topic, and its coordinator is that partition's
leader.  Each change of a transaction's metadata is one record, key = the id, value = the whole
:class:`~broker_impl.txn_state.TxnMetadata` (a tombstone removes the id), in Kafka's version-0
layout::

    key   int16 version (0), string transactional id
    value int16 version (0), int64 producer id, int16 producer epoch, int32 timeout ms,
          int8 state, [string topic, [int32 partition]], int64 last update ms, int64 start ms

A value whose metadata has a previous or next producer id (KIP-890 part 2's epoch exhaustion) is
written as version 1: the same fields followed by int64 previous producer id, int64 next producer
id.  (Kafka's version 1 keeps these as tagged fields of a flexible layout; ours is a plain tail,
read by this module only.)

A new coordinator rebuilds every id's metadata by replaying the partition (last record wins).
"""

from __future__ import annotations

import struct

from .group_records import RecordFormatError, partition_for
from .txn_state import TxnMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_WITH_IDS = 1
_STATE_FIELDS = struct.Struct(">qhib")
_TAIL = struct.Struct(">qq")
_IDS = struct.Struct(">qq")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def transaction_partition(transactional_id: str, partition_count: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Java's hash, as Kafka)."""
    return partition_for(transactional_id, partition_count)


def _string(text: str) -> bytes:
    encoded = text.encode("utf-8")
    return _INT16.pack(len(encoded)) + encoded


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(metadata: TxnMetadata) -> bytes:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(metadata.partitions):
        topics.setdefault(topic, []).append(index)
    with_ids = metadata.previous_producer_id >= 0 or metadata.next_producer_id >= 0
    parts = [
        _INT16.pack(VALUE_VERSION_WITH_IDS if with_ids else VALUE_VERSION),
        _STATE_FIELDS.pack(
            metadata.producer_id, metadata.producer_epoch, metadata.timeout_ms, metadata.state.value
        ),
        _INT32.pack(len(topics)),
    ]
    for topic, indexes in topics.items():
        parts.append(_string(topic) + _INT32.pack(len(indexes)) + b"".join(_INT32.pack(i) for i in indexes))
    parts.append(_TAIL.pack(metadata.last_update_ms, metadata.txn_start_ms))
    if with_ids:
        parts.append(_IDS.pack(metadata.previous_producer_id, metadata.next_producer_id))
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.position + layout.size > len(self.data):
            raise RecordFormatError(f"transaction record cut off at byte {self.position}")
        values = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return tuple(values)

    def string(self) -> str:
        (size,) = self.take(_INT16)
        chunk = self.data[self.position : self.position + size]
        if size < 0 or len(chunk) != size:
            raise RecordFormatError(f"transaction record string cut off at byte {self.position}")
        self.position += size
        try:
            return chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"string is not UTF-8: {error}") from None


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    (version,) = reader.take(_INT16)
    if version != KEY_VERSION:
        raise RecordFormatError(f"transaction key version {version}")
    return reader.string()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    (version,) = reader.take(_INT16)
    if version not in (VALUE_VERSION, VALUE_VERSION_WITH_IDS):
        raise RecordFormatError(f"transaction value version {version}")
    producer_id, epoch, timeout_ms, state = reader.take(_STATE_FIELDS)
    partitions: set[tuple[str, int]] = set()
    (topic_count,) = reader.take(_INT32)
    for _ in range(topic_count):
        topic = reader.string()
        (count,) = reader.take(_INT32)
        partitions.update((topic, reader.take(_INT32)[0]) for _ in range(count))
    last_update, start = reader.take(_TAIL)
    previous, following = reader.take(_IDS) if version == VALUE_VERSION_WITH_IDS else (-1, -1)
    try:
        txn_state = TxnState(state)
    except ValueError:
        raise RecordFormatError(f"transaction state {state}") from None
    return TxnMetadata(
        transactional_id,
        producer_id,
        epoch,
        timeout_ms,
        txn_state,
        frozenset(partitions),
        start,
        last_update,
        previous,
        following,
    )


def decode(key: bytes | None, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """(transactional id, metadata or None for a tombstone) of one record."""
    if key is None:
        raise RecordFormatError("transaction record without a key")
    transactional_id = decode_key(key)
    return transactional_id, None if value is None else decode_value(transactional_id, value)
