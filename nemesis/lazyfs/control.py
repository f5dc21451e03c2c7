"""Client side of lazyfs: send control commands, wait for a mount to serve, unmount (also a dead one).

Standard library only, and no import of mfusepy, so this works where libfuse is absent (the control
host talking to a mount through a bind mount, or `unmount` cleaning up after a crash).
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from nemesis.lazyfs.protocol import CONTROL_FILE_NAME, decode_reply, parse_command

#: Filesystem type of a lazyfs mount in /proc/self/mountinfo.
MOUNT_TYPE = "fuse.lazyfs"


class LazyfsError(Exception):
    """A lazyfs operation failed; the message is one line that says what and where."""


@dataclass(frozen=True, slots=True)
class MountEntry:
    """One line of /proc/self/mountinfo."""

    mountpoint: str
    filesystem_type: str
    source: str


def mounts() -> list[MountEntry]:
    """The mounts visible to this process."""
    entries = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mountinfo:
        for line in mountinfo:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) < 5 or len(tail) < 2:
                continue
            entries.append(MountEntry(_unescape(fields[4]), tail[0], _unescape(tail[1])))
    return entries


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def is_lazyfs_mounted(mountpoint: str) -> bool:
    """Whether a lazyfs mount (alive or with a dead server) sits on ``mountpoint``."""
    target = os.path.realpath(mountpoint)
    return any(entry.mountpoint == target and entry.filesystem_type == MOUNT_TYPE for entry in mounts())


def send_command(mountpoint: str, command: str) -> dict[str, object]:
    """Run one control command (``protocol.COMMANDS``: ``drop``, ``status``, ``fail ...``) on the lazyfs mounted at
    ``mountpoint`` and return its JSON reply. Raises `LazyfsError` for a bad command, a missing or dead
    mount, or an ``{"error": ...}`` reply."""
    parsed = parse_command(command)
    path = os.path.join(mountpoint, CONTROL_FILE_NAME)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LazyfsError(f"{mountpoint} is not a lazyfs mount (no {CONTROL_FILE_NAME} there)") from None
    except OSError as error:
        if error.errno == errno.ENOTCONN:
            raise LazyfsError(
                f"the lazyfs serving {mountpoint} is dead (ENOTCONN); "
                f"run: python -m nemesis.lazyfs unmount {mountpoint}"
            ) from None
        raise LazyfsError(f"cannot open {path}: {error.strerror}") from None
    try:
        os.write(descriptor, (parsed.render() + "\n").encode())
        chunks = []
        offset = 0
        while chunk := os.pread(descriptor, 1 << 16, offset):
            chunks.append(chunk)
            offset += len(chunk)
    except OSError as error:
        raise LazyfsError(
            f"control command {parsed.render()!r} on {mountpoint} failed: {error.strerror}"
        ) from None
    finally:
        os.close(descriptor)
    try:
        reply = decode_reply(b"".join(chunks))
    except ValueError as error:
        raise LazyfsError(f"unreadable reply from the lazyfs at {mountpoint}: {error}") from None
    if "error" in reply:
        raise LazyfsError(f"lazyfs at {mountpoint}: {reply['error']}")
    return reply


def wait_until_serving(mountpoint: str, timeout: float, is_alive: Callable[[], bool] | None = None) -> None:
    """Block until the lazyfs at ``mountpoint`` answers ``status`` (the mount exists and its server
    runs). ``is_alive``, if given, is a zero-argument callable; when it returns False the wait fails at
    once (the server process died). Raises `LazyfsError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_problem = "no answer yet"
    while time.monotonic() < deadline:
        if is_alive is not None and not is_alive():
            raise LazyfsError(f"the lazyfs server for {mountpoint} exited before serving")
        if is_lazyfs_mounted(mountpoint):
            try:
                send_command(mountpoint, "status")
                return
            except LazyfsError as error:
                last_problem = str(error)
        time.sleep(0.02)
    raise LazyfsError(f"lazyfs at {mountpoint} not serving after {timeout:.0f} s: {last_problem}")


def unmount(mountpoint: str) -> bool:
    """Unmount the lazyfs at ``mountpoint``, also when its server was killed. A live server persists its
    unsynced changes on a clean unmount (like ``umount``); kill it first to make that a power loss.
    Falls back to a lazy unmount when the mount is busy. Returns False if nothing was mounted there."""
    if not is_lazyfs_mounted(mountpoint):
        return False
    attempts = (
        ["fusermount3", "-u", mountpoint],
        ["fusermount3", "-u", "-z", mountpoint],
        ["umount", "-l", mountpoint],
    )
    problems = []
    for command in attempts:
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        except FileNotFoundError:
            problems.append(f"{command[0]} not installed")
            continue
        if result.returncode == 0 or not is_lazyfs_mounted(mountpoint):
            return True
        problems.append(f"{' '.join(command)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    raise LazyfsError(f"cannot unmount {mountpoint}: " + "; ".join(problems))
