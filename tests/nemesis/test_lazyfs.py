"""lazyfs semantics through real FUSE mounts on this host (model-level properties: test_lazyfs_model.py).

Every FUSE test mounts a fresh lazyfs in its own process (``python -m nemesis.lazyfs mount
--foreground``), so that killing that process is a real filesystem death, and unmounts it in a
finalizer that also copes with a dead server. Expected outcomes follow the durability model in the
``nemesis.lazyfs`` package docstring.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemesis.lazyfs.control import LazyfsError, is_lazyfs_mounted, send_command, unmount, wait_until_serving
from nemesis.lazyfs.protocol import CONTROL_FILE_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
MOUNT_TIMEOUT_SECONDS = 30.0


# --------------------------------------------------------------------------- mounting


@dataclass
class LazyMount:
    """One running lazyfs: ``backing`` served at ``mountpoint`` by ``process``."""

    backing: Path
    mountpoint: Path
    process: subprocess.Popen[bytes]
    log: Path

    def control(self, command: str) -> dict[str, object]:
        return send_command(str(self.mountpoint), command)

    def __truediv__(self, name: str) -> Path:
        return self.mountpoint / name


def _require_fuse() -> None:
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        pytest.fail("lazyfs tests need /dev/fuse and fusermount3 (Debian package fuse3)")


def _start(backing: Path, mountpoint: Path, log: Path) -> LazyMount:
    _require_fuse()
    mountpoint.mkdir(exist_ok=True)
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "nemesis.lazyfs", "mount", str(backing), str(mountpoint), "--foreground"],
            cwd=REPO_ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    return LazyMount(backing, mountpoint, process, log)


def _await_serving(mount: LazyMount) -> None:
    try:
        wait_until_serving(
            str(mount.mountpoint), MOUNT_TIMEOUT_SECONDS, is_alive=lambda: mount.process.poll() is None
        )
    except LazyfsError as error:
        log = mount.log.read_text(errors="replace")
        raise AssertionError(f"lazyfs did not start ({error}); its log:\n{log}") from None


def _stop(mount: LazyMount) -> None:
    """Unmount (a live server persists on the way out) and reap the server; works on a dead mount."""
    if is_lazyfs_mounted(str(mount.mountpoint)):
        unmount(str(mount.mountpoint))
    try:
        mount.process.wait(timeout=MOUNT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        mount.process.kill()
        mount.process.wait()
    assert not is_lazyfs_mounted(str(mount.mountpoint))


@pytest.fixture
def mounter(tmp_path: Path) -> Iterator[Callable[[Path], LazyMount]]:
    """Mount ``backing`` at a fresh mountpoint; every mount made is torn down afterwards, also on failure."""
    made: list[LazyMount] = []

    def mount(backing: Path) -> LazyMount:
        index = len(made)
        lazy = _start(backing, tmp_path / f"mnt{index}", tmp_path / f"lazyfs{index}.log")
        made.append(lazy)  # before waiting: a start that fails or is interrupted is cleaned up too
        _await_serving(lazy)
        return lazy

    yield mount
    problems = []
    for lazy in made:
        try:
            _stop(lazy)
        except Exception as error:
            problems.append(f"{lazy.mountpoint}: {error}")
    assert not problems, problems


@pytest.fixture
def lazy(tmp_path: Path, mounter: Callable[[Path], LazyMount]) -> LazyMount:
    backing = tmp_path / "backing"
    backing.mkdir()
    return mounter(backing)


# ---------------------------------------------------------------------------- helpers


def write_file(path: Path, data: bytes, fsync: bool) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, data)
        if fsync:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: file contents, None for directories."""
    found: dict[str, bytes | None] = {}
    for directory, directories, files in os.walk(root):
        for name in directories:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            found[os.path.relpath(os.path.join(directory, name), root)] = Path(directory, name).read_bytes()
    return found


# ------------------------------------------------------------------------ data


