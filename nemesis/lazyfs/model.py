"""The lazy filesystem's state: the current view, what is durable, and the power-loss operations.

`LazyModel` is everything but the FUSE plumbing, so its semantics can be exercised on a plain directory.
It is not thread-safe: libfuse runs single-threaded here (see ``fuse_adapter``), so one thread calls it.

The durability model (ext4 ``data=ordered`` without its rename/truncate heuristics; see the package
docstring for the full statement) in the terms of this module:

- file data and size changes go to the node's ``pending`` log and ``dirty`` overlay, and reach the
  backing file only in `fsync_file` (that file alone) or `sync_all`;
- namespace changes (create, mkdir, symlink, unlink, rmdir, rename) and chmod/chown go to the metadata
  journal, which `commit_journal` applies in order; every ``fsync``/``fdatasync`` of any file and every
  directory fsync commits the whole journal first, as a jbd2 commit carries every earlier metadata change;
- `drop` discards the journal and all pending data; `torn` applies a seeded prefix of each.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
from collections.abc import Callable, Iterable
from typing import NoReturn

from nemesis.lazyfs import journal
from nemesis.lazyfs.nodes import DirectoryNode, FileNode, Node, PendingWrite, SymlinkNode, load_tree
from nemesis.lazyfs.protocol import CONTROL_FILE_NAME

#: Longest name a directory entry may have (as on ext4), in bytes.
NAME_MAX = 255


def fail(code: int, detail: str = "") -> NoReturn:
    """Raise the OSError that FUSE turns into ``-code`` for the caller."""
    message = os.strerror(code) if not detail else f"{os.strerror(code)}: {detail}"
    raise OSError(code, message)


class LazyModel:
    """The filesystem state served from ``backing_root``; see the module docstring."""

    def __init__(self, backing_root: str) -> None:
        self.backing_root = os.path.realpath(backing_root)
        #: Bumped by every power loss; handles from an older generation fail with EIO.
        self.generation = 0
        self._is_superuser = os.geteuid() == 0
        self._next_handle = 1
        self._next_number = 0
        self._journal: list[journal.JournalEntry] = []
        self._dirty: dict[int, FileNode] = {}
        self._with_descriptor: dict[int, FileNode] = {}
        self._handles: dict[int, Node] = {}
        self.root = self._load()

    # ----------------------------------------------------------------- names

    def lookup(self, path: str) -> Node:
        """The node at ``path`` ("/a/b") in the current view; ENOENT/ENOTDIR as the kernel expects."""
        node: Node = self.root
        for name in _components(path):
            if not isinstance(node, DirectoryNode):
                fail(errno.ENOTDIR, path)
            child = node.children.get(name)
            if child is None:
                fail(errno.ENOENT, path)
            node = child
        return node

    def _parent_and_name(self, path: str) -> tuple[DirectoryNode, str]:
        names = _components(path)
        if not names:
            fail(errno.EBUSY, "the root cannot be replaced or removed")
        name = names[-1]
        if len(os.fsencode(name)) > NAME_MAX:
            fail(errno.ENAMETOOLONG, path)
        if len(names) == 1 and name == CONTROL_FILE_NAME:
            fail(errno.EPERM, f"{CONTROL_FILE_NAME} is lazyfs's control file")
        parent = self.lookup("/" + "/".join(names[:-1]))
        if not isinstance(parent, DirectoryNode):
            fail(errno.ENOTDIR, path)
        return parent, name

    def _new_number(self) -> int:
        self._next_number += 1
        return self._next_number

    def _link(self, parent: DirectoryNode, name: str, node: Node) -> None:
        parent.children[name] = node
        node.parent = parent
        node.name = name
        parent.touch()

    def create_file(self, path: str, mode: int, uid: int, gid: int) -> int:
        """``creat``: a new empty file, opened; returns its handle."""
        parent, name = self._parent_and_name(path)
        if name in parent.children:
            fail(errno.EEXIST, path)
        node = FileNode(self._new_number(), mode, uid, gid, time.time_ns(), durable_size=0)
        self._link(parent, name, node)
        self._journal.append(journal.CreateFile(parent, name, node, stat.S_IMODE(node.mode), uid, gid))
        return self._open_handle(node)

    def make_directory(self, path: str, mode: int, uid: int, gid: int) -> None:
        """``mkdir``."""
        parent, name = self._parent_and_name(path)
        if name in parent.children:
            fail(errno.EEXIST, path)
        node = DirectoryNode(self._new_number(), mode, uid, gid, time.time_ns())
        self._link(parent, name, node)
        self._journal.append(journal.MakeDirectory(parent, name, node, stat.S_IMODE(node.mode), uid, gid))

    def make_symlink(self, path: str, target: str, uid: int, gid: int) -> None:
        """``symlink``: ``path`` becomes a link to ``target``."""
        parent, name = self._parent_and_name(path)
        if name in parent.children:
            fail(errno.EEXIST, path)
        node = SymlinkNode(self._new_number(), target, uid, gid, time.time_ns())
        self._link(parent, name, node)
        self._journal.append(journal.MakeSymlink(parent, name, node, uid, gid))

    def read_symlink(self, path: str) -> str:
        """``readlink``."""
        node = self.lookup(path)
        if not isinstance(node, SymlinkNode):
            fail(errno.EINVAL, path)
        return node.target

    def unlink(self, path: str) -> None:
        """``unlink`` (files and symlinks)."""
        parent, name = self._parent_and_name(path)
        node = parent.children.get(name)
        if node is None:
            fail(errno.ENOENT, path)
        if isinstance(node, DirectoryNode):
            fail(errno.EISDIR, path)
        self._detach(parent, name, node)

    def remove_directory(self, path: str) -> None:
        """``rmdir``."""
        parent, name = self._parent_and_name(path)
        node = parent.children.get(name)
        if node is None:
            fail(errno.ENOENT, path)
        if not isinstance(node, DirectoryNode):
            fail(errno.ENOTDIR, path)
        if node.children:
            fail(errno.ENOTEMPTY, path)
        self._detach(parent, name, node)

    def _detach(self, parent: DirectoryNode, name: str, node: Node) -> None:
        del parent.children[name]
        node.parent = None
        parent.touch()
        self._journal.append(journal.Remove(parent, name, node))

    def rename(self, old_path: str, new_path: str, no_replace: bool) -> None:
        """``rename``/``renameat2(RENAME_NOREPLACE)`` with POSIX's checks."""
        old_parent, old_name = self._parent_and_name(old_path)
        new_parent, new_name = self._parent_and_name(new_path)
        node = old_parent.children.get(old_name)
        if node is None:
            fail(errno.ENOENT, old_path)
        if isinstance(node, DirectoryNode):
            ancestor: Node | None = new_parent
            while ancestor is not None:
                if ancestor is node:
                    fail(errno.EINVAL, f"cannot move {old_path} into itself")
                ancestor = ancestor.parent
        replaced = new_parent.children.get(new_name)
        if replaced is node:
            return
        if replaced is not None:
            if no_replace:
                fail(errno.EEXIST, new_path)
            if isinstance(node, DirectoryNode):
                if not isinstance(replaced, DirectoryNode):
                    fail(errno.ENOTDIR, new_path)
                if replaced.children:
                    fail(errno.ENOTEMPTY, new_path)
            elif isinstance(replaced, DirectoryNode):
                fail(errno.EISDIR, new_path)
            replaced.parent = None
        del old_parent.children[old_name]
        old_parent.touch()
        self._link(new_parent, new_name, node)
        node.ctime_ns = time.time_ns()
        self._journal.append(journal.Rename(old_parent, old_name, new_parent, new_name, node, replaced))

    def list_directory(self, handle: int) -> list[tuple[str, int]]:
        """``(name, mode)`` of each entry of an opened directory (the control file is not listed)."""
        node = self.node_of(handle)
        if not isinstance(node, DirectoryNode):
            fail(errno.ENOTDIR)
        return [(name, child.mode) for name, child in node.children.items()]

    # ------------------------------------------------------------ attributes

    def change_mode(self, node: Node, mode: int) -> None:
        """``chmod``."""
        node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(mode)
        node.ctime_ns = time.time_ns()
        self._journal.append(journal.SetMode(node, stat.S_IMODE(mode)))

    def change_owner(self, node: Node, uid: int, gid: int) -> None:
        """``chown``; -1 keeps that id."""
        if uid != -1:
            node.uid = uid
        if gid != -1:
            node.gid = gid
        node.ctime_ns = time.time_ns()
        self._journal.append(journal.SetOwner(node, uid, gid))

    @staticmethod
    def set_times(node: Node, atime_ns: int | None, mtime_ns: int | None) -> None:
        """``utimensat`` in the view; None leaves that time alone. Not persisted (see the package docstring)."""
        if atime_ns is not None:
            node.atime_ns = atime_ns
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
        node.ctime_ns = time.time_ns()

    # ------------------------------------------------------- handles and data

    def _open_handle(self, node: Node) -> int:
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = node
        if isinstance(node, FileNode):
            node.open_handles += 1
        return handle

    def new_handle_number(self) -> int:
        """A handle number no file or directory handle uses (for the adapter's control handles)."""
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def open_file(self, path: str, flags: int) -> int:
        """``open`` of an existing file; honours ``O_TRUNC`` (libfuse3 enables atomic_o_trunc)."""
        node = self.lookup(path)
        if isinstance(node, DirectoryNode):
            fail(errno.EISDIR, path)
        if not isinstance(node, FileNode):
            fail(errno.ELOOP, path)
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            self.truncate(node, 0)
        return self._open_handle(node)

    def open_directory(self, path: str) -> int:
        """``opendir``."""
        node = self.lookup(path)
        if not isinstance(node, DirectoryNode):
            fail(errno.ENOTDIR, path)
        return self._open_handle(node)

    def node_of(self, handle: int) -> Node:
        """The node behind a handle; EIO for a handle opened before the last power loss."""
        node = self._handles.get(handle)
        if node is None:
            fail(errno.EIO, "the file was open across a lazyfs power loss")
        return node

    def file_of(self, handle: int) -> FileNode:
        """`node_of` for a regular file."""
        node = self.node_of(handle)
        if not isinstance(node, FileNode):
            fail(errno.EISDIR)
        return node

    def release(self, handle: int) -> None:
        """Close a handle. Closing implies no durability (``close`` is not ``fsync``)."""
        node = self._handles.pop(handle, None)
        if not isinstance(node, FileNode):
            return
        node.open_handles -= 1
        if node.open_handles:
            return
        if node.backing_fd is not None and node.durable_parent is None:
            # A descriptor without a durable name: its removal is committed, nothing can reach it again.
            node.forget_pending()
            self._dirty.pop(node.number, None)
        if not node.pending:
            self._close_descriptor(node)

    def read(self, handle: int, offset: int, size: int) -> bytes:
        """``pread`` of the view."""
        node = self.file_of(handle)
        descriptor = self._descriptor(node) if node.durable_floor > 0 else None
        return node.read(descriptor, offset, size)

    def write(self, handle: int, offset: int, data: bytes) -> int:
        """``pwrite`` into the view only; returns the byte count."""
        node = self.file_of(handle)
        node.write(offset, data)
        self._dirty[node.number] = node
        return len(data)

    def truncate(self, node: Node, length: int) -> None:
        """``truncate``/``ftruncate`` in the view only."""
        if isinstance(node, DirectoryNode):
            fail(errno.EISDIR)
        if not isinstance(node, FileNode):
            fail(errno.EINVAL)
        if length < 0:
            fail(errno.EINVAL)
        node.truncate(length)
        self._dirty[node.number] = node

    def _descriptor(self, node: FileNode) -> int | None:
        if node.backing_fd is None:
            path = journal.durable_path(node, self.root, self.backing_root)
            if path is None:
                return None
            node.backing_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            self._with_descriptor[node.number] = node
        return node.backing_fd

    def _close_descriptor(self, node: FileNode) -> None:
        if node.backing_fd is not None:
            os.close(node.backing_fd)
            node.backing_fd = None
        self._with_descriptor.pop(node.number, None)

    # ------------------------------------------------------------ durability

    def fsync_file(self, handle: int) -> None:
        """``fsync``/``fdatasync``: commit the metadata journal, then persist this file's data."""
        node = self.file_of(handle)
        self.commit_journal()
        if node.pending:
            descriptor = self._descriptor(node)
            if descriptor is None:
                fail(errno.EIO, f"file #{node.number} has no backing file to write back to")
            node.write_back(descriptor)
            self._dirty.pop(node.number, None)

    def commit_journal(self) -> None:
        """Apply every journal entry to the backing directory, in order, and fsync the directories."""
        if not self._journal:
            return
        applier = self._applier(keep_descriptor=lambda node: node.open_handles > 0)
        applied = 0
        try:
            for entry in self._journal:
                applier.apply(entry)
                applied += 1
        finally:
            del self._journal[:applied]
            self._adopt(applier.opened)
            self._fsync_directories(applier)
        self._forget_unreachable()

    def sync_all(self) -> dict[str, object]:
        """Persist everything (the kernel's writeback, or ``sync``); returns what was persisted."""
        metadata_ops = len(self._journal)
        self.commit_journal()
        files = sorted(self._dirty.values(), key=lambda node: node.number)
        written = sum(node.pending_bytes for node in files)
        for node in files:
            descriptor = self._descriptor(node)
            if descriptor is None:
                fail(errno.EIO, f"file #{node.number} has no backing file to write back to")
            node.write_back(descriptor)
            del self._dirty[node.number]
            if node.open_handles == 0:
                self._close_descriptor(node)
        return {"synced_files": len(files), "synced_bytes": written, "synced_metadata_ops": metadata_ops}

    def status(self) -> dict[str, object]:
        """Counts of what a power loss would discard now."""
        return {
            "dirty_files": len(self._dirty),
            "dirty_bytes": sum(node.pending_bytes for node in self._dirty.values()),
            "pending_metadata_ops": len(self._journal),
            "open_handles": len(self._handles),
            "generation": self.generation,
        }

    def drop(self) -> dict[str, object]:
        """Power loss: discard every unsynced change and serve the backing directory as it is."""
        lost = self.status()
        self._reset()
        return {
            "dropped_files": lost["dirty_files"],
            "dropped_bytes": lost["dirty_bytes"],
            "dropped_metadata_ops": lost["pending_metadata_ops"],
        }

    def torn(self, seed: int) -> dict[str, object]:
        """Power loss in the middle of writeback: persist a prefix of the journal chosen by ``seed``,
        then for each dirty file (in creation order) a seeded prefix of its pending changes, possibly
        cutting the next write at a random byte; discard the rest. Same history + same seed = same
        outcome."""
        chooser = random.Random(seed)
        total_entries = len(self._journal)
        kept_entries = chooser.randint(0, total_entries)
        applier = self._applier(keep_descriptor=lambda node: False)
        files: list[dict[str, object]] = []
        kept_bytes = 0
        dropped_bytes = 0
        try:
            for entry in self._journal[:kept_entries]:
                applier.apply(entry)
            for node in sorted(self._dirty.values(), key=lambda node: node.number):
                count = len(node.pending)
                keep = chooser.randint(0, count)
                partial = 0
                if keep < count:
                    cut = node.pending[keep]
                    if isinstance(cut, PendingWrite) and len(cut.data) > 1:
                        partial = chooser.randrange(len(cut.data))
                path = journal.durable_path(node, self.root, self.backing_root)
                pending_bytes = node.pending_bytes
                kept = 0
                if path is not None:
                    descriptor = self._descriptor(node)
                    if descriptor is not None:
                        kept = node.write_back_prefix(descriptor, keep, partial)
                kept_bytes += kept
                dropped_bytes += pending_bytes - kept
                files.append(
                    {
                        "path": None if path is None else os.path.relpath(path, self.backing_root),
                        "kept_changes": keep if path is not None else 0,
                        "partial_bytes": partial if path is not None else 0,
                        "pending_changes": count,
                    }
                )
        finally:
            self._adopt(applier.opened)
            self._fsync_directories(applier)
            self._reset()
        return {
            "seed": seed,
            "kept_metadata_ops": kept_entries,
            "dropped_metadata_ops": total_entries - kept_entries,
            "kept_bytes": kept_bytes,
            "dropped_bytes": dropped_bytes,
            "files": files,
        }

    def statfs(self) -> dict[str, int]:
        """``statvfs`` of the backing directory's filesystem."""
        status = os.statvfs(self.backing_root)
        fields = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                  "f_favail", "f_namemax")  # fmt: skip
        return {field: getattr(status, field) for field in fields}

    # ------------------------------------------------------------- internals

    def _applier(self, keep_descriptor: Callable[[FileNode], bool]) -> journal.BackingApplier:
        return journal.BackingApplier(self.root, self.backing_root, self._is_superuser, keep_descriptor)

    def _adopt(self, nodes: Iterable[FileNode]) -> None:
        for node in nodes:
            self._with_descriptor[node.number] = node

    def _fsync_directories(self, applier: journal.BackingApplier) -> None:
        for directory in applier.touched:
            path = applier.durable_path(directory)
            if path is None:
                continue
            descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    def _forget_unreachable(self) -> None:
        """After a full commit: a file with no durable name and no open handle can never be read or
        persisted again; release its descriptor and its pending data."""
        for node in list(self._with_descriptor.values()) + list(self._dirty.values()):
            if node.durable_parent is None and node.open_handles == 0:
                node.forget_pending()
                self._dirty.pop(node.number, None)
                self._close_descriptor(node)
            elif node.open_handles == 0 and not node.pending:
                self._close_descriptor(node)

    def _reset(self) -> None:
        for node in self._with_descriptor.values():
            if node.backing_fd is not None:
                os.close(node.backing_fd)
                node.backing_fd = None
        self._with_descriptor.clear()
        self._dirty.clear()
        self._journal.clear()
        self._handles.clear()
        self.generation += 1
        self._next_number = 0
        self.root = self._load()

    def _load(self) -> DirectoryNode:
        return load_tree(self.backing_root, self._new_number)


def _components(path: str) -> list[str]:
    return [name for name in path.split("/") if name]
