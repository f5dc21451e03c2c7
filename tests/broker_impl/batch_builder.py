"""Real Kafka v2 record batches for the broker's unit tests.

The bytes come from kafka-python's own batch builder -- the code its producer runs -- so
the tests feed the log and the wire exactly what a client would send, CRC included,
rather than hand-packed headers that could share a misunderstanding with the broker.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_impl import records

NO_PRODUCER = -1


def make_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = NO_PRODUCER,
    producer_epoch: int = NO_PRODUCER,
    base_sequence: int = NO_PRODUCER,
    timestamp: int = 1_700_000_000_000,
    transactional: bool = False,
) -> bytearray:
    """One uncompressed v2 batch holding ``values`` (base offset 0, as a producer sends it)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for delta, value in enumerate(values):
        key = keys[delta] if keys is not None else None
        builder.append(delta, timestamp=timestamp + delta, key=key, value=value, headers=[])
    return bytearray(builder.build())


def header_of(batch: bytes | bytearray) -> records.BatchHeader:
    """The validated header of a single batch."""
    return records.validate(batch)
