"""The ``txn`` op in history.parquet: head rows restore the op, item rows carry the micro-ops
with the completion's type, and broken transactions are refused with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from testbed.record.history import (
    F_TXN,
    F_TXN_END,
    F_TXN_OFFSETS,
    F_TXN_POLL,
    F_TXN_SEND,
    SHAPE_TXN_ITEM,
    TYPE_CODES,
    HistoryFormatError,
    HistoryWriter,
    convert_history,
    ops_to_table,
    read_op_heads,
    table_to_ops,
)
from testbed.record.ops import Op
from testbed.record.txn_rows import group_code

SEND = {"f": "send", "partition": 0, "key": "k0", "value": 17}
POLL = {"f": "poll"}
READ = {"partition": 1, "offset": 3, "key": "k1", "value": 12}


def txn(index: int, process: int, kind: str, value: Any, error: str | None = None) -> Op:
    return Op(index, index * 10, process, kind, "txn", value, error)


def committed() -> list[Op]:
    return [
        txn(0, 0, "invoke", [SEND, POLL]),
        txn(
            1, 0, "ok", [{**SEND, "offset": 5}, {"f": "poll", "records": [READ]}, {"f": "commit", "time": 7}]
        ),
    ]


def rows(table: pa.Table, f: int) -> list[dict[str, Any]]:
    return [row for row in table.to_pylist() if row["f"] == f]


def test_committed_txn_gives_head_rows_and_item_rows_of_its_outcome() -> None:
    table = ops_to_table(committed(), run_id=1)
    assert len(rows(table, F_TXN)) == 2
    (send,) = rows(table, F_TXN_SEND)
    assert (send["type"], send["item"], send["partition"], send["value"], send["offset"]) == (
        TYPE_CODES["ok"],
        0,
        0,
        17,
        5,
    )
    (read,) = rows(table, F_TXN_POLL)
    assert (read["item"], read["partition"], read["offset"], read["value"]) == (1, 1, 3, 12)
    (end,) = rows(table, F_TXN_END)
    assert (end["item"], end["value"], end["complete"], end["shape"]) == (2, 7, True, SHAPE_TXN_ITEM)


OFFSETS = {"f": "send-offsets", "group": "g"}


def test_a_send_offsets_micro_op_is_a_row_per_partition_with_the_group() -> None:
    ops = [
        txn(0, 0, "invoke", [POLL, OFFSETS]),
        txn(
            1,
            0,
            "ok",
            [
                {"f": "poll", "records": []},
                {**OFFSETS, "offsets": [{"partition": 0, "offset": 4}, {"partition": 2, "offset": 9}]},
                {"f": "commit", "time": 5},
            ],
        ),
    ]
    table = ops_to_table(ops, run_id=1)
    sent = rows(table, F_TXN_OFFSETS)
    assert [(r["item"], r["partition"], r["offset"], r["key"], r["value"]) for r in sent] == [
        (1, 0, 4, "g", group_code("g")),
        (1, 2, 9, "g", group_code("g")),
    ]
    assert table_to_ops(table) == ops


def test_table_to_ops_restores_txn_ops_from_their_head_rows() -> None:
    ops = committed()
    assert table_to_ops(ops_to_table(ops, run_id=1)) == ops


def test_read_op_heads_has_one_row_per_txn_op(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        for op in committed():
            writer.append(op)
    convert_history(path, tmp_path / "history.parquet")
    heads = read_op_heads(tmp_path / "history.parquet")
    assert heads["index"].to_pylist() == [0, 1]
    assert heads["type"].to_pylist() == ["invoke", "ok"]


def test_aborted_txn_items_are_fail_rows_and_the_end_an_abort() -> None:
    ops = [
        txn(0, 0, "invoke", [SEND]),
        txn(1, 0, "fail", [{**SEND, "offset": 5}, {"f": "abort", "time": 3}], error="abort"),
    ]
    table = ops_to_table(ops, run_id=1)
    assert [r["type"] for r in rows(table, F_TXN_SEND)] == [TYPE_CODES["fail"]]
    assert [r["complete"] for r in rows(table, F_TXN_END)] == [False]


def test_a_completion_without_value_inherits_the_invokes_sends() -> None:
    ops = [txn(0, 0, "invoke", [SEND, POLL]), txn(1, 0, "info", None, error="timed out")]
    (send,) = rows(ops_to_table(ops, run_id=1), F_TXN_SEND)
    assert (send["type"], send["inherited"], send["offset"], send["value"]) == (
        TYPE_CODES["info"],
        True,
        None,
        17,
    )


def test_an_invoke_never_completed_gives_info_items() -> None:
    """A history cut short: a read of such a send must find it (not be 'unexpected')."""
    table = ops_to_table([txn(0, 0, "invoke", [SEND])], run_id=1)
    (send,) = rows(table, F_TXN_SEND)
    assert (send["index"], send["type"], send["inherited"]) == (0, TYPE_CODES["info"], True)
    assert [op.type for op in table_to_ops(table)] == ["invoke"]


@pytest.mark.parametrize(
    ("invoke", "completion", "kind", "reason"),
    [
        ([], None, "ok", "a list of 1..64 micro-ops"),
        ([{"f": "read"}], None, "ok", "unknown f 'read'"),
        ([{**SEND, "offset": 3}], None, "ok", "a send invoke carries no offset"),
        ([{"f": "commit", "time": 1}], None, "ok", "an invoke has no 'commit' micro-op"),
        ([SEND], [SEND, {"f": "abort", "time": 1}], "ok", "an ok (committed) txn cannot end in 'abort'"),
        ([SEND], [{**SEND, "value": 18}], "ok", "is not the invoke's"),
        ([SEND, POLL], [SEND], "ok", "has 1 micro-op(s) before its end, its invoke 2"),
        ([{"f": "send-offsets", "group": ""}], None, "ok", "needs a non-empty string 'group'"),
        ([{**OFFSETS, "offsets": []}], None, "ok", "a send-offsets invoke is {f, group}"),
        ([OFFSETS], [{**OFFSETS, "group": "h"}], "ok", "is not the invoke's"),
        ([OFFSETS], [{**OFFSETS, "offsets": {"0": 3}}], "ok", "offsets must be a list"),
        ([OFFSETS], [{**OFFSETS, "offsets": [{"partition": 0}]}], "ok", "an offsets entry is"),
        ([OFFSETS], [{**OFFSETS, "offsets": [{"partition": 0, "offset": -2}]}], "ok", "non-negative"),
        (
            [OFFSETS],
            [{**OFFSETS, "offsets": [{"partition": 0, "offset": 2}, {"partition": 0, "offset": 3}]}],
            "ok",
            "one per partition",
        ),
        ([POLL], [SEND], "ok", "is 'send' but the invoke's was 'poll'"),
        ([POLL], [{"f": "poll", "records": [{"offset": 1}]}], "ok", "a record must have exactly"),
        ([SEND], [SEND, {"f": "commit"}], "ok", "an end micro-op is {f, time}"),
    ],
)
def test_broken_txns_are_refused_with_the_reason(
    tmp_path: Path, invoke: Any, completion: Any, kind: str, reason: str
) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        writer.append(txn(0, 0, "invoke", invoke))
        if completion is not None:
            writer.append(txn(1, 0, kind, completion))
    with pytest.raises(HistoryFormatError) as raised:
        convert_history(path, tmp_path / "history.parquet")
    assert reason in str(raised.value)
    assert str(raised.value).startswith(f"{path}:")
