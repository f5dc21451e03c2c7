"""lazyfs's disk faults (``nemesis.lazyfs.faults`` and ``rules``): the model against a byte reference
that knows which bytes a failed fsync lost, the rules' matching and lifetime, their parsing, and the
same through a real FUSE mount (a program's fsync gets EIO; a power loss then drops what it lost)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis.lazyfs.faults import FaultyModel, relative_path
from nemesis.lazyfs.protocol import CommandError, parse_command
from nemesis.lazyfs.rules import FailRule, SlowFsync

from . import test_lazyfs
from .test_lazyfs import LazyMount, write_file

lazy, mounter = test_lazyfs.lazy, test_lazyfs.mounter  # the real-mount fixtures, shared

_CHANGE = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 5000), st.binary(min_size=1, max_size=700)),
    st.tuples(st.just("truncate"), st.integers(0, 6000), st.just(b"")),
    st.tuples(st.sampled_from(["fsync", "failed-fsync"]), st.just(0), st.just(b"")),
)


class Reference:
    """What the view shows and the disk holds, byte by byte, with the fsyncgate rule: bytes a failed
    fsync lost stay in the view but are never written; a later writeback writes the rest and leaves
    the disk's old bytes (or zeros, past a truncate or the old end) where lost bytes are."""

    def __init__(self, base: bytes) -> None:
        self.view = bytearray(base)
        self.durable = bytes(base)
        self.dirty = bytearray(len(base))  # 1: written since the last writeback
        self.lost = bytearray(len(base))  # 1: lost by a failed fsync
        self.floor = len(base)  # disk bytes at or past this are not part of the view
        self.pending = False  # a write or truncate since the last writeback (else fsync writes nothing)

    def _resize(self, length: int) -> None:
        for array in (self.view, self.dirty, self.lost):
            del array[length:]
            array.extend(bytes(length - len(array)))

    def write(self, offset: int, data: bytes) -> None:
        self._resize(max(len(self.view), offset + len(data)))
        self.view[offset : offset + len(data)] = data
        self.dirty[offset : offset + len(data)] = b"\x01" * len(data)
        self.lost[offset : offset + len(data)] = bytes(len(data))
        self.pending = True

    def truncate(self, length: int) -> None:
        self._resize(length)
        self.floor = min(self.floor, length)
        self.pending = True

    def fsync(self) -> None:
        if not self.pending:
            return
        self.pending = False
        old = self.durable
        self.durable = bytes(
            (old[i] if i < min(len(old), self.floor) else 0) if self.lost[i] else self.view[i]
            for i in range(len(self.view))
        )
        self.dirty = bytearray(len(self.view))
        self.floor = len(self.view)

    def failed_fsync(self) -> None:
        self.lost = bytearray(a | b for a, b in zip(self.lost, self.dirty, strict=True))
        self.dirty = bytearray(len(self.view))
        self.pending = False


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=3000), st.lists(_CHANGE, max_size=25))
def test_a_failed_fsync_loses_the_unsynced_bytes_for_good_but_the_view_keeps_them(
    tmp_path_factory: pytest.TempPathFactory, base: bytes, changes: list[tuple[str, int, bytes]]
) -> None:
    backing = tmp_path_factory.mktemp("faults")
    (backing / "f.log").write_bytes(base)
    model = FaultyModel(str(backing))
    handle = model.open_file("/f.log", os.O_RDWR)
    reference = Reference(base)
    for kind, where, data in changes:
        if kind == "write":
            model.write(handle, where, data)
            reference.write(where, data)
        elif kind == "truncate":
            model.truncate(model.node_of(handle), where)
            reference.truncate(where)
        elif kind == "fsync":
            model.fsync_file(handle)
            reference.fsync()
            assert (backing / "f.log").read_bytes() == reference.durable
        else:
            model.add_rule(FailRule("fsync", "EIO", "*.log"))
            with pytest.raises(OSError) as raised:
                model.fsync_file(handle)
            assert raised.value.errno == errno.EIO
            reference.failed_fsync()
            assert (backing / "f.log").read_bytes() == reference.durable
        assert model.read(handle, 0, 10**6) == bytes(reference.view)
    model.sync_all()  # the kernel's writeback does not bring lost bytes back either
    reference.fsync()
    model.drop()
    assert (backing / "f.log").read_bytes() == reference.durable
    assert model.read(model.open_file("/f.log", os.O_RDONLY), 0, 10**6) == reference.durable


def _model_with_files(tmp_path: Path) -> tuple[FaultyModel, int, int]:
    """A model holding ``topic-0/00.log`` and ``topic-0/checkpoint``, both open."""
    model = FaultyModel(str(tmp_path))
    model.make_directory("/topic-0", 0o755, 0, 0)
    log = model.create_file("/topic-0/00.log", 0o644, 0, 0)
    checkpoint = model.create_file("/topic-0/checkpoint", 0o644, 0, 0)
    return model, log, checkpoint


