"""``__consumer_offsets``: group placement by Java's hash, the record codec, and replay.

The expected hashes and partitions were computed by a JVM (OpenJDK 17: ``String.hashCode`` and
Kafka's ``Utils.abs``), not by the formula under test -- including the string whose hash is
``Integer.MIN_VALUE`` (Kafka maps it to partition 0, ``Math.abs`` would not) and a surrogate pair
(Java hashes UTF-16 code units, not code points).
"""

from __future__ import annotations

import pytest

from broker_impl.coordinator_partition import CoordinatorPartition
from broker_impl.group_records import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    RecordFormatError,
    decode,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from broker_impl.group_state import GroupSettings, GroupState

# (text, String.hashCode(), partition of 5, partition of 50) -- from a JVM.
JAVA = [
    ("", 0, 0, 0),
    ("hello", 99162322, 2, 22),
    ("Hello World", -862545276, 1, 26),
    ("polygenelubricants", -(2**31), 0, 0),
    ("tidemark-group", -834983499, 4, 49),
    ("g1", 3242, 2, 42),
    ("consumer-group-ü", 147483223, 3, 23),
    ("\U0001f600 emoji", -1572615351, 1, 1),
    ("Aa", 2112, 2, 12),
    ("BB", 2112, 2, 12),
    ("a-very-long-group-name-with-many-characters-0123456789", -1005902765, 0, 15),
]


@pytest.mark.parametrize(("text", "hashed", "of_five", "of_fifty"), JAVA, ids=[repr(row[0]) for row in JAVA])
def test_group_placement_matches_java_and_kafka(text: str, hashed: int, of_five: int, of_fifty: int) -> None:
    assert java_string_hash(text) == hashed
    assert partition_for(text, 5) == of_five
    assert partition_for(text, 50) == of_fifty


# ---- the codec ----------------------------------------------------------------------------------

GROUP = GroupRecord(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m-1",
    state_timestamp=1_700_000_000_000,
    members=(
        MemberRecord("m-1", "client-ü", "/127.0.0.1", 300000, 10000, b"\x00sub", b"\x00assign"),
        MemberRecord("m-2", "client", "/127.0.0.2", 300000, 45000, b"", b""),
    ),
)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (OffsetKey("group", "topic-ü", 3), CommittedOffset(42, 5, "meta-ü", 1_700_000_000_000)),
        (OffsetKey("group", "topic", 0), CommittedOffset(-1, -1, "", 0)),
        (OffsetKey("group", "topic", 0), None),
        (GroupKey("group"), GROUP),
        (GroupKey("empty"), GroupRecord("consumer", 8, None, None, 0, ())),
        (GroupKey("gone"), None),
    ],
)
def test_records_round_trip(key: OffsetKey | GroupKey, value: CommittedOffset | GroupRecord | None) -> None:
    assert decode(encode_key(key), None if value is None else encode_value(value)) == (key, value)


def test_the_layout_is_kafkas() -> None:
    """Key v1 (group, topic, partition) and value v3 (offset, leader epoch, metadata, timestamp)."""
    key = encode_key(OffsetKey("g", "t", 1))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x01"
    value = encode_value(CommittedOffset(2, 3, "m", 4))
    assert value == b"\x00\x03" + (2).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"\x00\x01m" + (
        4
    ).to_bytes(8, "big")
    assert encode_key(GroupKey("g")) == b"\x00\x02\x00\x01g"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"", "without a key"),
        (b"\x00\x09\x00\x01g", None, "unknown coordinator key version 9"),
        (b"\x00\x01\x00\x05g", None, "cut off"),
        (encode_key(GroupKey("g")) + b"x", None, "after the record's end"),
        (encode_key(OffsetKey("g", "t", 0)), b"\x00\x01" + bytes(20), "version 1"),
        (encode_key(GroupKey("g")), encode_value(GROUP)[:-3], "cut off"),
        (b"\x00\x02\x00\x02\xff\xfe", None, "not UTF-8"),
    ],
)
def test_malformed_records_are_refused(key: bytes | None, value: bytes | None, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        decode(key, value)


# ---- replay --------------------------------------------------------------------------------------

SETTINGS = GroupSettings(
    initial_rebalance_delay=0.0, min_session_timeout_ms=6000, max_session_timeout_ms=300000
)


def offset_record(group: str, partition: int, offset: int | None) -> tuple[bytes, bytes | None]:
    value = None if offset is None else encode_value(CommittedOffset(offset, 0, "", 0))
    return encode_key(OffsetKey(group, "t", partition)), value


def test_replay_keeps_the_last_record_of_each_key_and_honours_tombstones() -> None:
    state = CoordinatorPartition(0, 3, SETTINGS)
    log = [
        offset_record("a", 0, 10),
        offset_record("a", 1, 5),
        (encode_key(GroupKey("a")), encode_value(GROUP)),
        offset_record("a", 0, 20),
        offset_record("a", 1, None),
        offset_record("b", 0, 7),
        (encode_key(GroupKey("b")), encode_value(GROUP)),
        (encode_key(GroupKey("b")), None),
    ]
    for offset, (key, value) in enumerate(log):
        state.replay(offset, key, value)
    assert not state.loaded
    state.finish_load(now=50.0)
    assert state.loaded
    assert state.committed("a") == {("t", 0): CommittedOffset(20, 0, "", 0)}
    assert state.committed("b") == {("t", 0): CommittedOffset(7, 0, "", 0)}
    assert state.group_ids() == ["a", "b"]
    loaded = state.group("a")
    assert loaded is not None and loaded.state is GroupState.STABLE and loaded.generation == 7
    emptied = state.group("b")  # its group record was deleted; its offsets remain
    assert emptied is not None and emptied.state is GroupState.EMPTY and emptied.generation == 0


def test_an_offset_is_replaced_only_by_a_later_record() -> None:
    state = CoordinatorPartition(0, 0, SETTINGS)
    key = OffsetKey("a", "t", 0)
    state.apply_offset(key, CommittedOffset(30, 0, "", 0), record_offset=9)
    state.apply_offset(
        key, CommittedOffset(20, 0, "", 0), record_offset=8
    )  # completed later, written earlier
    assert state.committed("a")[("t", 0)].offset == 30
    state.apply_offset(key, None, record_offset=5)
    assert state.committed("a")[("t", 0)].offset == 30
