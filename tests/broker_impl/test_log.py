"""One replica's log on a real disk: segments, reads, truncation, crash recovery, flushes,
and the idempotent-producer table that lives beside it.

Recovery is tested the way crashes damage files: the segment is cut mid-batch or a byte
under the CRC is flipped, then the log is reopened; it must come back holding exactly the
batches before the damage, no more, no fewer.  fsyncs are counted by wrapping the real
``os.fsync`` (it still runs) and resolving each descriptor to its path.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_impl import dump, records
from broker_impl.config import NEVER
from broker_impl.log import FlushPolicy, PartitionLog, segment_name
from broker_impl.producer_state import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    REMEMBERED_BATCHES,
)
from broker_impl.records import CorruptBatch

from .batch_builder import make_batch

NO_FLUSH = FlushPolicy(messages=NEVER, milliseconds=NEVER)
SMALL_SEGMENT = 400  # a few batches per segment file


def open_log(
    directory: Path, segment_bytes: int = SMALL_SEGMENT, policy: FlushPolicy = NO_FLUSH
) -> PartitionLog:
    return PartitionLog(directory, segment_bytes, policy)


@pytest.fixture
def log_directory(tmp_path: Path) -> Path:
    return tmp_path / "orders-0"


@pytest.fixture
def log(log_directory: Path) -> Iterator[PartitionLog]:
    opened = open_log(log_directory)
    yield opened
    opened.close()


def append(log: PartitionLog, values: list[bytes], epoch: int = 0) -> tuple[int, int]:
    batch = make_batch(values)
    return log.append_as_leader(batch, records.validate(batch), epoch)


def fill(log: PartitionLog, batches: int, per_batch: int = 2, epoch: int = 0) -> None:
    for number in range(batches):
        append(log, [f"{number}-{index}-".encode() * 4 for index in range(per_batch)], epoch)


def contents(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record, read through the public read path."""
    data = log.read(0, 1 << 30, log.log_end_offset)
    found: list[tuple[int, bytes | None]] = []
    for position, header in records.iterate_batches(data):
        batch = data[position : position + header.size]
        found.extend((record.offset, record.value) for record in records.decode_records(batch))
    return found


def segment_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.log"))


# ---- appends, segments, reads -------------------------------------------------------------


def test_leader_appends_assign_offsets_and_stamp_the_epoch(log: PartitionLog) -> None:
    assert append(log, [b"a", b"b"], epoch=7) == (0, 1)
    assert append(log, [b"c", b"d", b"e"], epoch=7) == (2, 4)
    assert append(log, [b"f"], epoch=9) == (5, 5)
    assert log.log_end_offset == 6
    headers = [batch.header for batch in log.batches()]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (2, 7), (5, 9)]
    assert log.epochs.entries == [(7, 0), (9, 5)]
    assert contents(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]


def test_segments_roll_at_the_configured_size(log: PartitionLog, log_directory: Path) -> None:
    fill(log, 20)
    names = segment_files(log_directory)
    assert len(names) > 3
    first_offsets = {batch.segment.base_offset: batch.header.base_offset for batch in reversed(log.batches())}
    assert names == [segment_name(offset) for offset in sorted(first_offsets)]
    for base_offset, first in first_offsets.items():
        assert base_offset == first  # a segment is named after its first batch
    for name in names:
        assert (log_directory / name).stat().st_size <= SMALL_SEGMENT
    assert [offset for offset, _ in contents(log)] == list(range(40))


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(
    log: PartitionLog, log_directory: Path
) -> None:
    append(log, [b"x" * 1000])
    append(log, [b"y"])
    assert len(segment_files(log_directory)) == 2
    assert [value for _, value in contents(log)] == [b"x" * 1000, b"y"]


def test_reads_start_at_the_batch_holding_the_offset(log: PartitionLog) -> None:
    fill(log, 20)  # batches of two records: 0-1, 2-3, ...
    for offset in range(40):
        data = log.read(offset, 1, log.log_end_offset)
        header = records.validate(data)
        assert header.size == len(data)  # at least one batch, even over max_bytes
        assert header.base_offset == offset - offset % 2
    assert log.read(40, 1 << 20, 40) == b""