def test_rules_match_paths_relative_to_the_mount_and_once_fires_once(tmp_path: Path) -> None:
    model, log, checkpoint = _model_with_files(tmp_path)
    assert relative_path(model.node_of(log)) == "topic-0/00.log"
    model.add_rule(FailRule("write", "ENOSPC", "*.log", "once"))
    model.write(checkpoint, 0, b"cp")  # not matched
    with pytest.raises(OSError) as raised:
        model.write(log, 0, b"record")
    assert raised.value.errno == errno.ENOSPC
    assert model.read(log, 0, 100) == b""  # a failed write wrote nothing
    model.write(log, 0, b"record")  # once: the rule is gone
    assert model.status()["rules"] == []
    model.add_rule(FailRule("read", "EIO", "topic-0/*", "always"))
    for handle in (log, checkpoint, log):
        with pytest.raises(OSError):
            model.read(handle, 0, 10)
    assert model.status()["failed_calls"] == {"write": 1, "fsync": 0, "read": 3}
    assert model.clear_rules() == {"cleared_rules": 1}
    assert model.read(log, 0, 100) == b"record"


def test_a_failed_fsync_loses_only_its_file_and_a_later_fsync_succeeds_without_it(tmp_path: Path) -> None:
    model, log, checkpoint = _model_with_files(tmp_path)
    model.write(log, 0, b"acked?")
    model.write(checkpoint, 0, b"hw=5")
    model.add_rule(FailRule("fsync", "EIO", "*.log"))
    with pytest.raises(OSError):
        model.fsync_file(log)
    model.fsync_file(log)  # the error was reported once; nothing is left to write
    model.fsync_file(checkpoint)
    assert model.read(log, 0, 100) == b"acked?"  # still in the view (the page cache)
    assert model.status()["lost_bytes"] == 6
    # the metadata journal was committed by the failed fsync: the file exists, empty
    assert (tmp_path / "topic-0" / "00.log").read_bytes() == b""
    model.drop()
    assert (tmp_path / "topic-0" / "checkpoint").read_bytes() == b"hw=5"
    assert (tmp_path / "topic-0" / "00.log").read_bytes() == b""


def test_slow_fsync_delays_matching_fsyncs_only(tmp_path: Path) -> None:
    model, log, checkpoint = _model_with_files(tmp_path)
    model.add_rule(SlowFsync(200, "*.log"))
    started = time.monotonic()
    model.fsync_file(checkpoint)
    assert time.monotonic() - started < 0.15
    started = time.monotonic()
    model.fsync_file(log)
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("fail fsync EIO", "'fail' takes OP ERRNO GLOB [once|always], got 2 arguments"),
        ("fail sync EIO *.log", "'fail' OP must be one of write, fsync, read, not 'sync'"),
        ("fail fsync EPERM *.log", "'fail' ERRNO must be one of EIO, ENOSPC, EROFS, not 'EPERM'"),
        ("fail fsync EIO *.log twice", "'fail' repeat must be one of once, always, not 'twice'"),
        ("fail fsync EIO /data/*.log", "relative to the mount"),
        ("slow-fsync fast *.log", "'slow-fsync' MS must be an integer, got 'fast'"),
        ("slow-fsync 0 *.log", "'slow-fsync' MS must be in 1..60000, got 0"),
        ("clear all", "'clear' takes no arguments, got 'all'"),
    ],
)
def test_bad_rule_commands_say_which_word_is_wrong(line: str, complaint: str) -> None:
    with pytest.raises(CommandError) as raised:
        parse_command(line)
    assert complaint in str(raised.value)
    assert "\n" not in str(raised.value)


def test_rule_commands_render_back_to_themselves() -> None:
    for line in ("fail fsync EIO *.log always", "fail write ENOSPC *checkpoint* once", "slow-fsync 50 *"):
        assert parse_command(line).render() == line
    assert parse_command("fail read EIO *.log").render() == "fail read EIO *.log once"


def test_through_fuse_a_program_gets_eio_and_power_loss_drops_what_the_failed_fsync_lost(
    lazy: LazyMount,
) -> None:
    durable = lazy / "segment.log"
    write_file(durable, b"synced;", fsync=True)
    lazy.control("fail fsync EIO *.log once")
    descriptor = os.open(durable, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(descriptor, b"lost;")
        with pytest.raises(OSError) as raised:
            os.fsync(descriptor)
        assert raised.value.errno == errno.EIO
        os.fsync(descriptor)  # succeeds: the lost pages are clean now
    finally:
        os.close(descriptor)
    assert durable.read_bytes() == b"synced;lost;"  # a reader sees bytes that are on no disk
    status = lazy.control("status")
    assert status["rules"] == [] and status["lost_bytes"] == 5
    lazy.control("slow-fsync 20 *.log")
    with pytest.raises(CommandError, match="'fail' ERRNO must be one of EIO, ENOSPC"):
        lazy.control("fail fsync EBADF *.log")
    assert lazy.control("clear") == {"cleared_rules": 1}
    lazy.control("drop")
    assert durable.read_bytes() == b"synced;"
