"""v2 record batches as bytes: header parsing, CRC coverage, offset/epoch stamping.

The batches are built by kafka-python's producer-side builder, so these tests pin the
broker to what real clients send, not to its own idea of the format.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_impl import records
from broker_impl.records import HEADER_SIZE, CorruptBatch

from .batch_builder import make_batch


def test_header_fields_of_a_client_batch() -> None:
    batch = make_batch([b"a", b"bb", None], producer_id=77, producer_epoch=3, base_sequence=10)
    header = records.validate(batch)
    assert header.magic == 2
    assert header.size == len(batch)
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.last_offset == 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 10)
    assert header.last_sequence == 12
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_002
    assert not header.is_transactional
    assert not header.is_control


def test_batch_without_producer_has_no_sequence() -> None:
    assert records.validate(make_batch([b"x"])).last_sequence == -1


def test_last_sequence_wraps_at_two_to_the_31() -> None:
    header = records.validate(
        make_batch([b"x", b"y", b"z"], producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    )
    assert header.last_sequence == 0


def test_transactional_flag_is_read() -> None:
    assert records.validate(
        make_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    ).is_transactional


def test_every_byte_under_the_crc_is_protected() -> None:
    """Flipping any byte from the attributes (offset 21) onwards must fail the CRC -- or,
    for a few header fields, an earlier structural check; never pass."""
    batch = make_batch([b"value-1", b"value-2"], keys=[b"k1", None])
    for position in range(21, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptBatch):
            records.validate(damaged)


def test_stamped_fields_are_outside_the_crc() -> None:
    """The broker rewrites base offset and leader epoch; the client's CRC must stay valid."""
    batch = make_batch([b"a", b"b"])
    records.stamp(batch, base_offset=1234567, leader_epoch=42)
    header = records.validate(batch)
    assert header.base_offset == 1234567
    assert header.partition_leader_epoch == 42
    assert header.last_offset == 1234568
    assert [record.offset for record in records.decode_records(bytes(batch))] == [1234567, 1234568]


def test_flipping_the_crc_field_itself_fails() -> None:
    batch = make_batch([b"a"])
    batch[17] ^= 0x01
    with pytest.raises(CorruptBatch, match="CRC mismatch"):
        records.validate(batch)


def test_cut_off_batch_is_reported() -> None:
    batch = make_batch([b"a" * 100])
    with pytest.raises(CorruptBatch, match="cut off"):
        records.validate(batch[:-1])
    with pytest.raises(CorruptBatch, match="a batch header needs 61"):
        records.validate(batch[: HEADER_SIZE - 1])


def test_other_magic_is_rejected_by_name() -> None:
    batch = make_batch([b"a"])
    batch[16] = 1
    with pytest.raises(CorruptBatch, match="magic 1"):
        records.parse_header(batch)


def test_impossible_lengths_and_counts_are_rejected() -> None:
    short = make_batch([b"a"])
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(CorruptBatch, match="shorter than a header"):
        records.parse_header(short)
    negative = make_batch([b"a"])
    negative[57:61] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptBatch, match="negative"):
        records.parse_header(negative)


def test_iterate_batches_walks_a_buffer_and_stops_at_damage() -> None:
    first, second, third = make_batch([b"1"]), make_batch([b"2", b"3"]), make_batch([b"4"])
    buffer = first + second + third
    positions = [position for position, _ in records.iterate_batches(buffer)]
    assert positions == [0, len(first), len(first) + len(second)]
    buffer[len(first) + 30] ^= 0xFF
    walked = []
    with pytest.raises(CorruptBatch):
        for position, _ in records.iterate_batches(buffer):
            walked.append(position)
    assert walked == [0]
    # Without the CRC check the same damage goes unnoticed: the flag matters.
    assert len(list(records.iterate_batches(buffer, check_crc=False))) == 3


@given(
    st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=200)),
        min_size=1,
        max_size=20,
    ),
    st.integers(min_value=0, max_value=2**62),
    st.integers(min_value=0, max_value=2**31 - 1),
)
def test_round_trip_of_any_records(
    pairs: list[tuple[bytes | None, bytes | None]], base_offset: int, epoch: int
) -> None:
    batch = make_batch([value for _, value in pairs], keys=[key for key, _ in pairs])
    records.stamp(batch, base_offset, epoch)
    header = records.validate(batch)
    assert header.record_count == len(pairs)
    decoded = records.decode_records(bytes(batch))
    assert [(record.key, record.value) for record in decoded] == pairs
    assert [record.offset for record in decoded] == list(range(base_offset, base_offset + len(pairs)))
