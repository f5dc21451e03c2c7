"""Disk faults of the lazy filesystem: write, fsync and read errors, and slow fsyncs, per file pattern.

Control commands (``protocol``) set the rules; `FaultyModel` is `LazyModel` with them applied:

- ``fail OP ERRNO GLOB [once|always]`` -- the next (``once``, the default) or every (``always``) call
  ``OP`` (``write``, ``fsync``, ``read``) on a file matching ``GLOB`` fails with ``ERRNO`` (``EIO``,
  ``ENOSPC``, ``EROFS``);
- ``slow-fsync MS GLOB`` -- every fsync of a matching file first waits ``MS`` milliseconds;
- ``clear`` -- forget every rule (a disk replaced); what earlier failures lost stays lost.

**Matching.**  ``GLOB`` is an ``fnmatch`` pattern (case-sensitive) against the file's path relative
to the mount in the current view, without a leading slash (``topic-0/00000000000000000000.log``);
``*`` matches ``/`` too, so ``*.log`` is every log segment at any depth and ``*checkpoint*`` every
checkpoint and its temporary file.  A file unlinked while open is matched by its last name.

**What each failure does** -- what Linux does with ext4 or XFS, so that a program under test meets the
behaviour it would meet on a failing disk:

- ``write`` fails and writes nothing (``ENOSPC``: the disk is full; ``EIO``: a failing disk;
  ``EROFS``: a filesystem that went read-only after an error, as ext4's ``errors=remount-ro``
  does -- Kafka's read-only log directory).  The view is unchanged.
- ``read`` fails (an unreadable sector); nothing changes.
- ``fsync`` commits the metadata journal as usual (the error is in this file's data writeback), then
  fails, and the file's unsynced changes are **lost**: since Linux 4.13 the kernel marks pages whose
  writeback failed clean, so no later ``fsync`` or ``sync`` writes them, and a later fsync succeeds
  having written nothing of them -- the "fsyncgate" lesson (PostgreSQL, 2018).  Here: the lost
  changes stay in the view (the pages stay cached, so a program reading back sees bytes that are on
  no disk), but no writeback ever persists them, and a power loss (``drop``, ``torn``) or a remount
  shows the file as its last successful writeback left it.  If later changes to the file are
  persisted, the durable file is extended to the view's size: the lost range is then zeros (or the
  older bytes) on disk.  A truncate among the lost changes may still persist (ext4 journals it).
  ``ENOSPC`` from fsync (a delayed allocation that fails at writeback) loses the pages the same way.
  Not modelled: Linux reports the error once more to every other descriptor open at the time
  (``errseq``); here only the failing call sees it.
- ``slow-fsync`` stalls the whole mount for ``MS`` (the server is single-threaded), as every I/O
  queued behind a flush of a saturated disk waits.

The ``sync`` command and a clean unmount are the harness's writeback, not a program's call: rules do
not apply to them.  Rules live in the filesystem process: a power loss keeps them (the disk is still
bad), a killed filesystem process forgets them.
"""

from __future__ import annotations

import fnmatch
import time

from nemesis.lazyfs.model import LazyModel, fail
from nemesis.lazyfs.nodes import FileNode, Node
from nemesis.lazyfs.rules import ERRNOS, OPERATIONS, FailRule, Operation, Rule, SlowFsync


def relative_path(node: Node) -> str:
    """``node``'s path in the current view relative to the root, or its last name when it has none."""
    names = [node.name]
    parent = node.parent
    while parent is not None and parent.parent is not None:
        names.append(parent.name)
        parent = parent.parent
    if parent is None:
        return node.name
    return "/".join(reversed(names))


class FaultyModel(LazyModel):
    """`LazyModel` whose write, read and fsync obey the rules of the module docstring."""

    def __init__(self, backing_root: str) -> None:
        super().__init__(backing_root)
        self._rules: list[Rule] = []
        self._failed: dict[str, int] = {operation: 0 for operation in OPERATIONS}
        self._lost_bytes = 0

    # ---------------------------------------------------------------- rules

    def add_rule(self, rule: Rule) -> dict[str, object]:
        """Add ``rule`` after the others (the first matching ``fail`` rule fires)."""
        self._rules.append(rule)
        return {"rules": self.rules()}

    def clear_rules(self) -> dict[str, object]:
        """Forget every rule; returns how many there were."""
        cleared = len(self._rules)
        self._rules.clear()
        return {"cleared_rules": cleared}

    def rules(self) -> list[str]:
        """Each rule in force, as its command line."""
        return [rule.render() for rule in self._rules]

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "rules": self.rules(),
            "failed_calls": dict(self._failed),
            "lost_bytes": self._lost_bytes,
        }

    def _take(self, operation: Operation, node: FileNode) -> FailRule | None:
        """The first ``fail`` rule for ``operation`` matching ``node`` (removed if ``once``), or None."""
        path: str | None = None
        for rule in self._rules:
            if isinstance(rule, FailRule) and rule.operation == operation:
                path = relative_path(node) if path is None else path
                if fnmatch.fnmatchcase(path, rule.pattern):
                    if rule.repeat == "once":
                        self._rules.remove(rule)
                    self._failed[operation] += 1
                    return rule
        return None

    def _fsync_delay(self, node: FileNode) -> float:
        path = relative_path(node)
        return sum(
            rule.milliseconds / 1000
            for rule in self._rules
            if isinstance(rule, SlowFsync) and fnmatch.fnmatchcase(path, rule.pattern)
        )

    # ------------------------------------------------------------ the calls

    def write(self, handle: int, offset: int, data: bytes) -> int:
        if self._rules:
            rule = self._take("write", self.file_of(handle))
            if rule is not None:
                fail(ERRNOS[rule.error_name], f"injected by lazyfs rule {rule.render()!r}")
        return super().write(handle, offset, data)

    def read(self, handle: int, offset: int, size: int) -> bytes:
        if self._rules:
            rule = self._take("read", self.file_of(handle))
            if rule is not None:
                fail(ERRNOS[rule.error_name], f"injected by lazyfs rule {rule.render()!r}")
        return super().read(handle, offset, size)

    def fsync_file(self, handle: int) -> None:
        if self._rules:
            node = self.file_of(handle)
            delay = self._fsync_delay(node)
            if delay:
                time.sleep(delay)  # the injected slowness itself
            rule = self._take("fsync", node)
            if rule is not None:
                self.commit_journal()
                self._lost_bytes += node.pending_bytes
                if node.pending:
                    node.lose_pending()
                    self._dirty.pop(node.number, None)
                fail(ERRNOS[rule.error_name], f"injected by lazyfs rule {rule.render()!r}")
        super().fsync_file(handle)