def test_reads_cross_segments_and_respect_both_limits(log: PartitionLog) -> None:
    fill(log, 20)
    batch_size = log.batches()[0].header.size
    data = log.read(3, 5 * batch_size, log.log_end_offset)
    assert [h.base_offset for _, h in records.iterate_batches(data)] == [2, 4, 6, 8, 10]
    data = log.read(0, 1 << 20, max_offset=7)
    assert [h.base_offset for _, h in records.iterate_batches(data)] == [0, 2, 4, 6]  # 6 < 7 starts before


def test_timestamps_for_list_offsets(log: PartitionLog) -> None:
    for number in range(3):
        batch = make_batch([b"v"], timestamp=1000 * (number + 1))
        log.append_as_leader(batch, records.validate(batch), 0)
    assert log.offset_for_timestamp(1500) == (1, 2000, 0)
    assert log.offset_for_timestamp(5000) is None
    assert log.max_timestamp() == (2, 3000, 0)


def test_reopening_rebuilds_the_same_log(log: PartitionLog, log_directory: Path) -> None:
    fill(log, 10, epoch=1)
    fill(log, 10, epoch=3)
    before = (contents(log), log.log_end_offset, log.epochs.entries, [b.header for b in log.batches()])
    log.close()
    reopened = open_log(log_directory)
    try:
        after = (
            contents(reopened),
            reopened.log_end_offset,
            reopened.epochs.entries,
            [b.header for b in reopened.batches()],
        )
        assert after == before
        assert reopened.recovered_bytes_dropped == 0
        assert append(reopened, [b"next"], epoch=3) == (40, 40)
    finally:
        reopened.close()


# ---- truncation ----------------------------------------------------------------------------


def test_truncation_across_segments(log: PartitionLog, log_directory: Path) -> None:
    fill(log, 10, epoch=1)
    fill(log, 10, epoch=2)  # offsets 20.. are epoch 2
    segments_before = segment_files(log_directory)
    assert log.truncate_to(8) == 8
    assert log.log_end_offset == 8
    assert [offset for offset, _ in contents(log)] == list(range(8))
    assert log.epochs.entries == [(1, 0)]
    remaining = segment_files(log_directory)
    assert remaining == [name for name in segments_before if int(name[:-4]) <= 8][: len(remaining)]
    assert all(int(name[:-4]) < 8 for name in remaining)
    assert append(log, [b"after"], epoch=4) == (8, 8)
    log.close()
    reopened = open_log(log_directory)
    try:
        assert [offset for offset, _ in contents(reopened)] == list(range(9))
        assert reopened.epochs.entries == [(1, 0), (4, 8)]
    finally:
        reopened.close()


def test_truncation_inside_a_batch_removes_the_whole_batch(log: PartitionLog) -> None:
    append(log, [b"a", b"b"])
    append(log, [b"c", b"d", b"e"])
    assert log.truncate_to(3) == 2  # offset 3 is inside batch 2..4
    assert contents(log) == [(0, b"a"), (1, b"b")]


def test_truncation_at_or_beyond_the_end_changes_nothing(log: PartitionLog) -> None:
    fill(log, 3)
    assert log.truncate_to(6) == 6
    assert log.truncate_to(100) == 6
    assert len(contents(log)) == 6


# ---- crash recovery: torn and corrupt tails -------------------------------------------------


def last_segment(directory: Path) -> Path:
    return directory / segment_files(directory)[-1]


@pytest.mark.parametrize("kept_bytes_of_last_batch", [1, 11, 60, 70])
def test_torn_tail_is_cut_back_to_the_last_whole_batch(
    log: PartitionLog, log_directory: Path, kept_bytes_of_last_batch: int
) -> None:
    fill(log, 7)
    last = log.batches()[-1]
    good_end = last.position
    log.close()
    path = last_segment(log_directory)
    size = path.stat().st_size
    assert size == good_end + last.header.size
    os.truncate(path, good_end + kept_bytes_of_last_batch)
    recovered = open_log(log_directory)
    try:
        assert recovered.log_end_offset == last.header.base_offset
        assert [offset for offset, _ in contents(recovered)] == list(range(last.header.base_offset))
        assert path.stat().st_size == good_end  # the torn bytes are gone from the file too
        assert recovered.recovered_bytes_dropped == kept_bytes_of_last_batch
        assert append(recovered, [b"new"]) == (last.header.base_offset, last.header.base_offset)
    finally:
        recovered.close()


