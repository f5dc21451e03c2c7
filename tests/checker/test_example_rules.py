"""The rules of which stored rows an example shows (:mod:`checker.example_rules`): the keys the
checks' answers make, the exact rules, and the Arrow narrowing that must keep a superset of them."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from checker.engine import HISTORY_ROW_COLUMNS, to_pandas
from checker.example_rules import (
    at_positions,
    example_op_keys,
    key_rows,
    observations,
    ops_in,
    position_rows,
    select_example_rows,
)
from testbed.record.history import F_DRAIN, F_POLL, F_SEND, HISTORY_SCHEMA


def _rows(*rows: dict[str, object]) -> pa.Table:
    """History rows: the columns not given are null."""
    return pa.Table.from_pylist([dict(row) for row in rows], schema=HISTORY_SCHEMA)


# Run 1: a send of 10 (op 0: invoke and ok, record-less), a poll (op 5) reading 10 and 11 at
# offsets 0 and 1, a drain (op 9) of both; run 2 polls value 10 too (op 5), at offset 0.
ROWS = _rows(
    {"run_id": 1, "index": 0, "f": F_SEND, "type": 0, "partition": 0, "value": 10},
    {"run_id": 1, "index": 1, "f": F_SEND, "type": 1, "partition": 0, "value": 10, "offset": 0},
    {"run_id": 1, "index": 5, "f": F_POLL, "type": 1, "item": 0, "partition": 0, "offset": 0, "value": 10},
    {"run_id": 1, "index": 5, "f": F_POLL, "type": 1, "item": 1, "partition": 0, "offset": 1, "value": 11},
    {"run_id": 1, "index": 9, "f": F_DRAIN, "type": 1, "item": 0, "partition": 0, "offset": 0, "value": 10},
    {"run_id": 1, "index": 9, "f": F_DRAIN, "type": 1, "item": 1, "partition": 0, "offset": 1, "value": 11},
    {"run_id": 2, "index": 5, "f": F_POLL, "type": 1, "item": 0, "partition": 0, "offset": 0, "value": 10},
)
VALUES = pd.DataFrame(
    {
        "run_id": [1],
        "send_index": [1],
        "read_index": [5],
        "partition": [0],
        "value": [10],
        "value_text": [None],
    }
)


def test_a_value_example_shows_its_send_and_its_value_in_its_first_read() -> None:
    keys = example_op_keys(VALUES)
    assert sorted(zip(keys["run_id"], keys["index"], strict=True)) == [(1, 1), (1, 5)]
    shown = select_example_rows(to_pandas(ROWS), keys)
    assert list(shown.columns) == list(HISTORY_ROW_COLUMNS)
    # The whole send op (record-less), and of the poll only the record of 10: not 11, not run 2's.
    assert sorted(zip(shown["run_id"], shown["index"], shown["value"], strict=True)) == [
        (1, 1, 10),
        (1, 5, 10),
    ]


def test_the_arrow_narrowing_keeps_every_row_the_rule_keeps() -> None:
    keys = example_op_keys(VALUES)
    exact = select_example_rows(to_pandas(ROWS), keys)
    narrowed = ROWS.take(pa.array(key_rows(ROWS, keys)))
    assert narrowed.num_rows < ROWS.num_rows
    assert select_example_rows(to_pandas(narrowed), keys).equals(exact)
    assert ops_in(ROWS, keys).equals(exact)


def test_positions_match_run_partition_and_offset_exactly() -> None:
    keys = pd.DataFrame({"run_id": [2], "partition": [0], "offset": [0]})
    found = at_positions(ROWS, keys)
    assert list(zip(found["run_id"], found["index"], strict=True)) == [(2, 5)]
    assert ROWS.take(pa.array(position_rows(ROWS, keys))).column("run_id").to_pylist() == [2]


def test_observations_are_acks_with_an_offset_and_read_records() -> None:
    seen = observations(to_pandas(ROWS))
    assert list(zip(seen["run_id"], seen["index"], strict=True)) == [
        (1, 1),
        (1, 5),
        (1, 5),
        (1, 9),
        (1, 9),
        (2, 5),
    ]
