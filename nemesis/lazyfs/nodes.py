"""The in-memory inodes of the lazy filesystem, and how a file's unsynced content is kept and persisted.

Every node has two locations: where it is in the *current view* (``parent``/``name``, what programs see)
and where it is in the *durable state* (``durable_parent``/``durable_name``, what the backing directory
holds). They differ while namespace operations wait in the metadata journal (see ``journal.py``).

A `FileNode` keeps its content as: the backing file (durable bytes) below ``durable_floor``, overlaid by
``lost`` (bytes of a failed writeback: still in the view, never to be durable; see ``faults``), overlaid
by ``dirty`` (bytes written since the last writeback), zero-filled elsewhere up to ``size``. ``pending``
keeps the same changes as an ordered log of writes and truncates, because a torn power loss keeps a
*prefix* of that log and the overlay alone cannot tell write order. Both refer to the same ``bytes``
objects, so the log costs no copy.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from typing import NamedTuple

from nemesis.lazyfs.extents import Extents


class PendingWrite(NamedTuple):
    """``data`` written at ``offset`` since the last writeback (a tuple: one is made per write)."""

    offset: int
    data: bytes


class PendingTruncate(NamedTuple):
    """The file's size set to ``length`` since the last writeback."""

    length: int


PendingChange = PendingWrite | PendingTruncate


class Node:
    """Attributes shared by files, directories and symlinks. Identity is the object (no ``__eq__``)."""

    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "durable_name",
        "durable_parent",
        "gid",
        "mode",
        "mtime_ns",
        "name",
        "number",
        "parent",
        "uid",
    )

    def __init__(self, number: int, mode: int, uid: int, gid: int, now_ns: int) -> None:
        #: Creation order within one generation of the model: the deterministic order of torn writes.
        self.number = number
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.atime_ns = now_ns
        self.mtime_ns = now_ns
        self.ctime_ns = now_ns
        self.parent: DirectoryNode | None = None
        self.name = ""
        self.durable_parent: DirectoryNode | None = None
        self.durable_name = ""

    def attributes(self) -> dict[str, int]:
        """``stat`` fields of the current view, in the form mfusepy's ``getattr`` returns (ns times)."""
        return {
            "st_mode": self.mode,
            "st_nlink": 1,
            "st_uid": self.uid,
            "st_gid": self.gid,
            "st_size": 0,
            "st_atime": self.atime_ns,
            "st_mtime": self.mtime_ns,
            "st_ctime": self.ctime_ns,
        }

    def touch(self) -> None:
        """Record a content change now (mtime and ctime)."""
        now = time.time_ns()
        self.mtime_ns = now
        self.ctime_ns = now

    def load_times(self, status: os.stat_result) -> None:
        """Take the timestamps of a backing file."""
        self.atime_ns = status.st_atime_ns
        self.mtime_ns = status.st_mtime_ns
        self.ctime_ns = status.st_ctime_ns


class DirectoryNode(Node):
    """A directory: its children by name, in the current view."""

    __slots__ = ("children",)

    def __init__(self, number: int, mode: int, uid: int, gid: int, now_ns: int) -> None:
        super().__init__(number, stat.S_IFDIR | stat.S_IMODE(mode), uid, gid, now_ns)
        self.children: dict[str, Node] = {}

    def attributes(self) -> dict[str, int]:
        attributes = super().attributes()
        subdirectories = sum(1 for child in self.children.values() if isinstance(child, DirectoryNode))
        attributes["st_nlink"] = 2 + subdirectories
        attributes["st_size"] = 4096
        return attributes


class SymlinkNode(Node):
    """A symbolic link to ``target``."""

    __slots__ = ("target",)

    def __init__(self, number: int, target: str, uid: int, gid: int, now_ns: int) -> None:
        super().__init__(number, stat.S_IFLNK | 0o777, uid, gid, now_ns)
        self.target = target

    def attributes(self) -> dict[str, int]:
        attributes = super().attributes()
        attributes["st_size"] = len(os.fsencode(self.target))
        return attributes


