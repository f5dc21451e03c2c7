"""One partition replica's log: segment files of v2 record batches on a real disk.

Layout (as Kafka): ``<log.dirs>/<topic>-<partition>/<base offset, 20 digits>.log`` plus
the ``leader-epoch-checkpoint`` file.  An in-memory index of every batch (offsets,
file position, epoch, timestamps, producer fields) is rebuilt by scanning the segments
on open; the scan CRC-checks each batch and truncates the log at the first torn or
corrupt one -- that is how a replica recovers from a crash that tore its tail.

Durability is the operating system's, as in Kafka: appends are ``os.write`` into the
page cache; ``fsync`` happens only when ``flush.messages`` messages or ``flush.ms``
milliseconds have accumulated (defaults: never).  An acknowledged batch is therefore
durable only if a flush covered it -- exactly the gap power-loss faults exploit.

Every storage operation (recovery, append, roll, flush, read, truncation) is marked
``halts_on_storage_error``: in a broker process an ``OSError`` there halts the broker
(:mod:`broker_impl.log_dir_failure`, Kafka's rule for a failed log directory).

Truncation (``truncate_to``) removes whole batches: every batch whose last offset is at
or beyond the target goes, as Kafka's ``LogSegment.truncateTo`` does.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import time
from pathlib import Path

from . import records
from .checkpoints import LeaderEpochCache, fsync_directory
from .control_records import Marker, MarkerFormatError, read_marker
from .log_dir_failure import halts_on_storage_error
from .producer_state import BatchIdentity, ProducerStateTable
from .records import BatchHeader, CorruptBatch
from .txn_index import TransactionIndex

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".log"


@dataclasses.dataclass
class Segment:
    base_offset: int
    path: Path
    descriptor: int
    size: int

    def close(self) -> None:
        os.close(self.descriptor)


@dataclasses.dataclass(frozen=True, slots=True)
class IndexedBatch:
    header: BatchHeader
    segment: Segment
    position: int


@dataclasses.dataclass(frozen=True)
class FlushPolicy:
    messages: int
    milliseconds: int


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class PartitionLog:
    """Append, read, truncate and flush one replica's log.  Not thread-safe: the broker
    runs one asyncio loop and calls it from there only."""

    @halts_on_storage_error("recover")
    def __init__(self, directory: Path, segment_bytes: int, flush_policy: FlushPolicy) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._flush_policy = flush_policy
        directory.mkdir(parents=True, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self.producers = ProducerStateTable()
        self.transactions = TransactionIndex()
        self._segments: list[Segment] = []
        self._batches: list[IndexedBatch] = []
        self._last_offsets: list[int] = []
        self.log_end_offset = 0
        self.unflushed_messages = 0
        self._first_unflushed_at: float | None = None
        self.recovered_bytes_dropped = 0
        self._recover()

    # ---- recovery -------------------------------------------------------------------

    def _recover(self) -> None:
        paths = sorted(self.directory.glob("*" + SEGMENT_SUFFIX))
        expected_offset: int | None = None
        for number, path in enumerate(paths):
            base_offset = int(path.name[: -len(SEGMENT_SUFFIX)])
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            data = _read_all(descriptor)
            segment = Segment(base_offset, path, descriptor, len(data))
            self._segments.append(segment)
            valid_end = 0
            for position, header in _scan(data):
                if expected_offset is not None and header.base_offset != expected_offset:
                    logger.warning(
                        "%s: offset gap at position %d (batch %d, expected %d); truncating",
                        path,
                        position,
                        header.base_offset,
                        expected_offset,
                    )
                    break
                self._add_to_index(IndexedBatch(header, segment, position))
                expected_offset = header.last_offset + 1
                valid_end = position + header.size
            if valid_end < len(data):
                self.recovered_bytes_dropped += len(data) - valid_end
                logger.warning("%s: dropping %d bytes of torn or corrupt tail", path, len(data) - valid_end)
                os.ftruncate(descriptor, valid_end)
                segment.size = valid_end
                for later in paths[number + 1 :]:
                    later.unlink()
                break
        if not self._segments:
            self._roll(0)
        self.log_end_offset = (
            self._batches[-1].header.last_offset + 1 if self._batches else self._segments[-1].base_offset
        )
        self.epochs.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state()

    def _add_to_index(self, batch: IndexedBatch) -> None:
        self._batches.append(batch)
        self._last_offsets.append(batch.header.last_offset)

    def _rebuild_producer_state(self) -> None:
        """Rebuild the idempotence table and the transaction index from the batches held."""
        self.producers.clear()
        self.transactions.clear()
        for batch in self._batches:
            self._follow_producer(batch.header, self.read_batch(batch) if batch.header.is_control else b"")

    def _follow_producer(self, header: BatchHeader, batch: bytes | bytearray) -> None:
        """Note an appended batch in the idempotence table and the transaction index (``batch``:
        its bytes, needed only for a control batch)."""
        marker: Marker | None = None
        if header.is_control:
            try:
                marker = read_marker(header, batch)
            except MarkerFormatError as error:
                logger.warning("%s: %s", self.directory.name, error)
                return
        self.producers.record(header, marker is not None)
        self.transactions.record(header, marker)

    # ---- appends ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    def check_producer(self, header: BatchHeader) -> tuple[int, BatchIdentity | None]:
        return self.producers.check(header)

    def append_as_leader(self, batch: bytearray, header: BatchHeader, leader_epoch: int) -> tuple[int, int]:
        """Assign offsets from the log end, stamp ``leader_epoch``, append; return (first, last)."""
        base_offset = self.log_end_offset
        records.stamp(batch, base_offset, leader_epoch)
        stamped = dataclasses.replace(header, base_offset=base_offset, partition_leader_epoch=leader_epoch)
        self.epochs.assign(leader_epoch, base_offset)
        self._write(batch, stamped)
        return base_offset, stamped.last_offset

    def append_as_follower(self, data: bytes | memoryview) -> int:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        Batches wholly below the log end are skipped (already held).  Returns the number
        of batches appended.  Raises :class:`CorruptBatch` on a bad batch or a batch that
        straddles the log end (the caller truncates and refetches).

        The fetched record set is one append, as Kafka's follower appends a fetch's records in
        one call: ``flush.messages`` is checked once, after the last batch (and before a
        :class:`CorruptBatch` goes up, for the batches appended before it).  Checking after every
        batch made a follower catching up on one-record batches fsync once per record: a
        recommissioned broker's event loop sat 7.5 s in fsyncs, missed its heartbeats and was
        fenced, again and again.  Nothing is less durable: the flush still precedes the next
        fetch, which is what tells the leader the follower holds the records.
        """
        appended = 0
        try:
            for position, header in records.iterate_batches(data):
                if header.last_offset < self.log_end_offset:
                    continue
                if header.base_offset != self.log_end_offset:
                    raise CorruptBatch(
                        f"fetched batch at {header.base_offset} does not start at log end {self.log_end_offset}"
                    )
                batch = bytes(data[position : position + header.size])
                if header.partition_leader_epoch >= 0:
                    self.epochs.assign(header.partition_leader_epoch, header.base_offset)
                self._write(batch, header, flush_by_count=False)
                appended += 1
        except CorruptBatch:
            self._flush_by_count()
            raise
        self._flush_by_count()
        return appended

    @halts_on_storage_error("append")
    def _write(self, batch: bytes | bytearray, header: BatchHeader, *, flush_by_count: bool = True) -> None:
        """Append one batch at the log end; ``flush_by_count``: check ``flush.messages`` after it
        (a follower checks once after the whole fetched record set instead)."""
        segment = self._segments[-1]
        if segment.size > 0 and segment.size + len(batch) > self._segment_bytes:
            segment = self._roll(header.base_offset)
        position = segment.size
        written = os.pwrite(segment.descriptor, batch, position)
        if written != len(batch):
            raise OSError(f"short write to {segment.path}: {written} of {len(batch)} bytes")
        segment.size += written
        self._add_to_index(IndexedBatch(header, segment, position))
        self._follow_producer(header, batch)
        self.log_end_offset = header.last_offset + 1
        self.unflushed_messages += header.record_count
        if self._first_unflushed_at is None:
            self._first_unflushed_at = time.monotonic()
        if flush_by_count:
            self._flush_by_count()

    def _flush_by_count(self) -> None:
        """fsync when ``flush.messages`` messages are unflushed (Kafka's count-triggered flush)."""
        if self.unflushed_messages >= self._flush_policy.messages:
            self.flush()

    @halts_on_storage_error("roll")
    def _roll(self, base_offset: int) -> Segment:
        if self._segments:
            os.fsync(self._segments[-1].descriptor)  # Kafka flushes a segment when it rolls
        path = self.directory / segment_name(base_offset)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        segment = Segment(base_offset, path, descriptor, os.fstat(descriptor).st_size)
        self._segments.append(segment)
        fsync_directory(self.directory)
        return segment

    # ---- durability -------------------------------------------------------------------

    @halts_on_storage_error("flush")
    def flush(self) -> None:
        """fsync every segment written since the last flush."""
        if self.unflushed_messages == 0 and self._first_unflushed_at is None:
            return
        os.fsync(self._segments[-1].descriptor)
        self.unflushed_messages = 0
        self._first_unflushed_at = None

    def flush_if_due(self, now: float) -> None:
        started = self._first_unflushed_at
        if started is not None and (now - started) * 1000 >= self._flush_policy.milliseconds:
            self.flush()

    # ---- reads --------------------------------------------------------------------------

    @halts_on_storage_error("read")
    def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Batches from the one holding ``offset`` up to ``max_bytes`` (at least one batch),
        never a batch starting at or after ``max_offset``."""
        index = bisect.bisect_left(self._last_offsets, offset)
        chunks: list[bytes] = []
        total = 0
        while index < len(self._batches):
            batch = self._batches[index]
            if batch.header.base_offset >= max_offset:
                break
            if chunks and total + batch.header.size > max_bytes:
                break
            # Coalesce the run of batches that are contiguous in one segment into one pread.
            run_end = index
            run_bytes = batch.header.size
            while run_end + 1 < len(self._batches):
                following = self._batches[run_end + 1]
                if (
                    following.segment is not batch.segment
                    or following.header.base_offset >= max_offset
                    or total + run_bytes + following.header.size > max_bytes
                ):
                    break
                run_end += 1
                run_bytes += following.header.size
            chunks.append(os.pread(batch.segment.descriptor, run_bytes, batch.position))
            total += run_bytes
            index = run_end + 1
        return b"".join(chunks)

    def batches(self) -> list[IndexedBatch]:
        return list(self._batches)

    @halts_on_storage_error("read")
    def read_batch(self, batch: IndexedBatch) -> bytes:
        return os.pread(batch.segment.descriptor, batch.header.size, batch.position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """First batch whose max timestamp >= ``timestamp``: (offset, timestamp, epoch)."""
        for batch in self._batches:
            if batch.header.max_timestamp >= timestamp:
                return (
                    batch.header.base_offset,
                    batch.header.max_timestamp,
                    batch.header.partition_leader_epoch,
                )
        return None

    def max_timestamp(self) -> tuple[int, int, int] | None:
        best: IndexedBatch | None = None
        for batch in self._batches:
            if best is None or batch.header.max_timestamp > best.header.max_timestamp:
                best = batch
        if best is None:
            return None
        return (best.header.last_offset, best.header.max_timestamp, best.header.partition_leader_epoch)

    # ---- truncation ---------------------------------------------------------------------

    @halts_on_storage_error("truncate")
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; return the new log end."""
        index = bisect.bisect_left(self._last_offsets, offset)
        if index >= len(self._batches):
            return self.log_end_offset
        first_removed = self._batches[index]
        new_end = first_removed.header.base_offset
        keep_segment = first_removed.segment
        keep_index = self._segments.index(keep_segment)
        for segment in self._segments[keep_index + 1 :]:
            segment.close()
            segment.path.unlink()
        del self._segments[keep_index + 1 :]
        os.ftruncate(keep_segment.descriptor, first_removed.position)
        keep_segment.size = first_removed.position
        del self._batches[index:]
        del self._last_offsets[index:]
        self.log_end_offset = new_end
        self.epochs.truncate_from_end(new_end)
        self._rebuild_producer_state()
        return new_end

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        self._segments.clear()

    @property
    def closed(self) -> bool:
        """Closed (the replica was dropped or the broker stops): nothing may be appended."""
        return not self._segments


def _read_all(descriptor: int) -> bytes:
    size = os.fstat(descriptor).st_size
    return os.pread(descriptor, size, 0) if size else b""


def _scan(data: bytes) -> list[tuple[int, BatchHeader]]:
    """Valid batches from the start of ``data`` until the first torn or corrupt one."""
    found: list[tuple[int, BatchHeader]] = []
    position = 0
    while position < len(data):
        try:
            header = records.validate(data, position)
        except CorruptBatch:
            break
        found.append((position, header))
        position += header.size
    return found