def test_unsynced_tail_is_dropped_and_fsynced_prefix_survives(lazy: LazyMount) -> None:
    synced, unsynced = b"a" * 4096, b"b" * 100
    descriptor = os.open(lazy / "segment", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(descriptor, synced)
    os.fsync(descriptor)
    os.write(descriptor, unsynced)
    os.close(descriptor)
    assert (lazy / "segment").read_bytes() == synced + unsynced
    assert (lazy.backing / "segment").read_bytes() == synced
    status = lazy.control("status")
    assert (status["dirty_files"], status["dirty_bytes"], status["pending_metadata_ops"]) == (1, 100, 0)

    reply = lazy.control("drop")

    assert reply == {"dropped_files": 1, "dropped_bytes": 100, "dropped_metadata_ops": 0}
    assert (lazy / "segment").read_bytes() == synced
    assert (lazy.backing / "segment").read_bytes() == synced
    assert lazy.control("status")["dirty_bytes"] == 0


def test_overwrite_is_rolled_back(lazy: LazyMount) -> None:
    original = bytes(range(256)) * 16
    write_file(lazy / "file", original, fsync=True)
    descriptor = os.open(lazy / "file", os.O_RDWR)
    os.pwrite(descriptor, b"XYZ" * 100, 1000)
    assert os.pread(descriptor, 4096, 0) == original[:1000] + b"XYZ" * 100 + original[1300:]
    os.close(descriptor)

    lazy.control("drop")

    assert (lazy / "file").read_bytes() == original


def test_truncate_is_rolled_back_and_reads_zeros_after_reextension(lazy: LazyMount) -> None:
    original = b"0123456789" * 1000
    write_file(lazy / "file", original, fsync=True)
    descriptor = os.open(lazy / "file", os.O_RDWR)
    os.ftruncate(descriptor, 100)
    assert os.fstat(descriptor).st_size == 100
    os.ftruncate(descriptor, 5000)  # the bytes cut off must not reappear
    assert os.pread(descriptor, 10000, 0) == original[:100] + bytes(4900)
    os.close(descriptor)
    write_file(lazy / "other", b"x", fsync=False)
    os.truncate(lazy / "other", 0)
    with open(lazy / "file", "wb"):  # open(O_TRUNC): libfuse's atomic_o_trunc path
        pass
    assert (lazy / "file").stat().st_size == 0

    lazy.control("drop")

    assert (lazy / "file").read_bytes() == original
    assert not (lazy / "other").exists()


# -------------------------------------------------------------------- metadata


def _durable_starting_tree(lazy: LazyMount) -> dict[str, bytes | None]:
    (lazy / "dir").mkdir()
    for name in ("keep", "victim", "old"):
        write_file(lazy / "dir" / name, name.encode() * 10, fsync=True)
    before = tree(lazy.mountpoint)
    assert tree(lazy.backing) == before
    return before


def test_namespace_changes_without_any_fsync_are_rolled_back(lazy: LazyMount) -> None:
    before = _durable_starting_tree(lazy)
    write_file(lazy / "dir" / "new", b"new data", fsync=False)
    (lazy / "dir" / "newdir").mkdir()
    (lazy / "dir" / "victim").unlink()
    (lazy / "dir" / "old").rename(lazy / "dir" / "renamed")
    os.symlink("keep", lazy / "dir" / "link")
    assert sorted(os.listdir(lazy / "dir")) == ["keep", "link", "new", "newdir", "renamed"]
    assert lazy.control("status")["pending_metadata_ops"] == 5

    lazy.control("drop")

    assert tree(lazy.mountpoint) == before
    assert tree(lazy.backing) == before


def test_directory_fsync_commits_namespace_but_not_file_data(lazy: LazyMount) -> None:
    _durable_starting_tree(lazy)
    write_file(lazy / "dir" / "new", b"never fsynced", fsync=False)
    (lazy / "dir" / "victim").unlink()
    (lazy / "dir" / "old").rename(lazy / "dir" / "renamed")
    fsync_path(lazy / "dir")

    lazy.control("drop")

    assert tree(lazy.mountpoint) == {
        "dir": None,
        "dir/keep": b"keep" * 10,
        "dir/new": b"",  # created durably, its data never was (delayed allocation)
        "dir/renamed": b"old" * 10,
    }


def test_fsync_of_any_file_commits_the_whole_metadata_journal(lazy: LazyMount) -> None:
    write_file(lazy / "unsynced", b"data of unsynced", fsync=False)
    (lazy / "made").mkdir()
    write_file(lazy / "synced", b"data of synced", fsync=True)

    lazy.control("drop")

    assert tree(lazy.mountpoint) == {"unsynced": b"", "made": None, "synced": b"data of synced"}


def test_checkpoint_by_fsynced_temp_file_and_rename_survives(lazy: LazyMount) -> None:
    write_file(lazy / "checkpoint", b"version 1", fsync=True)
    write_file(lazy / "checkpoint.tmp", b"version 2", fsync=True)
    os.rename(lazy / "checkpoint.tmp", lazy / "checkpoint")
    fsync_path(lazy.mountpoint)

    lazy.control("drop")

    assert tree(lazy.mountpoint) == {"checkpoint": b"version 2"}


def test_checkpoint_rename_without_directory_fsync_is_lost(lazy: LazyMount) -> None:
    write_file(lazy / "checkpoint", b"version 1", fsync=True)
    write_file(lazy / "checkpoint.tmp", b"version 2", fsync=True)
    os.rename(lazy / "checkpoint.tmp", lazy / "checkpoint")

    lazy.control("drop")

    assert tree(lazy.mountpoint) == {"checkpoint": b"version 1", "checkpoint.tmp": b"version 2"}


def test_rename_over_without_fsyncing_the_new_content_leaves_an_empty_file(lazy: LazyMount) -> None:
    write_file(lazy / "checkpoint", b"version 1", fsync=True)
    write_file(lazy / "checkpoint.tmp", b"version 2", fsync=False)
    os.rename(lazy / "checkpoint.tmp", lazy / "checkpoint")
    fsync_path(lazy.mountpoint)

    lazy.control("drop")

    assert tree(lazy.mountpoint) == {"checkpoint": b""}  # no auto_da_alloc rescue


def test_sync_command_persists_everything(lazy: LazyMount) -> None:
    write_file(lazy / "a", b"alpha", fsync=False)
    (lazy / "d").mkdir()
    os.rename(lazy / "a", lazy / "d" / "b")
    reply = lazy.control("sync")
    assert reply == {"synced_files": 1, "synced_bytes": 5, "synced_metadata_ops": 3}

    lazy.control("drop")

    assert tree(lazy.backing) == tree(lazy.mountpoint) == {"d": None, "d/b": b"alpha"}


def test_clean_unmount_persists_like_umount(tmp_path: Path, mounter: Callable[[Path], LazyMount]) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    lazy = mounter(backing)
    write_file(lazy / "a", b"unsynced but cleanly unmounted", fsync=False)
    _stop(lazy)
    assert lazy.process.returncode == 0
    assert tree(backing) == {"a": b"unsynced but cleanly unmounted"}


def test_sigterm_is_a_clean_shutdown(tmp_path: Path, mounter: Callable[[Path], LazyMount]) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    lazy = mounter(backing)
    write_file(lazy / "a", b"unsynced, then SIGTERM", fsync=False)
    lazy.process.send_signal(signal.SIGTERM)
    assert lazy.process.wait(timeout=MOUNT_TIMEOUT_SECONDS) == 0, lazy.log.read_text(errors="replace")
    assert not is_lazyfs_mounted(str(lazy.mountpoint))
    assert tree(backing) == {"a": b"unsynced, then SIGTERM"}


# ------------------------------------------------------------- descriptor behaviour


def test_append_from_two_descriptors_and_pread(lazy: LazyMount) -> None:
    path = lazy / "log"
    first = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    second = os.open(path, os.O_WRONLY | os.O_APPEND)
    reader = os.open(path, os.O_RDONLY)
    expected = b""
    for index in range(20):
        record = f"record {index:03d};".encode()
        os.write(first if index % 2 else second, record)
        expected += record
        assert os.pread(reader, len(record), len(expected) - len(record)) == record
    assert os.pread(reader, 1 << 20, 0) == expected
    os.fsync(second)  # any descriptor of the file persists all of its data
    os.ftruncate(first, 33)  # recovery cutting a torn tail; then appends continue at the new end
    os.write(first, b"after truncate")
    assert os.pread(reader, 1 << 20, 0) == expected[:33] + b"after truncate"
    for descriptor in (first, second, reader):
        os.close(descriptor)

    lazy.control("drop")

    assert path.read_bytes() == expected


def test_descriptor_open_across_power_loss_fails_with_eio(lazy: LazyMount) -> None:
    write_file(lazy / "file", b"durable", fsync=True)
    descriptor = os.open(lazy / "file", os.O_RDWR)
    try:
        lazy.control("drop")
        with pytest.raises(OSError) as raised:
            os.write(descriptor, b"from before the power loss")
        assert raised.value.errno == errno.EIO
    finally:
        os.close(descriptor)
    assert (lazy / "file").read_bytes() == b"durable"


def test_unlinked_open_file_stays_readable_and_its_name_stays_gone(lazy: LazyMount) -> None:
    write_file(lazy / "file", b"x" * 5000, fsync=True)
    descriptor = os.open(lazy / "file", os.O_RDWR)
    (lazy / "file").unlink()
    os.pwrite(descriptor, b"y", 0)
    os.fsync(descriptor)  # commits the unlink, writes into the orphan
    assert os.pread(descriptor, 3, 0) == b"yxx"
    os.close(descriptor)
    lazy.control("drop")
    assert tree(lazy.mountpoint) == {}


def test_file_replaced_by_rename_stays_readable_through_an_open_descriptor(lazy: LazyMount) -> None:
    write_file(lazy / "checkpoint", b"old content", fsync=True)
    old = os.open(lazy / "checkpoint", os.O_RDONLY)
    try:
        write_file(lazy / "checkpoint.tmp", b"new content", fsync=True)
        os.rename(lazy / "checkpoint.tmp", lazy / "checkpoint")
        fsync_path(lazy.mountpoint)  # the old inode loses its last durable name
        assert os.pread(old, 100, 0) == b"old content"
    finally:
        os.close(old)
    assert (lazy / "checkpoint").read_bytes() == b"new content"


def test_unreachable_files_are_forgotten_at_commit_and_descriptors_do_not_leak(lazy: LazyMount) -> None:
    def descriptors() -> int:
        return len(os.listdir(f"/proc/{lazy.process.pid}/fd"))

    write_file(lazy / "anchor", b"a", fsync=True)
    before = descriptors()
    for round_number in range(30):
        write_file(lazy / f"scratch{round_number}", b"s" * 1000, fsync=False)
        (lazy / f"scratch{round_number}").unlink()
        fsync_path(lazy / "anchor")  # commits create + unlink: nothing can reach the data any more
    status = lazy.control("status")
    assert (status["dirty_files"], status["dirty_bytes"], status["pending_metadata_ops"]) == (0, 0, 0)
    assert descriptors() <= before


def test_control_file_is_hidden_and_protected(lazy: LazyMount) -> None:
    control = lazy / CONTROL_FILE_NAME
    write_file(lazy / "file", b"", fsync=False)
    assert os.listdir(lazy.mountpoint) == ["file"]
    attempts: list[Callable[[], object]] = [
        control.unlink,
        lambda: os.rename(control, lazy / "x"),
        lambda: os.rename(lazy / "file", control),
        lambda: os.mkdir(control),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as raised:
            attempt()
        assert raised.value.errno in (errno.EPERM, errno.EEXIST)
    with pytest.raises(LazyfsError, match="unknown command"):
        _raw_control(control, b"reboot\n")


def _raw_control(control: Path, line: bytes) -> None:
    """Bypass the client's own parsing to check the server's refusal."""
    descriptor = os.open(control, os.O_RDWR)
    try:
        os.write(descriptor, line)
        reply = os.pread(descriptor, 4096, 0)
    finally:
        os.close(descriptor)
    if b'"error"' in reply:
        raise LazyfsError(reply.decode())


# -------------------------------------------------------------------- torn writes


def _torn_history(lazy: LazyMount) -> list[tuple[str, int, bytes]]:
    """Pending changes on a durable file ``f``; returns them as (kind, offset or length, data)."""
    write_file(lazy / "f", b"B" * 64, fsync=True)
    rng = random.Random(7)
    changes: list[tuple[str, int, bytes]] = []
    descriptor = os.open(lazy / "f", os.O_RDWR)
    size = 64
    for index in range(12):
        if index % 5 == 4:
            length = rng.randrange(0, size)
            os.ftruncate(descriptor, length)
            changes.append(("truncate", length, b""))
            size = length
        else:
            offset = rng.randrange(0, size + 1)
            data = bytes([65 + index]) * rng.randrange(2, 40)
            os.pwrite(descriptor, data, offset)
            changes.append(("write", offset, data))
            size = max(size, offset + len(data))
    os.close(descriptor)
    write_file(lazy / "g", b"new file data", fsync=False)  # a pending create and a pending write
    return changes


def _prefix_states(base: bytes, changes: list[tuple[str, int, bytes]]) -> set[bytes]:
    """Every content a torn writeback may leave: first k changes, plus a cut of the next write."""
    states = set()
    content = bytearray(base)

    def apply(kind: str, where: int, data: bytes) -> None:
        if kind == "truncate":
            del content[where:]
            content.extend(bytes(max(0, where - len(content))))
        else:
            content.extend(bytes(max(0, where - len(content))))
            content[where : where + len(data)] = data

    for kind, where, data in changes:
        states.add(bytes(content))
        if kind == "write":
            for cut in range(1, len(data)):
                saved = bytes(content)
                apply(kind, where, data[:cut])
                states.add(bytes(content))
                content[:] = saved
        apply(kind, where, data)
    states.add(bytes(content))
    return states


def test_torn_keeps_a_seeded_prefix_deterministically(
    tmp_path: Path, mounter: Callable[[Path], LazyMount]
) -> None:
    outcomes: dict[int, list[dict[str, bytes | None]]] = {}
    changes: list[tuple[str, int, bytes]] = []
    for seed in range(6):
        for repetition in range(2):
            backing = tmp_path / f"backing-{seed}-{repetition}"
            backing.mkdir()
            lazy = mounter(backing)
            changes = _torn_history(lazy)
            reply = lazy.control(f"torn {seed}")
            assert reply["seed"] == seed
            assert tree(lazy.mountpoint) == tree(backing)
            outcomes.setdefault(seed, []).append(tree(backing))
            _stop(lazy)
    allowed = _prefix_states(b"B" * 64, changes)
    for seed, (first, second) in outcomes.items():
        assert first == second, f"seed {seed} gave two different outcomes"
        assert first["f"] in allowed, f"seed {seed} left a state that no prefix of the writes produces"
        new_file = first.get("g")
        assert new_file is None or b"new file data".startswith(new_file), f"seed {seed}: g = {new_file!r}"
    distinct = {outcome[0]["f"] for outcome in outcomes.values()}
    assert len(distinct) >= 3, "torn outcomes barely depend on the seed"


# ------------------------------------------------------------- the intended power-loss flow

_WRITER = """
import os, sys
descriptor = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
record = 0
while True:
    for _ in range(10):
        os.write(descriptor, b"record %08d\\n" % record)
        record += 1
    os.fsync(descriptor)
    print(record, flush=True)
"""


def test_killed_writer_then_drop_keeps_exactly_its_fsynced_records(lazy: LazyMount) -> None:
    """SIGKILL the writer, reap it, drop: what remains ends exactly at one of its fsyncs."""
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(lazy / "segment")], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None
        reported = 0
        while reported < 50:  # wait until it has fsynced at least five times
            line = writer.stdout.readline()
            assert line, "the writer died"
            reported = int(line)
    finally:
        writer.kill()
        writer.wait()
    assert lazy.control("status")["dirty_files"] in (0, 1)

    lazy.control("drop")

    content = (lazy / "segment").read_bytes()
    records = content.splitlines(keepends=True)
    assert len(records) % 10 == 0 and len(records) >= reported, f"{len(records)} records survived"
    assert records == [b"record %08d\n" % index for index in range(len(records))]
    assert content == (lazy.backing / "segment").read_bytes()


# ---------------------------------------------------------- filesystem process death


def test_sigkill_of_the_filesystem_is_power_loss_and_the_mount_recovers(
    tmp_path: Path, mounter: Callable[[Path], LazyMount]
) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    lazy = mounter(backing)
    write_file(lazy / "synced", b"survives", fsync=True)
    write_file(lazy / "unsynced", b"vanishes", fsync=False)
    descriptor = os.open(lazy / "synced", os.O_WRONLY | os.O_APPEND)
    os.write(descriptor, b" + unsynced tail")
    os.close(descriptor)

    lazy.process.send_signal(signal.SIGKILL)
    lazy.process.wait(timeout=MOUNT_TIMEOUT_SECONDS)

    assert tree(backing) == {"synced": b"survives"}
    with pytest.raises(OSError) as raised:
        os.listdir(lazy.mountpoint)
    assert raised.value.errno == errno.ENOTCONN
    with pytest.raises(LazyfsError, match="dead"):
        lazy.control("status")
    result = subprocess.run(
        [sys.executable, "-m", "nemesis.lazyfs", "unmount", str(lazy.mountpoint)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not is_lazyfs_mounted(str(lazy.mountpoint))

    again = mounter(backing)
    assert tree(again.mountpoint) == {"synced": b"survives"}
    write_file(again / "synced", b"rewritten", fsync=True)
    assert (backing / "synced").read_bytes() == b"rewritten"


# ------------------------------------------------------------------------- command line


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nemesis.lazyfs", *arguments],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_cli_control_prints_json_and_rejects_bad_commands(lazy: LazyMount, tmp_path: Path) -> None:
    status = _cli("control", str(lazy.mountpoint), "status")
    assert status.returncode == 0 and '"dirty_files": 0' in status.stdout
    bad = _cli("control", str(lazy.mountpoint), "torn", "abc")
    assert bad.returncode == 254 and "SEED must be an integer" in bad.stderr
    missing = _cli("control", str(tmp_path), "drop")
    assert missing.returncode == 1 and "is not a lazyfs mount" in missing.stderr


def test_cli_mount_rejects_bad_directories(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    not_a_directory = _cli("mount", str(tmp_path / "absent"), str(tmp_path / "dir"))
    assert not_a_directory.returncode == 254 and "BACKING_DIR" in not_a_directory.stderr
    nested = _cli("mount", str(tmp_path), str(tmp_path / "dir"))
    assert nested.returncode == 254 and "must not contain each other" in nested.stderr
    nothing = _cli("unmount", str(tmp_path / "dir"))
    assert nothing.returncode == 0 and "nothing was mounted" in nothing.stderr