class FileNode(Node):
    """A regular file whose changes since the last writeback live only here."""

    __slots__ = (
        "backing_fd",
        "dirty",
        "durable_floor",
        "durable_size",
        "lost",
        "open_handles",
        "pending",
        "size",
    )

    def __init__(self, number: int, mode: int, uid: int, gid: int, now_ns: int, durable_size: int) -> None:
        super().__init__(number, stat.S_IFREG | stat.S_IMODE(mode), uid, gid, now_ns)
        #: Open descriptor of the backing file, or None (opened on demand; see `model.LazyModel`).
        self.backing_fd: int | None = None
        #: Size of the backing file as of the last writeback.
        self.durable_size = durable_size
        #: Backing bytes at or beyond this offset are not part of the view (a truncate cut them off).
        self.durable_floor = durable_size
        #: Current size in the view.
        self.size = durable_size
        self.dirty = Extents()
        self.pending: list[PendingChange] = []
        #: Changes of a failed writeback (`lose_pending`): shown, never persisted; None when there are none.
        self.lost: Extents | None = None
        self.open_handles = 0

    def attributes(self) -> dict[str, int]:
        attributes = super().attributes()
        attributes["st_size"] = self.size
        attributes["st_blocks"] = (self.size + 511) // 512
        return attributes

    @property
    def pending_bytes(self) -> int:
        """Bytes written (not yet persisted) since the last writeback."""
        return sum(len(change.data) for change in self.pending if isinstance(change, PendingWrite))

    def write(self, offset: int, data: bytes) -> None:
        """Write into the view only."""
        self.pending.append(PendingWrite(offset, data))
        self.dirty.write(offset, data)
        if self.lost is not None:  # keep the lost overlay below current: it outlives this write's writeback
            self.lost.write(offset, data)
        end = offset + len(data)
        if end > self.size:
            self.size = end
        self.mtime_ns = self.ctime_ns = time.time_ns()

    def truncate(self, length: int) -> None:
        """Set the size in the view only; bytes past ``length`` are gone, a later extension reads zeros."""
        self.pending.append(PendingTruncate(length))
        self.dirty.truncate(length)
        if self.lost is not None:
            self.lost.truncate(length)
        self.durable_floor = min(self.durable_floor, length)
        self.size = length
        self.touch()

    def read(self, backing_fd: int | None, offset: int, size: int) -> bytes:
        """Read the view: dirty bytes over durable bytes over zeros. ``backing_fd`` may be None only
        when no durable byte is visible (``durable_floor == 0``)."""
        end = min(offset + size, self.size)
        if end <= offset:
            return b""
        if not self.pending and self.lost is None and backing_fd is not None:
            return _pread_exactly(backing_fd, end - offset, offset)
        result = bytearray(end - offset)
        durable_end = min(end, self.durable_floor)
        if durable_end > offset:
            if backing_fd is None:
                raise AssertionError(f"file #{self.number} shows durable bytes but has no backing file")
            durable = _pread_exactly(backing_fd, durable_end - offset, offset)
            result[: len(durable)] = durable
        if self.lost is not None:
            for start, piece in self.lost.overlapping(offset, end):
                result[start - offset : start - offset + len(piece)] = piece
        for start, piece in self.dirty.overlapping(offset, end):
            result[start - offset : start - offset + len(piece)] = piece
        return bytes(result)

    def write_back(self, backing_fd: int) -> None:
        """Make the backing file equal the view, fsync it, and forget the pending changes."""
        backing_size = self.durable_size
        if self.durable_floor < backing_size:
            os.ftruncate(backing_fd, self.durable_floor)
            backing_size = self.durable_floor
        for start, pieces in self.dirty.runs():
            _pwrite_all(backing_fd, pieces, start)
            backing_size = max(backing_size, start + sum(len(piece) for piece in pieces))
        if backing_size != self.size:
            os.ftruncate(backing_fd, self.size)
        os.fsync(backing_fd)
        self.durable_size = self.size
        self.durable_floor = self.size
        self.forget_pending()

    def write_back_prefix(self, backing_fd: int, keep: int, partial: int) -> int:
        """Persist only the first ``keep`` pending changes plus the first ``partial`` bytes of the next
        one (a write), as a power cut during writeback would; return the number of data bytes kept.
        The view is left as it was: the caller discards it."""
        kept_bytes = 0
        for change in self.pending[:keep]:
            if isinstance(change, PendingWrite):
                _pwrite_all(backing_fd, [change.data], change.offset)
                kept_bytes += len(change.data)
            else:
                os.ftruncate(backing_fd, change.length)
        if partial:
            cut = self.pending[keep]
            if not isinstance(cut, PendingWrite) or partial >= len(cut.data):
                raise AssertionError(
                    f"cannot keep {partial} bytes of pending change {keep} of #{self.number}"
                )
            _pwrite_all(backing_fd, [cut.data[:partial]], cut.offset)
            kept_bytes += partial
        os.fsync(backing_fd)
        return kept_bytes

    def forget_pending(self) -> None:
        """Drop the dirty overlay and the log (after writeback, or when the node can never persist)."""
        self.pending.clear()
        self.dirty.clear()
        self.size = self.durable_size
        self.durable_floor = self.durable_size
        if self.lost is not None:
            self.lost.truncate(self.size)

    def lose_pending(self) -> None:
        """A failed writeback: the pending changes will never reach the backing file (no later
        writeback writes them), but the view keeps showing them, as the page cache keeps pages
        the kernel marked clean after a write error.  Size and ``durable_floor`` stay: the view
        does not change."""
        lost = self.lost if self.lost is not None else Extents()
        for start, pieces in self.dirty.runs():
            for piece in pieces:
                lost.write(start, piece)
                start += len(piece)
        self.lost = lost
        self.pending.clear()
        self.dirty.clear()


