"""The metadata journal: namespace and attribute changes not yet applied to the backing directory.

Entries are recorded in the order the operations happened and are applied to the backing directory in
that order, always as a prefix (``LazyModel.commit_journal`` applies all of them; a torn power loss
applies a random prefix), which is how ext4's jbd2 journal commits metadata: in order, whole
transactions, never a later change without the earlier ones.

Each entry names nodes, not paths: a node's durable path is derived when the entry is applied, from the
``durable_parent`` links that the earlier entries have already updated. Replaying the entries in order
therefore walks the backing directory through exactly the states the view went through.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

from nemesis.lazyfs.nodes import DirectoryNode, FileNode, Node, SymlinkNode


@dataclass(frozen=True, slots=True, eq=False)
class CreateFile:
    """A regular file created (``open(O_CREAT)``/``creat``/``mknod`` of a regular file)."""

    parent: DirectoryNode
    name: str
    node: FileNode
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True, eq=False)
class MakeDirectory:
    """``mkdir``."""

    parent: DirectoryNode
    name: str
    node: DirectoryNode
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True, eq=False)
class MakeSymlink:
    """``symlink``."""

    parent: DirectoryNode
    name: str
    node: SymlinkNode
    uid: int
    gid: int


@dataclass(frozen=True, slots=True, eq=False)
class Remove:
    """``unlink`` or ``rmdir`` of ``node``, which was ``parent``/``name``."""

    parent: DirectoryNode
    name: str
    node: Node


@dataclass(frozen=True, slots=True, eq=False)
class Rename:
    """``rename``; ``replaced`` is the node that the new name referred to before, if any."""

    old_parent: DirectoryNode
    old_name: str
    new_parent: DirectoryNode
    new_name: str
    node: Node
    replaced: Node | None


@dataclass(frozen=True, slots=True, eq=False)
class SetMode:
    """``chmod`` (permission bits only)."""

    node: Node
    mode: int


@dataclass(frozen=True, slots=True, eq=False)
class SetOwner:
    """``chown``; -1 keeps that id."""

    node: Node
    uid: int
    gid: int


JournalEntry = CreateFile | MakeDirectory | MakeSymlink | Remove | Rename | SetMode | SetOwner


def durable_path(node: Node, root: DirectoryNode, root_path: str) -> str | None:
    """Path of ``node`` in the backing directory rooted at ``root_path`` (the directory of ``root``),
    or None if it is not there: never committed, or its removal was committed."""
    names: list[str] = []
    current = node
    while current is not root:
        parent = current.durable_parent
        if parent is None:
            return None
        names.append(current.durable_name)
        current = parent
    return os.path.join(root_path, *reversed(names))


class BackingApplier:
    """Applies journal entries to the backing directory rooted at ``root_path`` for ``root``.

    ``keep_descriptor(node)`` is asked before a file loses its last durable name: when it answers True,
    the applier opens the backing file first and stores the descriptor in ``node.backing_fd``, so an
    open-but-unlinked file can still be read and fsynced, as on a real filesystem.
    """

    def __init__(
        self,
        root: DirectoryNode,
        root_path: str,
        is_superuser: bool,
        keep_descriptor: Callable[[FileNode], bool],
    ) -> None:
        self._root = root
        self._root_path = root_path
        self._is_superuser = is_superuser
        self._keep_descriptor = keep_descriptor
        #: Backing directories whose entries changed; the caller fsyncs them.
        self.touched: set[DirectoryNode] = set()
        #: Files whose ``backing_fd`` this applier opened; the caller owns (and closes) those descriptors.
        self.opened: list[FileNode] = []

    def durable_path(self, node: Node) -> str | None:
        """Path of ``node`` in the backing directory, or None (see `durable_path`)."""
        return durable_path(node, self._root, self._root_path)

    def required_path(self, node: Node) -> str:
        """`durable_path`, for a node that the journal order guarantees is in the backing directory."""
        path = self.durable_path(node)
        if path is None:
            raise OSError(errno.EIO, f"lazyfs: node #{node.number} is missing from the backing directory")
        return path

    def apply(self, entry: JournalEntry) -> None:
        """Apply one entry to the backing directory and update the nodes' durable locations."""
        match entry:
            case CreateFile(parent=parent, name=name, node=node, mode=mode, uid=uid, gid=gid):
                path = os.path.join(self.required_path(parent), name)
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                os.fchmod(descriptor, mode)
                if self._is_superuser:
                    os.fchown(descriptor, uid, gid)
                if node.backing_fd is None:
                    node.backing_fd = descriptor
                    self.opened.append(node)
                else:
                    os.close(descriptor)
                self._place(node, parent, name)
            case MakeDirectory(parent=parent, name=name, node=node, mode=mode, uid=uid, gid=gid):
                path = os.path.join(self.required_path(parent), name)
                os.mkdir(path, 0o700)
                os.chmod(path, mode)
                if self._is_superuser:
                    os.chown(path, uid, gid)
                self._place(node, parent, name)
            case MakeSymlink(parent=parent, name=name, node=node, uid=uid, gid=gid):
                path = os.path.join(self.required_path(parent), name)
                os.symlink(node.target, path)
                if self._is_superuser:
                    os.chown(path, uid, gid, follow_symlinks=False)
                self._place(node, parent, name)
            case Remove(parent=parent, name=name, node=node):
                path = self.required_path(node)
                if isinstance(node, DirectoryNode):
                    os.rmdir(path)
                else:
                    self._hold(node, path)
                    os.unlink(path)
                node.durable_parent = None
                self.touched.add(parent)
            case Rename(old_parent=old_parent, new_parent=new_parent, new_name=new_name, node=node,
                        replaced=replaced):  # fmt: skip
                old_path = self.required_path(node)
                new_path = os.path.join(self.required_path(new_parent), new_name)
                if replaced is not None:
                    self._hold(replaced, new_path)
                os.rename(old_path, new_path)
                if replaced is not None:
                    replaced.durable_parent = None
                self.touched.add(old_parent)
                self._place(node, new_parent, new_name)
            case SetMode(node=node, mode=mode):
                if isinstance(node, FileNode) and node.backing_fd is not None:
                    os.fchmod(node.backing_fd, mode)
                elif (mode_path := self.durable_path(node)) is not None and not isinstance(node, SymlinkNode):
                    os.chmod(mode_path, mode)
            case SetOwner(node=node, uid=uid, gid=gid):
                if isinstance(node, FileNode) and node.backing_fd is not None:
                    os.fchown(node.backing_fd, uid, gid)
                elif (owner_path := self.durable_path(node)) is not None:
                    os.chown(owner_path, uid, gid, follow_symlinks=False)

    def _place(self, node: Node, parent: DirectoryNode, name: str) -> None:
        node.durable_parent = parent
        node.durable_name = name
        self.touched.add(parent)

    def _hold(self, node: Node, path: str) -> None:
        if isinstance(node, FileNode) and node.backing_fd is None and self._keep_descriptor(node):
            node.backing_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            self.opened.append(node)