def test_corrupt_crc_mid_segment_truncates_before_that_batch(log: PartitionLog, log_directory: Path) -> None:
    fill(log, 12)
    in_last_segment = [b for b in log.batches() if b.segment is log.batches()[-1].segment]
    assert len(in_last_segment) >= 2
    victim = in_last_segment[-2]
    log.close()
    path = last_segment(log_directory)
    with open(path, "r+b") as segment:
        segment.seek(victim.position + victim.header.size - 1)  # the last value byte: CRC-covered
        byte = segment.read(1)
        segment.seek(-1, os.SEEK_CUR)
        segment.write(bytes([byte[0] ^ 0xFF]))
    recovered = open_log(log_directory)
    try:
        assert recovered.log_end_offset == victim.header.base_offset
        assert path.stat().st_size == victim.position
        assert [offset for offset, _ in contents(recovered)] == list(range(victim.header.base_offset))
    finally:
        recovered.close()


def test_corruption_in_an_early_segment_drops_every_later_segment(
    log: PartitionLog, log_directory: Path
) -> None:
    fill(log, 10, epoch=1)
    fill(log, 10, epoch=2)
    victim = next(b for b in log.batches() if b.header.base_offset == 6)
    later = [name for name in segment_files(log_directory) if int(name[:-4]) > victim.segment.base_offset]
    assert later
    log.close()
    with open(victim.segment.path, "r+b") as segment:
        segment.seek(victim.position + 30)
        segment.write(b"\x00\x00\x00\x00")
    recovered = open_log(log_directory)
    try:
        assert recovered.log_end_offset == 6
        assert all(not (log_directory / name).exists() for name in later)
        assert recovered.epochs.entries == [(1, 0)]  # epoch 2 started beyond the surviving log
    finally:
        recovered.close()


# ---- a model check: any mix of appends, truncations and reopenings -----------------------------

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"), st.integers(min_value=1, max_value=4), st.integers(min_value=0, max_value=3)
        ),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=60), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=operations)
def test_log_matches_a_list_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    directory = tmp_path_factory.mktemp("model") / "t-0"
    model: list[tuple[int, bytes]] = []  # (epoch, value) per offset
    log = open_log(directory, segment_bytes=300)
    epoch = 0
    try:
        for action, amount, epoch_step in steps:
            if action == "append":
                epoch += epoch_step
                values = [f"v{len(model) + index}".encode() for index in range(amount)]
                append(log, values, epoch=epoch)
                model.extend((epoch, value) for value in values)
            elif action == "truncate":
                new_end = log.truncate_to(amount)
                # Whole batches only: the new end is a batch boundary at or below the target.
                assert new_end <= max(amount, 0) or new_end == len(model)
                del model[new_end:]
            else:
                log.close()
                log = open_log(directory, segment_bytes=300)
            assert log.log_end_offset == len(model)
            assert [value for _, value in contents(log)] == [value for _, value in model]
            assert [offset for offset, _ in contents(log)] == list(range(len(model)))
            assert all(
                log.epochs.epoch_for_offset(offset) == model_epoch
                for offset, (model_epoch, _) in enumerate(model)
            )
    finally:
        log.close()


# ---- follower appends ---------------------------------------------------------------------------


def leader_bytes(tmp_path: Path) -> tuple[bytes, int]:
    leader = open_log(tmp_path / "leader" / "t-0")
    fill(leader, 3, epoch=2)
    fill(leader, 2, epoch=5)
    data = leader.read(0, 1 << 20, leader.log_end_offset)
    end = leader.log_end_offset
    leader.close()
    return data, end


def test_follower_keeps_offsets_and_epochs_and_skips_what_it_has(tmp_path: Path, log: PartitionLog) -> None:
    data, end = leader_bytes(tmp_path)
    assert log.append_as_follower(data) == 5
    assert log.log_end_offset == end
    assert log.epochs.entries == [(2, 0), (5, 6)]
    assert log.append_as_follower(data) == 0  # a refetch of held batches appends nothing
    assert log.log_end_offset == end


def test_follower_refuses_a_batch_that_does_not_start_at_its_end(tmp_path: Path, log: PartitionLog) -> None:
    data, _ = leader_bytes(tmp_path)
    first = records.validate(data)
    with pytest.raises(CorruptBatch, match="does not start at log end 0"):
        log.append_as_follower(data[first.size :])
    assert log.log_end_offset == 0


