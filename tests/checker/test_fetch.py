"""The driver-side example fetches (:mod:`checker.fetch`): the rows at positions and the ops' rows
read from the runs' files are the rows the exact rules pick from every row -- alike from the run
directories and from a packed store whose files hold several runs, whose rows must never answer
another run's keys."""

from __future__ import annotations

import pandas as pd

from checker.engine import HISTORY_ROW_COLUMNS, REPLICA_ROW_COLUMNS
from checker.evidence import RunInput
from checker.example_rules import OP_KEY_TYPES, observations, select_example_rows
from checker.fetch import fetch_observations, fetch_ops, fetch_replica_records
from testbed.record.history import F_POLL
from tests.checker.stored_runs import by_run, history, positions, replicas

Store = tuple[list[RunInput], list[RunInput]]


def test_replica_records_at_positions_read_alike_from_directories_and_the_store(store: Store) -> None:
    direct, packed = store
    rows = replicas(direct)
    keys = positions(rows)
    expected = rows.merge(keys, on=["run_id", "partition", "offset"])[list(REPLICA_ROW_COLUMNS)]
    assert set(expected["run_id"]) == set(rows["run_id"]), "every run has rows to fetch"
    for runs in (direct, packed):
        found = fetch_replica_records(runs, keys)
        assert by_run(found).equals(by_run(expected))


def test_observations_at_positions_read_alike_from_directories_and_the_store(store: Store) -> None:
    direct, packed = store
    rows = history(direct)
    keys = positions(rows)
    expected = observations(rows.merge(keys, on=["run_id", "partition", "offset"]))
    assert set(expected["run_id"]) == set(rows["run_id"]), "every run has rows to fetch"
    for runs in (direct, packed):
        found = fetch_observations(runs, keys)
        assert by_run(found)[list(HISTORY_ROW_COLUMNS)].equals(by_run(expected)[list(HISTORY_ROW_COLUMNS)])


def test_the_ops_rows_read_alike_from_directories_and_the_store(store: Store) -> None:
    direct, packed = store
    rows = history(direct)
    records = rows[(rows["f"] == F_POLL) & rows["item"].notna()]
    # Each run's own record of another of its polls: keys that differ from run to run.
    chosen = pd.concat(
        [
            of_run.iloc[[(11 * number) % len(of_run)]]
            for number, (_, of_run) in enumerate(records.groupby("run_id"))
        ]
    )
    keys = pd.DataFrame(
        {
            "run_id": chosen["run_id"],
            "index": chosen["index"],
            "partition": chosen["partition"],
            "value": chosen["value"],
            "value_text": None,
            "offset": pd.NA,
            "null_value": False,
        }
    ).astype(OP_KEY_TYPES)
    expected = select_example_rows(rows, keys)
    assert set(expected["run_id"]) == set(rows["run_id"]), "every run has rows to fetch"
    for runs in (direct, packed):
        assert by_run(fetch_ops(runs, keys)).equals(by_run(expected))
