"""Checkpoint files: the leader-epoch cache (KIP-101/KIP-279 answers) and the HW checkpoint.

The expected answers of ``end_offset_for`` are Kafka's ``LeaderEpochFileCache.endOffsetFor``
(KIP-279 form): the largest epoch <= the requested one, and the start offset of the next
higher epoch (the log end offset for the latest epoch).  Files are real, fsyncs are real;
the fsync counter only wraps the real call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_impl import checkpoints
from broker_impl.checkpoints import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    HighWatermarkCheckpoint,
    LeaderEpochCache,
)


def cache_with(directory: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(directory)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


# ---- assign ------------------------------------------------------------------------------


def test_assign_appends_and_persists(tmp_path: Path) -> None:
    cache_with(tmp_path, (0, 0), (1, 5), (4, 9))
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (1, 5), (4, 9)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n1 5\n4 9\n"


def test_assign_of_a_known_or_older_epoch_is_a_no_op(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (3, 7))
    cache.assign(3, 12)
    cache.assign(2, 20)
    assert cache.entries == [(0, 0), (3, 7)]
    assert cache.latest_epoch() == 3


def test_assign_drops_older_epochs_that_start_at_or_after_the_new_start(tmp_path: Path) -> None:
    """An entry whose start offset is not below the new epoch's start was never written:
    the log was truncated under it."""
    cache = cache_with(tmp_path, (0, 0), (1, 5), (2, 8))
    cache.assign(5, 5)
    assert cache.entries == [(0, 0), (5, 5)]
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (5, 5)]


def test_empty_cache(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.entries == []
    assert cache.latest_epoch() == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 10) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH


# ---- end_offset_for (OffsetsForLeaderEpoch answers) -----------------------------------------


def test_latest_epoch_ends_at_the_log_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 10))
    assert cache.end_offset_for(2, log_end_offset=17) == (2, 17)


def test_known_older_epoch_ends_where_the_next_one_starts(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 10), (5, 14))
    assert cache.end_offset_for(0, 20) == (0, 10)
    assert cache.end_offset_for(2, 20) == (2, 14)


def test_kip279_unknown_epoch_answers_the_largest_smaller_epoch(tmp_path: Path) -> None:
    """KIP-279: asked for an epoch the leader never had, answer the largest epoch below
    it together with the start of the next one -- the follower then looks up its own end
    of *that* epoch instead of truncating to the wrong offset."""
    cache = cache_with(tmp_path, (0, 0), (2, 10), (5, 14))
    assert cache.end_offset_for(1, 20) == (0, 10)
    assert cache.end_offset_for(3, 20) == (2, 14)
    assert cache.end_offset_for(4, 20) == (2, 14)


def test_epoch_older_than_every_entry_ends_at_the_first_known_start(tmp_path: Path) -> None:
    """Kafka: "the requested epoch is smaller than any known epoch, so we return the start
    offset of the first known epoch which is larger than it" -- ``(requested, first start)``.

    Why it matters: a replica elected uncleanly with an empty log starts its cache at
    ``(E, 0)``.  The old leader comes back holding epoch-0 data and asks for epoch 0.
    Kafka answers ``(0, 0)`` and the follower truncates everything.  An undefined answer
    makes the follower fall back to its own HW and keep divergent records below it.
    """
    cache = cache_with(tmp_path, (3, 0), (5, 6))
    assert cache.end_offset_for(0, 9) == (0, 0)
    (tmp_path / "later").mkdir()
    cache = cache_with(tmp_path / "later", (3, 100))
    assert cache.end_offset_for(2, 120) == (2, 100)


def test_epoch_newer_than_every_entry_is_undefined(tmp_path: Path) -> None:
    """Kafka: "the requested epoch is larger than any known epoch" -> undefined, so the
    asker falls back rather than trusting an end offset this replica cannot vouch for."""
    cache = cache_with(tmp_path, (0, 0), (2, 10))
    assert cache.end_offset_for(7, 15) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 15) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (4, 10))
    assert [cache.epoch_for_offset(offset) for offset in (0, 9, 10, 50)] == [1, 1, 4, 4]


# ---- truncate_from_end -------------------------------------------------------------------------


def test_truncate_from_end_drops_entries_at_or_after_the_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (1, 5), (2, 8))
    cache.truncate_from_end(8)
    assert cache.entries == [(0, 0), (1, 5)]
    cache.truncate_from_end(6)
    assert cache.entries == [(0, 0), (1, 5)]  # epoch 1 still has offset 5
    cache.truncate_from_end(0)
    assert cache.entries == []
    assert LeaderEpochCache(tmp_path).entries == []


def test_malformed_epoch_file_reads_as_empty(tmp_path: Path) -> None:
    for text in ("1\n1\n0 0\n", "0\n2\n0 0\n", "0\nx\n", "", "\xff\xfe"):
        (tmp_path / "leader-epoch-checkpoint").write_bytes(text.encode("latin-1"))
        assert LeaderEpochCache(tmp_path).entries == [], text


# ---- HW checkpoint ---------------------------------------------------------------------------


def test_high_watermark_checkpoint_round_trip(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path)
    assert checkpoint.read() == {}
    values = {("orders", 0): 17, ("orders", 1): 0, ("a-b.c_d", 12): 123456789012}
    checkpoint.write(values.items())
    assert HighWatermarkCheckpoint(tmp_path).read() == values
    text = (tmp_path / "replication-offset-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "3"]  # Kafka's version and count lines
    checkpoint.write([(("orders", 0), 20)])
    assert checkpoint.read() == {("orders", 0): 20}  # a write replaces, it does not merge


# ---- atomic, durable writes ------------------------------------------------------------------


@pytest.fixture
def fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths passed to the real ``os.fsync`` (the wrapper counts, the fsync happens)."""
    seen: list[str] = []
    real_fsync: Callable[[int], None] = os.fsync

    def counting_fsync(descriptor: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return seen


def test_write_atomically_fsyncs_file_then_directory(tmp_path: Path, fsynced_paths: list[str]) -> None:
    target = tmp_path / "checkpoint"
    checkpoints.write_atomically(target, "0\n0\n")
    assert target.read_text() == "0\n0\n"
    assert fsynced_paths == [str(tmp_path / "checkpoint.tmp"), str(tmp_path)]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint"]


def test_crash_before_rename_leaves_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_with(tmp_path, (0, 0), (1, 5))

    def crash(*_: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        cache.assign(2, 9)
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (1, 5)]


def test_every_epoch_change_is_fsynced(tmp_path: Path, fsynced_paths: list[str]) -> None:
    cache = cache_with(tmp_path, (0, 0))
    count = len(fsynced_paths)
    cache.assign(1, 3)
    assert len(fsynced_paths) == count + 2
    cache.assign(1, 4)  # no change, no write
    assert len(fsynced_paths) == count + 2
    cache.truncate_from_end(3)
    assert len(fsynced_paths) == count + 4
