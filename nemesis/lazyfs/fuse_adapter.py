"""The FUSE side: mfusepy operations that forward every call to a `LazyModel`, plus the control file.

Mount options and why:

- ``entry_timeout=0,attr_timeout=0,negative_timeout=0``: after a power loss the view changes under the
  kernel's feet (files vanish, sizes shrink); with zero timeouts the kernel asks again instead of
  serving cached names and sizes.
- no ``kernel_cache``/``keep_cache``: every ``open`` drops the kernel's page cache of the file, so a
  broker restarted after a power loss reads the post-loss bytes, not the pre-loss pages.
- no ``writeback_cache``: every ``write()`` reaches this process before the syscall returns. With the
  kernel's write-back cache, a broker's writes could still be in flight after the broker was killed
  and would land *after* the ``drop``.
- no ``direct_io``: it breaks shared ``mmap`` (FIELD-NOTES); only the control file uses it.
- ``hard_remove``: unlink an open file for real (libfuse otherwise renames it to ``.fuse_hidden*``,
  which would put a fake rename into the metadata journal); later calls arrive with a null path and
  are served by file handle (``nullpath_ok``).
- ``default_permissions``: the kernel checks modes, as on a local filesystem.
- ``-s`` (one thread): libfuse's worker threads are not Python threads, so every callback on them
  creates and destroys a Python thread state; measured here that cut 4 KiB appends from ~57k/s to
  ~20k/s. The model needs serializing anyway (it holds no lock: one thread calls it), and the GIL
  would serialize the Python work regardless.
- no ``auto_unmount``: if this process dies the mount must stay dead (``ENOTCONN``, like a powered-off
  disk) rather than silently expose the empty mountpoint directory underneath to the broker.

mfusepy drops the file handle of ``truncate``/``chmod``/``chown``/``utimens``, the flags of
``rename`` and ``UTIME_NOW``/``UTIME_OMIT``; `_LazyFUSE` passes them through.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from typing import Any

import mfusepy as fuse

from nemesis.lazyfs.faults import FaultyModel
from nemesis.lazyfs.model import fail
from nemesis.lazyfs.nodes import Node
from nemesis.lazyfs.protocol import CONTROL_FILE_NAME, CommandError, encode_reply, parse_command

_CONTROL_PATH = "/" + CONTROL_FILE_NAME
_RENAME_NOREPLACE = 1
_UTIME_NOW = (1 << 30) - 1
_UTIME_OMIT = (1 << 30) - 2


class LazyOperations(fuse.Operations):  # type: ignore[misc]
    """FUSE operations of the lazy filesystem, called from libfuse's single thread.

    Attribute names must not collide with FUSE operation names (``lock``, ``flush``, ``poll``...):
    mfusepy registers any such attribute as that operation. ``read``/``write``/``fsync``/``release``
    receive the handle number (`_LazyFUSE` unpacks it), ``open``/``create``/``getattr`` the raw
    ``fuse_file_info``."""

    use_ns = True
    flag_nullpath_ok = True
    flag_nopath = True

    def __init__(self, model: FaultyModel) -> None:
        self._model = model
        self._control_replies: dict[int, bytes] = {}
        self._mounted_at_ns = time.time_ns()
        #: Set once a clean unmount has persisted everything (see `destroy`).
        self.shut_down_cleanly = False

    # --------------------------------------------------------------- control

    def _control_attributes(self) -> dict[str, int]:
        return {
            "st_mode": stat.S_IFREG | 0o600,
            "st_nlink": 1,
            "st_uid": os.geteuid(),
            "st_gid": os.getegid(),
            "st_size": 0,
            "st_atime": self._mounted_at_ns,
            "st_mtime": self._mounted_at_ns,
            "st_ctime": self._mounted_at_ns,
        }

    def _run_command(self, text: str) -> dict[str, object]:
        try:
            command = parse_command(text)
        except CommandError as error:
            return {"error": str(error)}
        model = self._model
        try:
            if command.name == "drop":
                return model.drop()
            if command.name == "sync":
                return model.sync_all()
            if command.name == "torn":
                assert command.seed is not None
                return model.torn(command.seed)
            if command.rule is not None:
                return model.add_rule(command.rule)
            if command.name == "clear":
                return model.clear_rules()
            return {**model.status(), "backing": model.backing_root}
        except OSError as error:
            return {"error": f"{command.render()} failed: {error}"}

    # ----------------------------------------------------------- attributes

    def _node(self, path: str | None, handle: int | None) -> Node:
        if handle is not None:
            return self._model.node_of(handle)
        if path is None:
            fail(errno.EBADF)
        return self._model.lookup(path)

    def getattr(self, path: str | None, file_info: Any = None) -> dict[str, int]:
        handle = None if file_info is None else int(file_info.fh)
        if handle in self._control_replies or (handle is None and path == _CONTROL_PATH):
            return self._control_attributes()
        return self._node(path, handle).attributes()

    def chmod(self, path: str | None, mode: int, handle: int | None = None) -> int:
        if path == _CONTROL_PATH or handle in self._control_replies:
            fail(errno.EPERM)
        self._model.change_mode(self._node(path, handle), mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int, handle: int | None = None) -> int:
        if path == _CONTROL_PATH or handle in self._control_replies:
            fail(errno.EPERM)
        self._model.change_owner(self._node(path, handle), uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int | None, int | None] | None = None,
                handle: int | None = None) -> int:  # fmt: skip
        if path == _CONTROL_PATH or handle in self._control_replies:
            return 0
        now = time.time_ns()
        atime, mtime = (now, now) if times is None else times
        self._model.set_times(self._node(path, handle), atime, mtime)
        return 0

    def truncate(self, path: str | None, length: int, handle: int | None = None) -> int:
        if path == _CONTROL_PATH or handle in self._control_replies:
            return 0
        self._model.truncate(self._node(path, handle), length)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return self._model.statfs()

    # ------------------------------------------------------------ namespace

    def create(self, path: str, mode: int, file_info: Any) -> int:
        uid, gid, _ = fuse.fuse_get_context()
        file_info.fh = self._model.create_file(path, mode, uid, gid)
        file_info.keep_cache = 0
        return 0

    def mknod(self, path: str, mode: int, device: int) -> int:
        if not stat.S_ISREG(mode):
            fail(errno.EPERM, "lazyfs holds regular files, directories and symlinks only")
        uid, gid, _ = fuse.fuse_get_context()
        self._model.release(self._model.create_file(path, mode, uid, gid))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        uid, gid, _ = fuse.fuse_get_context()
        self._model.make_directory(path, mode, uid, gid)
        return 0

    def symlink(self, path: str, target: str) -> int:
        uid, gid, _ = fuse.fuse_get_context()
        self._model.make_symlink(path, target, uid, gid)
        return 0

    def readlink(self, path: str) -> str:
        return self._model.read_symlink(path)

    def link(self, path: str, target: str) -> int:
        fail(errno.EPERM, "lazyfs does not support hard links (a node has exactly one name)")

    def unlink(self, path: str) -> int:
        self._model.unlink(path)
        return 0

    def rmdir(self, path: str) -> int:
        self._model.remove_directory(path)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags & ~_RENAME_NOREPLACE:
            fail(errno.EINVAL, "lazyfs supports rename flags RENAME_NOREPLACE only")
        self._model.rename(old, new, no_replace=bool(flags & _RENAME_NOREPLACE))
        return 0

    # ----------------------------------------------------------- directories

    def opendir(self, path: str) -> int:
        return self._model.open_directory(path)

    def readdir(self, path: str | None, handle: int) -> list[tuple[str, dict[str, int], int]]:
        entries = [(".", {"st_mode": stat.S_IFDIR}, 0), ("..", {"st_mode": stat.S_IFDIR}, 0)]
        for name, mode in self._model.list_directory(handle):
            entries.append((name, {"st_mode": stat.S_IFMT(mode)}, 0))
        return entries

    def releasedir(self, path: str | None, handle: int) -> int:
        self._model.release(handle)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, handle: int) -> int:
        self._model.commit_journal()
        return 0

    # ----------------------------------------------------------------- files

    def open(self, path: str, file_info: Any) -> int:
        if path == _CONTROL_PATH:
            handle = self._model.new_handle_number()
            self._control_replies[handle] = b""
            file_info.fh = handle
            file_info.direct_io = 1
            return 0
        file_info.fh = self._model.open_file(path, file_info.flags)
        file_info.keep_cache = 0
        return 0

    def read(self, path: str | None, size: int, offset: int, handle: int) -> bytes:
        reply = self._control_replies.get(handle)
        if reply is not None:
            return reply[offset : offset + size]
        return self._model.read(handle, offset, size)

    def write(self, path: str | None, data: bytes, offset: int, handle: int) -> int:
        if handle in self._control_replies:
            self._control_replies[handle] = encode_reply(self._run_command(data.decode(errors="replace")))
            return len(data)
        return self._model.write(handle, offset, data)

    def fsync(self, path: str | None, datasync: int, handle: int) -> int:
        if handle not in self._control_replies:
            self._model.fsync_file(handle)
        return 0

    def release(self, path: str | None, handle: int) -> int:
        if self._control_replies.pop(handle, None) is None:
            self._model.release(handle)
        return 0

    def destroy(self, path: str) -> None:
        """Clean unmount (``fusermount3 -u``, SIGTERM, SIGINT): persist everything, as ``umount`` does.
        A SIGKILL never gets here, and that is the point: it is a power loss."""
        self._model.sync_all()
        self.shut_down_cleanly = True


class _LazyFUSE(fuse.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE with the arguments it drops passed through (see the module docstring)."""

    def _decode(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    @staticmethod
    def _handle(file_info_pointer: Any) -> int | None:
        return int(file_info_pointer.contents.fh) if file_info_pointer else None

    def truncate_fuse_3(self, path: bytes | None, length: int, file_info_pointer: Any) -> int:
        return int(self.operations.truncate(self._decode(path), length, self._handle(file_info_pointer)))

    def chmod_fuse_3(self, path: bytes | None, mode: int, file_info_pointer: Any) -> int:
        return int(self.operations.chmod(self._decode(path), mode, self._handle(file_info_pointer)))

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, file_info_pointer: Any) -> int:
        uid = -1 if uid == 0xFFFFFFFF else uid
        gid = -1 if gid == 0xFFFFFFFF else gid
        return int(self.operations.chown(self._decode(path), uid, gid, self._handle(file_info_pointer)))

    def utimens_fuse_3(self, path: bytes | None, times_pointer: Any, file_info_pointer: Any) -> int:
        times: tuple[int | None, int | None] | None = None
        if times_pointer:
            now = time.time_ns()
            access, modification = times_pointer.contents.actime, times_pointer.contents.modtime
            times = (_timespec_ns(access, now), _timespec_ns(modification, now))
        return int(self.operations.utimens(self._decode(path), times, self._handle(file_info_pointer)))

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return int(self.operations.rename(self._decode(old), self._decode(new), flags))

    # The data path, kept short: each 4 KiB write of a broker passes here.

    def read(self, path: bytes | None, buffer: Any, size: int, offset: int, file_info_pointer: Any) -> int:
        data = self.operations.read(None, size, offset, file_info_pointer.contents.fh)
        ctypes.memmove(buffer, data, len(data))
        return len(data)

    def write(self, path: bytes | None, buffer: Any, size: int, offset: int, file_info_pointer: Any) -> int:
        data = ctypes.string_at(buffer, size)
        return int(self.operations.write(None, data, offset, file_info_pointer.contents.fh))

    def fsync(self, path: bytes | None, datasync: int, file_info_pointer: Any) -> int:
        return int(self.operations.fsync(None, datasync, file_info_pointer.contents.fh))

    def release(self, path: bytes | None, file_info_pointer: Any) -> int:
        return int(self.operations.release(None, file_info_pointer.contents.fh))


