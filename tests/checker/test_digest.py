"""Content digests (:mod:`checker.digest`): of the values alone, for any row range of a table."""

from __future__ import annotations

import pyarrow as pa

from checker.digest import Digests, content_digest

TABLE = pa.table(
    {
        "s": pa.array(["ab", "c", None, "d", ""]),
        "l": pa.array([[1], [2, 3], None, [], [4]], pa.list_(pa.int32())),
        "i": pa.array([1, None, 3, 4, 5], pa.int64()),
        "b": pa.array([True, None, False, True, False]),
    }
)


def test_a_range_digests_as_the_rows_alone_however_they_are_laid_out() -> None:
    chunked = pa.concat_tables([TABLE.slice(0, 2), TABLE.slice(2, 3)])
    digests = Digests(TABLE)
    for start, stop in ((0, 5), (1, 4), (2, 2), (3, 5)):
        alone = pa.Table.from_pylist(TABLE.slice(start, stop - start).to_pylist(), schema=TABLE.schema)
        assert digests.of(start, stop) == content_digest(alone) == Digests(chunked).of(start, stop)


def test_any_change_of_a_value_or_a_null_changes_it() -> None:
    rows = TABLE.to_pylist()
    original = content_digest(TABLE)
    for column, value in (("s", "a"), ("s", None), ("l", [1, 2]), ("l", None), ("i", 0), ("b", None)):
        changed = [dict(row) for row in rows]
        changed[0][column] = value
        assert content_digest(pa.Table.from_pylist(changed, schema=TABLE.schema)) != original, column
    split = [dict(row) for row in rows]
    split[0]["s"], split[1]["s"] = "a", "bc"  # the same bytes, cut elsewhere
    assert content_digest(pa.Table.from_pylist(split, schema=TABLE.schema)) != original
    assert content_digest(TABLE.slice(1)) != content_digest(TABLE.slice(0, 4))
