"""Transaction markers: the control records that end a transaction in a data partition's log.

A marker is a batch of its own, flagged *control* and *transactional* in its attributes, carrying
the producer id and epoch of the transaction it ends and no sequence (-1).  Its one record has
Kafka's control key -- ``int16 version (0), int16 type`` with type 0 for ABORT and 1 for COMMIT --
and as value ``int16 version (0), int32 coordinator epoch``: the leader epoch of the
``__transaction_state`` partition whose coordinator wrote it, so a partition can refuse a marker
from a coordinator that was deposed (TRANSACTION_COORDINATOR_FENCED).

Clients read these batches too: a read_committed consumer drops the records of an aborted
transaction up to its ABORT marker, and every consumer skips control batches.  The bytes are
built with kafka-python's batch builder (the producer's own code) and then flagged control, the
CRC recomputed -- only a broker writes control batches, so no client builder offers the flag.
"""

from __future__ import annotations

import dataclasses
import struct

import google_crc32c

from . import records
from .records import CONTROL_FLAG, BatchHeader

ABORT = 0
COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
ATTRIBUTES_POSITION = 21
CRC_POSITION = 17


class MarkerFormatError(ValueError):
    """A control batch whose record is not a transaction marker this broker can read."""


@dataclasses.dataclass(frozen=True, slots=True)
class Marker:
    """What a marker says: the transaction of ``producer_id`` at ``producer_epoch`` ended."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int


def build_marker_batch(marker: Marker, timestamp: int) -> bytearray:
    """The control batch of ``marker`` (base offset 0: the leader stamps it like any batch)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    key = _CONTROL_KEY.pack(0, COMMIT if marker.committed else ABORT)
    builder.append(
        0, timestamp=timestamp, key=key, value=_CONTROL_VALUE.pack(0, marker.coordinator_epoch), headers=[]
    )
    batch = bytearray(builder.build())
    (attributes,) = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_POSITION)
    _ATTRIBUTES.pack_into(batch, ATTRIBUTES_POSITION, attributes | CONTROL_FLAG)
    _CRC.pack_into(batch, CRC_POSITION, google_crc32c.value(bytes(batch[ATTRIBUTES_POSITION:])))
    return batch


def build_transactional_batch(
    entries: list[tuple[bytes | None, bytes | None]], producer: tuple[int, int], timestamp: int
) -> bytearray:
    """A transactional data batch of ``(key, value)`` records from ``producer`` (id, epoch) with no
    sequence: what a coordinator writes into a transaction (TxnOffsetCommit's offsets)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for delta, (key, value) in enumerate(entries):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=[])
    return bytearray(builder.build())


def read_marker(header: BatchHeader, batch: bytes | bytearray | memoryview) -> Marker:
    """The marker of control batch ``batch`` (whose header is ``header``)."""
    decoded = records.decode_records(bytes(batch))
    if len(decoded) != 1 or decoded[0].key is None or len(decoded[0].key) < _CONTROL_KEY.size:
        raise MarkerFormatError(f"control batch at {header.base_offset} holds no marker record")
    version, kind = _CONTROL_KEY.unpack_from(decoded[0].key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise MarkerFormatError(f"control record version {version} type {kind} at {header.base_offset}")
    value = decoded[0].value or b""
    coordinator_epoch = _CONTROL_VALUE.unpack_from(value)[1] if len(value) >= _CONTROL_VALUE.size else -1
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)