def _timespec_ns(timespec: Any, now_ns: int) -> int | None:
    if timespec.tv_nsec == _UTIME_OMIT:
        return None
    if timespec.tv_nsec == _UTIME_NOW:
        return now_ns
    return int(timespec.tv_sec) * 1_000_000_000 + int(timespec.tv_nsec)


def serve(backing: str, mountpoint: str, allow_other: bool, foreground: bool) -> None:
    """Mount ``backing`` lazily at ``mountpoint`` and serve until unmounted or stopped by SIGTERM/SIGINT
    (blocks in the foreground; without ``foreground`` libfuse forks, and the parent returns once the
    mount exists). Raises RuntimeError (libfuse's status) if the mount or the server failed."""
    os.umask(0)  # node modes are applied exactly; the callers' umask was already applied by the kernel
    operations = LazyOperations(FaultyModel(backing))
    options: dict[str, Any] = {
        "foreground": foreground,
        "nothreads": True,
        "fsname": "lazyfs",
        "subtype": "lazyfs",
        "default_permissions": True,
        "hard_remove": True,
        "entry_timeout": 0,
        "attr_timeout": 0,
        "negative_timeout": 0,
    }
    if allow_other:
        options["allow_other"] = True
    try:
        _LazyFUSE(operations, mountpoint, raw_fi=True, **options)
    except RuntimeError:
        # libfuse reports a loop ended by SIGTERM/SIGINT as an error (fuse_main_real returns 8), but
        # that is the ordinary way to stop a foreground server: success if the teardown completed.
        if not operations.shut_down_cleanly:
            raise
