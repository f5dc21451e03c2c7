"""The value examples' details and shown ops (:mod:`checker.value_details`): what the value checks
aggregate for the shown values alone, the keys of the ops their examples show, and those ops'
rows -- as computed from every row, alike from the run directories and from a packed store."""

from __future__ import annotations

import pandas as pd

from checker.evidence import RunInput
from checker.example_rules import example_op_keys, select_example_rows
from checker.pandas.engine import aggregate_values
from checker.value_details import value_details_with_ops
from testbed.record.history import F_SEND
from tests.checker.stored_runs import by_run, history

Store = tuple[list[RunInput], list[RunInput]]
COLUMNS = ["run_id", "partition", "value"]


def test_details_and_ops_read_alike_from_directories_and_the_store(store: Store) -> None:
    direct, packed = store
    rows = history(direct)
    sent = rows[(rows["f"] == F_SEND) & rows["value"].notna()][COLUMNS].drop_duplicates()
    shown = pd.concat([of_run.iloc[number::40] for number, (_, of_run) in enumerate(sent.groupby("run_id"))])
    # A value of the first run asked for the second: no row of the second run holds it.
    first, second = sorted(shown["run_id"].unique())[:2]
    borrowed = shown[shown["run_id"] == first].head(1).assign(run_id=second)
    asked = pd.concat([shown, borrowed], ignore_index=True)
    details = aggregate_values(rows.merge(asked, on=COLUMNS))
    keys = example_op_keys(details.assign(value_text=None))
    ops = select_example_rows(rows, keys)
    assert len(details) == len(shown), "the borrowed value has no details"
    for runs in (direct, packed):
        found_details, found_keys, found_ops = value_details_with_ops(runs, asked, aggregate_values)
        assert found_details.equals(details)
        assert found_keys.equals(keys)
        assert by_run(found_ops).equals(by_run(ops))
