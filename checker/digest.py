"""Content digests of a run's rows of a table, by which a packed store is verified (:mod:`checker.pack`).

A digest is SHA-256 over each column's *values* in row order -- which rows are null, then the
values (nulls as zero or empty), strings as their lengths and bytes, lists as their lengths and
their items' values -- never over how a file or a reader laid them out: an Arrow IPC stream of
two equal tables differed with the writer of the Parquet file they were read from.  Equal rows
give equal digests; a changed value, null, row or row order gives another.

Why a class that digests any row range of one table (:class:`Digests`): a packed store is
thousands of runs, and turning a column into those canonical bytes costs a dozen Arrow calls --
per run, that was most of packing 10,000 small runs.  Done once for a file's (or a chunk's) rows,
each run's digest is then a few slices of numpy arrays fed to the hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc


def _numpy(array: pa.Array | pa.ChunkedArray, kind: type[Any]) -> npt.NDArray[Any]:
    return np.ascontiguousarray(np.asarray(array.to_numpy(zero_copy_only=False), dtype=kind))


@dataclasses.dataclass(frozen=True, slots=True)
class _Column:
    """One column's canonical bytes, per row: ``valid``, then ``values`` (fixed width), or
    ``lengths`` with ``ends`` into ``data`` (strings) or into ``child`` (lists)."""

    valid: npt.NDArray[np.uint8]
    values: npt.NDArray[Any] | None = None
    lengths: npt.NDArray[np.int64] | None = None
    ends: npt.NDArray[np.int64] | None = None
    data: memoryview | None = None
    child: _Column | None = None

    @classmethod
    def of(cls, array: pa.Array) -> _Column:
        valid = _numpy(pc.is_valid(array), np.uint8)
        kind = array.type
        if pa.types.is_list(kind):
            lengths = _numpy(pc.fill_null(pc.list_value_length(array), 0), np.int64)
            ends = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            return cls(valid, lengths=lengths, ends=ends, child=cls.of(pc.list_flatten(array)))
        if pa.types.is_string(kind) or pa.types.is_binary(kind):
            filled = pc.fill_null(array, "").cast(pa.binary())
            lengths = _numpy(pc.binary_length(filled), np.int64)
            _, offsets, data = filled.buffers()
            if offsets is None or data is None or not len(filled):
                return cls(
                    valid, lengths=lengths, ends=np.zeros(len(filled) + 1, np.int64), data=memoryview(b"")
                )
            ends = np.frombuffer(offsets, dtype=np.int32, count=len(filled) + 1, offset=filled.offset * 4)
            return cls(valid, lengths=lengths, ends=ends.astype(np.int64), data=memoryview(data))
        if pa.types.is_boolean(kind):
            return cls(valid, values=_numpy(pc.fill_null(array, False), np.uint8))
        return cls(valid, values=np.ascontiguousarray(pc.fill_null(array, 0).to_numpy(zero_copy_only=False)))

    def feed(self, digest: Any, start: int, stop: int) -> None:
        digest.update(self.valid[start:stop].tobytes())
        if self.values is not None:
            digest.update(self.values[start:stop].tobytes())
            return
        assert self.lengths is not None and self.ends is not None
        digest.update(self.lengths[start:stop].tobytes())
        low, high = int(self.ends[start]), int(self.ends[stop])
        if self.child is not None:
            self.child.feed(digest, low, high)
        elif self.data is not None:
            digest.update(self.data[low:high])


class Digests:
    """The digest of any row range of ``table`` (see the module docstring)."""

    def __init__(self, table: pa.Table) -> None:
        self.rows = table.num_rows
        self._columns = [
            (name.encode() + b"\0", _Column.of(table.column(name).combine_chunks()))
            for name in table.column_names
        ]

    def of(self, start: int, stop: int) -> str:
        """The digest of rows ``start`` .. ``stop - 1``."""
        if not 0 <= start <= stop <= self.rows:
            raise IndexError(f"rows {start}..{stop} of a table of {self.rows}")
        digest = hashlib.sha256()
        for name, column in self._columns:
            digest.update(name)
            column.feed(digest, start, stop)
        return digest.hexdigest()


def content_digest(table: pa.Table) -> str:
    """The digest of all of ``table``'s rows."""
    return Digests(table).of(0, table.num_rows)
