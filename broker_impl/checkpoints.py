"""Checkpoint files: the leader-epoch cache and the high-watermark checkpoint.

Both use Kafka's text format (a version line, a count line, then one entry a line) and
Kafka's write protocol: write a temporary file, ``fsync`` it, rename it over the old one,
``fsync`` the directory.  So a checkpoint is always either the old or the new one, even
across power loss (a failed write halts a broker process: :mod:`broker_impl.log_dir_failure`)
-- while the *log* itself is only as durable as the flush policy makes
it.  That asymmetry is real Kafka behaviour and part of what the harness tests: after
power loss, an epoch entry may point past the end of the surviving log, and recovery
must trim it (:meth:`LeaderEpochCache.truncate_from_end`).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from pathlib import Path

from .log_dir_failure import halts_on_storage_error

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@halts_on_storage_error("checkpoint")
def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` durably (temp file, fsync, rename, fsync dir)."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, text.encode("ascii"))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _read_entries(path: Path) -> list[list[str]]:
    """Entries of a checkpoint file; a missing or malformed file reads as empty (as Kafka
    treats a missing one; a malformed one is reported by the caller's log)."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    if len(lines) < 2 or lines[0].strip() != "0":
        return []
    try:
        count = int(lines[1])
    except ValueError:
        return []
    entries = [line.split() for line in lines[2 : 2 + count]]
    if len(entries) != count:
        return []
    return entries


class LeaderEpochCache:
    """``(epoch, start offset)`` pairs of one partition replica, persisted on every change.

    Contract (KIP-101): epochs and start offsets both increase strictly; the entry for an
    epoch records the first offset written in that epoch.
    """

    FILE_NAME = "leader-epoch-checkpoint"

    def __init__(self, directory: Path) -> None:
        self._path = directory / self.FILE_NAME
        self._entries: list[tuple[int, int]] = []
        for fields in _read_entries(self._path):
            if len(fields) == 2 and all(field.lstrip("-").isdigit() for field in fields):
                self._entries.append((int(fields[0]), int(fields[1])))

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if already known).

        Entries with a start offset >= ``start_offset`` but a smaller epoch are removed:
        they were never written (the log was truncated under them).
        """
        if self._entries and self._entries[-1][0] >= epoch:
            return
        while self._entries and self._entries[-1][1] >= start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Answer an OffsetsForLeaderEpoch query exactly as Kafka's ``LeaderEpochFileCache``.

        * the latest epoch -> ``(epoch, log end offset)``;
        * an epoch below the latest -> ``(largest epoch <= requested, start offset of the
          next higher epoch)`` (KIP-279 returns the epoch so a follower that lacks it can
          refine); if no entry is <= requested (the cache was truncated from the start)
          -> ``(requested, start of the first higher epoch)``;
        * an epoch above the latest, or an empty cache -> ``(-1, -1)`` (undefined).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if requested_epoch == self._entries[-1][0]:
            return (requested_epoch, log_end_offset)
        epochs = [epoch for epoch, _ in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        higher_start = self._entries[higher][1]
        if higher == 0:
            return (requested_epoch, higher_start)
        return (epochs[higher - 1], higher_start)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(epoch, start) for epoch, start in self._entries if start < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._flush()

    def epoch_for_offset(self, offset: int) -> int:
        starts = [start for _, start in self._entries]
        index = bisect.bisect_right(starts, offset)
        return self._entries[index - 1][0] if index else UNDEFINED_EPOCH

    def _flush(self) -> None:
        body = "".join(f"{epoch} {start}\n" for epoch, start in self._entries)
        write_atomically(self._path, f"0\n{len(self._entries)}\n{body}")


class HighWatermarkCheckpoint:
    """``replication-offset-checkpoint``: the HW of every partition in one log dir."""

    FILE_NAME = "replication-offset-checkpoint"

    def __init__(self, log_dir: Path) -> None:
        self._path = log_dir / self.FILE_NAME

    def read(self) -> dict[tuple[str, int], int]:
        result: dict[tuple[str, int], int] = {}
        for fields in _read_entries(self._path):
            if len(fields) == 3 and fields[1].isdigit() and fields[2].lstrip("-").isdigit():
                result[(fields[0], int(fields[1]))] = int(fields[2])
        return result

    def write(self, high_watermarks: Iterable[tuple[tuple[str, int], int]]) -> None:
        entries = sorted(high_watermarks)
        body = "".join(f"{topic} {partition} {offset}\n" for (topic, partition), offset in entries)
        write_atomically(self._path, f"0\n{len(entries)}\n{body}")
