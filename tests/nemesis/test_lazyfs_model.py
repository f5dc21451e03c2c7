"""Properties of lazyfs's in-memory structures, without FUSE: fast, and checked against plain references.

The same semantics through real mounts are in test_lazyfs.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis.lazyfs.extents import Extents
from nemesis.lazyfs.model import LazyModel


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 300), st.binary(min_size=1, max_size=80)), max_size=40)
)
def test_extents_match_a_plain_buffer(operations: list[tuple[bool, int, bytes]]) -> None:
    extents = Extents()
    reference = bytearray()
    written = bytearray()  # 1 where `reference` holds written (not gap) bytes
    for is_truncate, where, data in operations:
        if is_truncate:
            extents.truncate(where)
            del reference[where:], written[where:]
        else:
            extents.write(where, data)
            growth = max(0, where + len(data) - len(reference))
            reference.extend(bytes(growth))
            written.extend(bytes(growth))
            reference[where : where + len(data)] = data
            written[where : where + len(data)] = b"\x01" * len(data)
    held = bytearray(len(reference))
    held_mask = bytearray(len(reference))
    previous_end = -1
    for start, pieces in extents.runs():
        assert start > previous_end, "runs must be disjoint, in order, and maximal"
        data = b"".join(pieces)
        previous_end = start + len(data)
        held[start:previous_end] = data
        held_mask[start:previous_end] = b"\x01" * len(data)
    assert held_mask == written
    assert bytes(held) == bytes(byte if flag else 0 for byte, flag in zip(reference, written, strict=True))
    assert extents.byte_count == sum(written)
    for low in range(0, len(reference) + 1, 17):
        for start, piece in extents.overlapping(low, low + 40):
            assert bytes(piece) == bytes(reference[start : start + len(piece)])
            assert low <= start and start + len(piece) <= low + 40


_FILE_CHANGE = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 5000), st.binary(min_size=1, max_size=700)),
    st.tuples(st.just("truncate"), st.integers(0, 6000), st.just(b"")),
    st.tuples(st.just("fsync"), st.just(0), st.just(b"")),
)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.lists(_FILE_CHANGE, max_size=25))
def test_model_view_and_drop_match_a_reference(tmp_path_factory: pytest.TempPathFactory, base: bytes,
                                               changes: list[tuple[str, int, bytes]]) -> None:  # fmt: skip
    backing = tmp_path_factory.mktemp("model")
    (backing / "f").write_bytes(base)
    model = LazyModel(str(backing))
    handle = model.open_file("/f", os.O_RDWR)
    view, durable = bytearray(base), bytes(base)
    for kind, where, data in changes:
        if kind == "write":
            model.write(handle, where, data)
            view.extend(bytes(max(0, where + len(data) - len(view))))
            view[where : where + len(data)] = data
        elif kind == "truncate":
            model.truncate(model.node_of(handle), where)
            del view[where:]
            view.extend(bytes(where - len(view)))
        else:
            model.fsync_file(handle)
            durable = bytes(view)
            assert (backing / "f").read_bytes() == durable
        assert model.read(handle, 0, 10**6) == bytes(view)
        assert model.read(handle, 123, 456) == bytes(view[123:579])
    model.drop()
    assert (backing / "f").read_bytes() == durable
    assert model.read(model.open_file("/f", os.O_RDONLY), 0, 10**6) == durable


def test_torn_keeps_a_prefix_of_the_metadata_journal(tmp_path: Path) -> None:
    survivors_seen = set()
    for seed in range(25):
        backing = tmp_path / f"backing-{seed}"
        backing.mkdir()
        model = LazyModel(str(backing))
        for index in range(10):
            model.release(model.create_file(f"/f{index}", 0o644, 0, 0))
        model.make_directory("/d", 0o755, 0, 0)
        model.rename("/f0", "/d/moved", no_replace=False)
        reply = model.torn(seed)
        kept = reply["kept_metadata_ops"]
        assert isinstance(kept, int)
        expected = {f"f{index}" for index in range(min(kept, 10))}
        if kept >= 11:
            expected.add("d")
        if kept == 12:
            expected.discard("f0")
        names = set(os.listdir(backing))
        if "d" in names:
            assert os.listdir(backing / "d") == (["moved"] if kept == 12 else [])
            names.discard("d")
            expected.discard("d")
        assert names == expected, f"seed {seed} kept {kept} entries"
        survivors_seen.add(kept)
    assert len(survivors_seen) >= 5, "the kept prefix barely depends on the seed"


def test_namespace_errors_follow_posix(tmp_path: Path) -> None:
    model = LazyModel(str(tmp_path))
    model.make_directory("/d", 0o755, 0, 0)
    model.release(model.create_file("/d/f", 0o644, 0, 0))
    for action, code in (
        (lambda: model.remove_directory("/d"), errno.ENOTEMPTY),
        (lambda: model.unlink("/d"), errno.EISDIR),
        (lambda: model.rename("/d", "/d/f/inside", no_replace=False), errno.ENOTDIR),
        (lambda: model.rename("/d", "/d/sub", no_replace=False), errno.EINVAL),
        (lambda: model.create_file("/d/f", 0o644, 0, 0), errno.EEXIST),
        (lambda: model.lookup("/d/f/x"), errno.ENOTDIR),
        (lambda: model.lookup("/missing"), errno.ENOENT),
        (lambda: model.create_file("/" + "n" * 256, 0o644, 0, 0), errno.ENAMETOOLONG),
        (lambda: model.unlink("/.lazyfs-control"), errno.EPERM),
    ):
        with pytest.raises(OSError) as raised:
            action()
        assert raised.value.errno == code, errno.errorcode[code]
    model.release(model.create_file("/g", 0o644, 0, 0))
    with pytest.raises(OSError):
        model.rename("/g", "/d/f", no_replace=True)
    model.rename("/g", "/d/f", no_replace=False)
    assert sorted(name for name, _ in model.list_directory(model.open_directory("/"))) == ["d"]
