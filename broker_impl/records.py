"""Kafka v2 record batches as bytes: header fields, CRC check, offset/epoch stamping.

The broker stores client batches as the raw bytes the producer sent and rewrites only
two header fields, exactly as Kafka does: the base offset (bytes 0-7) and the partition
leader epoch (bytes 12-15).  Neither is covered by the batch CRC, which protects bytes
21..end (attributes onwards), so the client's CRC stays valid.  Decoding individual
records (keys and values) is only needed by the offline dump tool; it uses
kafka-python's record reader.

Batch header layout (61 bytes, big-endian)::

    0  base_offset int64        27 base_timestamp int64
    8  batch_length int32       35 max_timestamp int64
    12 partition_leader_epoch   43 producer_id int64
    16 magic int8 (= 2)         51 producer_epoch int16
    17 crc uint32 (CRC32C)      53 base_sequence int32
    21 attributes int16         57 record_count int32
    23 last_offset_delta int32
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

import google_crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted in batch_length
_HEADER = struct.Struct(">qiiBIhiqqqhii")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class CorruptBatch(Exception):
    """A batch that fails validation (bad length, magic, CRC, or record count)."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def parse_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; raise :class:`CorruptBatch` if it cannot be a v2 batch."""
    if len(buffer) - position < HEADER_SIZE:
        raise CorruptBatch(f"{len(buffer) - position} bytes left, a batch header needs {HEADER_SIZE}")
    header = BatchHeader(*_HEADER.unpack_from(buffer, position))
    if header.magic != 2:
        raise CorruptBatch(f"magic {header.magic}, only v2 record batches are supported")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"batch length {header.batch_length} is shorter than a header")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptBatch("negative last offset delta or record count")
    return header


def validate(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header and check that the whole batch is present and its CRC matches."""
    header = parse_header(buffer, position)
    end = position + header.size
    if end > len(buffer):
        raise CorruptBatch(f"batch of {header.size} bytes is cut off after {len(buffer) - position}")
    # google-crc32c's C function accepts only ``bytes``; the copy is a memcpy, cheap next
    # to everything else per batch.
    covered = bytes(memoryview(buffer)[position + 21 : end])
    if google_crc32c.value(covered) != header.crc:
        raise CorruptBatch(f"CRC mismatch in batch at base offset {header.base_offset}")
    return header


def iterate_batches(
    buffer: bytes | bytearray | memoryview, check_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in ``buffer``; raise on the first bad one."""
    position = 0
    while position < len(buffer):
        header = validate(buffer, position) if check_crc else parse_header(buffer, position)
        if position + header.size > len(buffer):
            raise CorruptBatch("batch cut off at the end of the buffer")
        yield position, header
        position += header.size


def stamp(batch: bytearray, base_offset: int, leader_epoch: int) -> None:
    """Overwrite base offset and partition leader epoch in place (outside the CRC)."""
    _OFFSET.pack_into(batch, 0, base_offset)
    _EPOCH.pack_into(batch, 12, leader_epoch)


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def decode_records(batch: bytes) -> list[Record]:
    """Decode the records of one batch (decompressing if needed) -- for the dump tool."""
    from kafka.record.default_records import DefaultRecordBatch

    decoded = DefaultRecordBatch(batch)
    return [Record(record.offset, record.timestamp, record.key, record.value) for record in decoded]


def build_batch(entries: list[tuple[bytes | None, bytes | None]], timestamp: int) -> bytearray:
    """One uncompressed v2 batch of ``(key, value)`` records, base offset 0, no producer id --
    what the broker writes itself (the group coordinator's commits), built by kafka-python's
    batch builder as a producer's batch would be, CRC included."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for delta, (key, value) in enumerate(entries):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=[])
    return bytearray(builder.build())
