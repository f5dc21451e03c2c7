"""Transactional offset commits in a group coordinator's partition (``coordinator_partition``).

TxnOffsetCommit's records are pending under their producer id until the transaction's marker:
COMMIT applies them at their own record offsets (so a later plain commit still wins), ABORT drops
them -- replayed from the log exactly as they happened live.
"""

from __future__ import annotations

from broker_impl.control_records import Marker, build_marker_batch
from broker_impl.coordinator_partition import CoordinatorPartition
from broker_impl.group_records import CommittedOffset, OffsetKey, encode_key, encode_value
from broker_impl.group_state import GroupSettings
from broker_impl.records import validate

SETTINGS = GroupSettings(
    initial_rebalance_delay=0.0, min_session_timeout_ms=6000, max_session_timeout_ms=30000
)
KEY = OffsetKey("g", "t", 0)


def value(offset: int) -> bytes:
    return encode_value(CommittedOffset(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=1))


def marker(producer_id: int, committed: bool) -> tuple[object, bytes]:
    batch = build_marker_batch(Marker(producer_id, 0, committed, 0), 1)
    return validate(batch), bytes(batch)


def offset_of(state: CoordinatorPartition) -> int | None:
    found = state.committed("g").get(("t", 0))
    return None if found is None else found.offset


def test_a_transactional_commit_counts_only_after_its_commit_marker() -> None:
    state = CoordinatorPartition(0, 0, SETTINGS)
    state.replay(0, encode_key(KEY), value(5))  # a plain commit
    state.replay(1, encode_key(KEY), value(9), producer_id=77)  # transactional: pending
    assert offset_of(state) == 5
    header, batch = marker(77, committed=True)
    state.replay_marker(header, batch)  # type: ignore[arg-type]
    assert offset_of(state) == 9
    assert state.pending_transactions == {}


def test_an_aborted_transactional_commit_is_dropped() -> None:
    state = CoordinatorPartition(0, 0, SETTINGS)
    state.replay(0, encode_key(KEY), value(5))
    state.replay(1, encode_key(KEY), value(9), producer_id=77)
    state.complete_transaction(77, committed=False)
    assert offset_of(state) == 5


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one() -> None:
    state = CoordinatorPartition(0, 0, SETTINGS)
    state.add_pending(77, KEY, CommittedOffset(9, -1, "", 1), 1)
    state.apply_offset(KEY, CommittedOffset(12, -1, "", 1), 2)
    state.complete_transaction(77, committed=True)
    assert offset_of(state) == 12