# ---- idempotent producers ---------------------------------------------------------------------


def producer_batch(sequence: int, count: int = 2, epoch: int = 0, producer_id: int = 4000) -> bytearray:
    return make_batch([b"p"] * count, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def check(log: PartitionLog, batch: bytearray) -> tuple[int, tuple[int, int] | None]:
    error, duplicate = log.check_producer(records.validate(batch))
    return error, None if duplicate is None else (duplicate.base_offset, duplicate.last_offset)


def append_checked(log: PartitionLog, batch: bytearray) -> tuple[int, int]:
    assert check(log, batch) == (0, None)
    return log.append_as_leader(batch, records.validate(batch), 0)


def test_a_retried_batch_is_answered_with_its_original_offsets(log: PartitionLog) -> None:
    append(log, [b"other"])
    assert append_checked(log, producer_batch(0)) == (1, 2)
    assert append_checked(log, producer_batch(2)) == (3, 4)
    assert check(log, producer_batch(0)) == (0, (1, 2))
    assert check(log, producer_batch(2)) == (0, (3, 4))


def test_sequence_gaps_and_old_epochs_are_rejected(log: PartitionLog) -> None:
    append_checked(log, producer_batch(0))
    assert check(log, producer_batch(5)) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert check(log, producer_batch(1)) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)  # overlaps, not a retry
    assert check(log, producer_batch(2)) == (0, None)
    append_checked(log, producer_batch(0, epoch=1))  # a bumped epoch restarts at 0
    assert check(log, producer_batch(2, epoch=0)) == (INVALID_PRODUCER_EPOCH, None)
    assert check(log, producer_batch(3, epoch=2)) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert check(log, producer_batch(7, producer_id=9999)) == (0, None)  # unknown producer: accepted
    assert check(log, make_batch([b"plain"])) == (0, None)


def test_only_the_last_five_batches_are_remembered(log: PartitionLog) -> None:
    for number in range(REMEMBERED_BATCHES + 1):
        append_checked(log, producer_batch(2 * number))
    assert check(log, producer_batch(2)) == (0, (2, 3))
    assert check(log, producer_batch(0)) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)


def test_producer_state_survives_reopening_and_follows_truncation(
    log: PartitionLog, log_directory: Path
) -> None:
    append_checked(log, producer_batch(0))
    append_checked(log, producer_batch(2))
    log.close()
    reopened = open_log(log_directory)
    try:
        assert check(reopened, producer_batch(2)) == (0, (2, 3))  # rebuilt from the segments
        reopened.truncate_to(2)
        # The batch is gone from the log, so its retry must be appended again, not "deduped"
        # to offsets that no longer hold it.
        assert check(reopened, producer_batch(2)) == (0, None)
        assert append_checked(reopened, producer_batch(2)) == (2, 3)
    finally:
        reopened.close()


# ---- flush policy: fsync only when flush.messages / flush.ms say so ---------------------------


