"""A sparse overlay of byte ranges: the not-yet-durable bytes of one file.

`Extents` keeps disjoint pieces ``(start, data)`` in offset order, where ``data`` is the very ``bytes``
object a write delivered. Nothing is copied on the write path: an append (the broker's segment files)
is one list append, and the pending-write log (``nodes.FileNode.pending``) shares the same objects, so
unsynced data costs its size once. Copying every 4 KiB write into a growing ``bytearray`` instead cost
more (page faults on fresh memory) than the rest of the write path in Python together.

An overwrite trims the pieces it overlaps (slices of ``bytes`` are copies, bounded by the size of the
trimmed pieces) and inserts the new data between them. Reads elsewhere fall through to the backing file
(see `nodes.FileNode.read`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

#: Pieces handed to one ``pwritev`` (Linux's IOV_MAX).
MAX_PIECES_PER_RUN = 1024


class Extents:
    """Disjoint byte pieces of one file in offset order; adjacent pieces are not merged."""

    __slots__ = ("_pieces", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._pieces: list[bytes] = []

    def __len__(self) -> int:
        """Number of pieces."""
        return len(self._starts)

    @property
    def byte_count(self) -> int:
        """Total number of bytes held."""
        return sum(len(piece) for piece in self._pieces)

    @property
    def end(self) -> int:
        """One past the last byte held, 0 when empty."""
        if not self._starts:
            return 0
        return self._starts[-1] + len(self._pieces[-1])

    def clear(self) -> None:
        """Forget every piece."""
        self._starts.clear()
        self._pieces.clear()

    def write(self, offset: int, data: bytes) -> None:
        """Store ``data`` (kept by reference: it must not change) at ``offset``, replacing any bytes it
        overlaps."""
        if not data:
            return
        starts, pieces = self._starts, self._pieces
        if not starts or offset >= starts[-1] + len(pieces[-1]):
            starts.append(offset)  # the append fast path
            pieces.append(data)
            return
        end = offset + len(data)
        first = bisect.bisect_right(starts, offset) - 1  # first piece ending after `offset`
        if first < 0 or starts[first] + len(pieces[first]) <= offset:
            first += 1
        stop = bisect.bisect_left(starts, end)  # pieces [first, stop) start before `end`
        new_starts: list[int] = []
        new_pieces: list[bytes] = []
        if first < stop and starts[first] < offset:
            new_starts.append(starts[first])
            new_pieces.append(pieces[first][: offset - starts[first]])
        new_starts.append(offset)
        new_pieces.append(data)
        if first < stop:
            last_start, last_piece = starts[stop - 1], pieces[stop - 1]
            if last_start + len(last_piece) > end:
                new_starts.append(end)
                new_pieces.append(last_piece[end - last_start :])
        starts[first:stop] = new_starts
        pieces[first:stop] = new_pieces

    def truncate(self, length: int) -> None:
        """Forget every byte at or beyond ``length``."""
        keep = bisect.bisect_left(self._starts, length)
        del self._starts[keep:]
        del self._pieces[keep:]
        if self._starts and self._starts[-1] + len(self._pieces[-1]) > length:
            self._pieces[-1] = self._pieces[-1][: length - self._starts[-1]]

    def overlapping(self, low: int, high: int) -> Iterator[tuple[int, memoryview]]:
        """Yield ``(start, bytes)`` for each part of a piece inside ``[low, high)``, in offset order
        (zero-copy views: the pieces are immutable)."""
        starts, pieces = self._starts, self._pieces
        if high <= low or not starts:
            return
        index = max(bisect.bisect_right(starts, low) - 1, 0)
        while index < len(starts):
            start = starts[index]
            if start >= high:
                return
            piece = pieces[index]
            piece_end = start + len(piece)
            if piece_end > low:
                clipped_start = max(start, low)
                yield clipped_start, memoryview(piece)[clipped_start - start : min(piece_end, high) - start]
            index += 1

    def runs(self) -> Iterator[tuple[int, list[bytes]]]:
        """Yield ``(start, pieces)`` for each run of back-to-back pieces (at most `MAX_PIECES_PER_RUN`
        per run), in offset order: one ``pwritev`` each at writeback."""
        starts, pieces = self._starts, self._pieces
        index = 0
        while index < len(starts):
            run_start = starts[index]
            run = [pieces[index]]
            next_offset = run_start + len(pieces[index])
            index += 1
            while index < len(starts) and starts[index] == next_offset and len(run) < MAX_PIECES_PER_RUN:
                run.append(pieces[index])
                next_offset += len(pieces[index])
                index += 1
            yield run_start, run