def load_tree(backing_root: str, new_number: Callable[[], int]) -> DirectoryNode:
    """Nodes for everything under ``backing_root`` (names and attributes; no file data), all durable
    where they are. ``new_number`` numbers them; siblings are visited in name order, so the same tree
    always gets the same numbers."""
    root_status = os.lstat(backing_root)
    root = DirectoryNode(0, root_status.st_mode, root_status.st_uid, root_status.st_gid, 0)
    root.load_times(root_status)
    unvisited: list[tuple[DirectoryNode, str]] = [(root, backing_root)]
    while unvisited:
        directory, directory_path = unvisited.pop()
        with os.scandir(directory_path) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            status = entry.stat(follow_symlinks=False)
            number = new_number()
            node: Node
            if stat.S_ISDIR(status.st_mode):
                node = DirectoryNode(number, status.st_mode, status.st_uid, status.st_gid, 0)
                unvisited.append((node, entry.path))
            elif stat.S_ISREG(status.st_mode):
                node = FileNode(number, status.st_mode, status.st_uid, status.st_gid, 0, status.st_size)
            elif stat.S_ISLNK(status.st_mode):
                node = SymlinkNode(number, os.readlink(entry.path), status.st_uid, status.st_gid, 0)
            else:
                raise OSError(
                    errno.EINVAL, f"lazyfs serves files, directories and symlinks only: {entry.path}"
                )
            node.load_times(status)
            node.parent = node.durable_parent = directory
            node.name = node.durable_name = entry.name
            directory.children[entry.name] = node
    return root


def _pread_exactly(fd: int, size: int, offset: int) -> bytes:
    """``pread`` until ``size`` bytes or end of file (a short read from a backing file is legal)."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _pwrite_all(fd: int, pieces: list[bytes], offset: int) -> None:
    """Write ``pieces`` back to back from ``offset`` with ``pwritev``, resuming after short writes."""
    written = os.pwritev(fd, pieces, offset)
    total = sum(len(piece) for piece in pieces)
    if written == total:
        return
    rest = memoryview(b"".join(pieces))[written:]
    offset += written
    while rest:
        written = os.pwrite(fd, rest, offset)
        rest = rest[written:]
        offset += written