@pytest.fixture
def segment_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of segment files passed to the real ``os.fsync`` (other fsyncs are ignored)."""
    seen: list[str] = []
    real_fsync: Callable[[int], None] = os.fsync

    def counting_fsync(descriptor: int) -> None:
        path = os.readlink(f"/proc/self/fd/{descriptor}")
        if path.endswith(".log"):
            seen.append(Path(path).name)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return seen


def test_default_policy_never_fsyncs_segments(log_directory: Path, segment_fsyncs: list[str]) -> None:
    log = open_log(log_directory, segment_bytes=1 << 30)
    try:
        fill(log, 200)
        log.flush_if_due(time.monotonic() + 10 * 365 * 86400)  # ten years later: still never
        assert segment_fsyncs == []
    finally:
        log.close()


def test_flush_messages_fsyncs_every_n_messages(log_directory: Path, segment_fsyncs: list[str]) -> None:
    log = open_log(log_directory, segment_bytes=1 << 30, policy=FlushPolicy(messages=3, milliseconds=NEVER))
    try:
        append(log, [b"1", b"2"])
        assert segment_fsyncs == []
        assert log.unflushed_messages == 2
        append(log, [b"3"])
        assert segment_fsyncs == [segment_name(0)]
        assert log.unflushed_messages == 0
        append(log, [b"4", b"5", b"6", b"7"])  # one batch over the threshold: one fsync
        assert len(segment_fsyncs) == 2
    finally:
        log.close()


def test_flush_messages_one_fsyncs_every_append(log_directory: Path, segment_fsyncs: list[str]) -> None:
    log = open_log(log_directory, segment_bytes=1 << 30, policy=FlushPolicy(messages=1, milliseconds=NEVER))
    try:
        fill(log, 5)
        assert len(segment_fsyncs) == 5
    finally:
        log.close()


def test_flush_ms_fsyncs_once_the_oldest_unflushed_data_is_old_enough(
    log_directory: Path, segment_fsyncs: list[str]
) -> None:
    log = open_log(log_directory, segment_bytes=1 << 30, policy=FlushPolicy(messages=NEVER, milliseconds=200))
    try:
        log.flush_if_due(1e12)
        assert segment_fsyncs == []  # nothing unflushed, nothing to do
        appended_at = time.monotonic()
        append(log, [b"a"])
        log.flush_if_due(appended_at + 0.1)
        assert segment_fsyncs == []
        append(log, [b"b"])  # a later append does not restart the clock
        log.flush_if_due(appended_at + 0.25)
        assert segment_fsyncs == [segment_name(0)]
        log.flush_if_due(appended_at + 10)
        assert len(segment_fsyncs) == 1  # flushed data is not flushed again
    finally:
        log.close()


def test_a_follower_fsyncs_a_fetched_record_set_once_as_one_append(
    tmp_path: Path, log_directory: Path, segment_fsyncs: list[str]
) -> None:
    """Kafka checks flush.messages once per append, and a follower's append is a whole fetch: a
    follower catching up on one-record batches must not fsync once per batch (a recommissioned
    broker sat 7.5 s in fsyncs and was fenced)."""
    data, end = leader_bytes(tmp_path)
    segment_fsyncs.clear()  # the leader's own
    log = open_log(log_directory, segment_bytes=1 << 30, policy=FlushPolicy(messages=1, milliseconds=NEVER))
    try:
        assert log.append_as_follower(data) == 5
        assert segment_fsyncs == [segment_name(0)]
        assert log.unflushed_messages == 0 and log.log_end_offset == end  # all of it durable
    finally:
        log.close()


def test_a_follower_fsyncs_what_it_appended_before_a_bad_batch(
    tmp_path: Path, log_directory: Path, segment_fsyncs: list[str]
) -> None:
    data, _ = leader_bytes(tmp_path)
    first = records.validate(data)
    second = records.validate(data[first.size :])
    gapped = data[: first.size] + data[first.size + second.size :]  # batch 0, then batch 2
    segment_fsyncs.clear()  # the leader's own
    log = open_log(log_directory, segment_bytes=1 << 30, policy=FlushPolicy(messages=1, milliseconds=NEVER))
    try:
        with pytest.raises(CorruptBatch, match="does not start at log end 2"):
            log.append_as_follower(gapped)
        assert log.log_end_offset == 2
        assert segment_fsyncs == [segment_name(0)] and log.unflushed_messages == 0
    finally:
        log.close()


def test_rolling_a_segment_fsyncs_the_one_it_closes(log: PartitionLog, segment_fsyncs: list[str]) -> None:
    fill(log, 10)
    rolled = segment_files(log.directory)[:-1]
    assert rolled
    assert segment_fsyncs == rolled


def test_the_summary_dump_is_the_full_dump_without_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m broker_impl.dump --summary`` (what a scenario's waits read while the broker
    runs, every poll) prints exactly the full dump's partition lines, and decodes no record."""
    log = open_log(tmp_path / "orders-0")
    fill(log, 3)
    log.close()
    full, summary = io.StringIO(), io.StringIO()
    assert dump.dump(tmp_path, full) == 1
    with monkeypatch.context() as patched:
        patched.setattr(
            dump.records, "decode_records", lambda batch: pytest.fail("the summary decoded a record")
        )
        assert dump.dump(tmp_path, summary, summary=True) == 1
    partition_lines = [
        line for line in full.getvalue().splitlines() if json.loads(line)["type"] == "partition"
    ]
    assert len(full.getvalue().splitlines()) == 7  # six records and the partition line
    assert summary.getvalue().splitlines() == partition_lines
    assert json.loads(partition_lines[0])["log_end_offset"] == 6
