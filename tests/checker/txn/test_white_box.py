"""hanging-transaction (:mod:`checker.txn.white_box`) from hand-written event logs: planted and
absent, each condition of the definition taken away in turn (unmarked-transaction:
``test_markers.py``)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from checker.definitions import HANGING_TRANSACTION
from checker.txn.white_box import INPUT_COLUMNS, transaction_invariants

TOPIC = "t"
HANGING = frozenset({HANGING_TRANSACTION})


def event(node: str, seq: int, ts: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"node_name": node, "seq": seq, "ts": ts, "kind": kind, **fields}


def frame(events: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [
        {
            "run_id": 9,
            "node_name": e["node_name"],
            "seq": e["seq"],
            "ts": e["ts"],
            "kind": e["kind"],
            "topic": e.get("topic"),
            "partition": e.get("partition"),
            "role": e.get("role"),
            "line": json.dumps({k: v for k, v in e.items() if k != "node_name"}),
        }
        for e in events
    ]
    return pd.DataFrame(rows, columns=list(INPUT_COLUMNS))


def opened(first: int = 12) -> dict[str, Any]:
    return event(
        "n1",
        5,
        100,
        "txn-open",
        topic=TOPIC,
        partition=0,
        producer_id=7,
        producer_epoch=0,
        first_offset=first,
    )


def state(name: str, partitions: list[list[Any]] | None = None, ts: int = 90) -> dict[str, Any]:
    return event(
        "n2", 3, ts, "txn-state", topic="__transaction_state", partition=4, transactional_id="x",
        producer_id=7, producer_epoch=0, state=name, partitions=partitions or [],
    )  # fmt: skip


def hw(lso: int, new_hw: int = 30) -> dict[str, Any]:
    return event("n1", 9, 200, "hw", topic=TOPIC, partition=0, role="leader", new_hw=new_hw, lso=lso)


def marker(offset: int) -> dict[str, Any]:
    return event(
        "n1", 6, 150, "txn-marker", topic=TOPIC, partition=0, producer_id=7, committed=False, offset=offset
    )


def test_a_late_batch_after_its_transaction_ended_holds_the_lso_for_good() -> None:
    """KAFKA-14402: the coordinator completed the abort, then the late batch opened a transaction."""
    found = transaction_invariants(frame([state("CompleteAbort"), opened(), hw(lso=12)]), TOPIC, HANGING)
    assert found[
        ["kind", "partition", "node", "seq", "value", "bound", "positions", "prev_node", "prev_seq"]
    ].to_dict("records") == [
        {
            "kind": HANGING_TRANSACTION,
            "partition": 0,
            "node": "n1",
            "seq": 5,
            "value": 12,
            "bound": 12,
            "positions": 18,
            "prev_node": "n2",
            "prev_seq": 3,
        }
    ]


def test_a_producer_no_coordinator_ever_recorded_hangs_too() -> None:
    found = transaction_invariants(frame([opened(), hw(lso=12)]), TOPIC, HANGING)
    assert found["prev_node"].tolist() == [None]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([state("CompleteAbort"), opened(), marker(20), hw(lso=30)], id="a marker closed it"),
        pytest.param(
            [state("Ongoing", [[TOPIC, 0]], ts=150), opened(), hw(lso=12)], id="in progress, holds it"
        ),
        pytest.param([state("PrepareAbort", [[TOPIC, 0]], ts=150), opened(), hw(lso=12)], id="being aborted"),
        pytest.param([state("CompleteAbort"), opened(), hw(lso=25)], id="the lso passed it (truncated)"),
        pytest.param([state("CompleteAbort"), opened()], id="no lso recorded"),
        pytest.param([state("CompleteAbort"), marker(5), opened(), hw(lso=12)] * 0, id="no events"),
    ],
)
def test_no_hanging_transaction_when_a_condition_fails(events: list[dict[str, Any]]) -> None:
    assert transaction_invariants(frame(events), TOPIC, HANGING).empty


def test_an_ongoing_transaction_that_does_not_hold_the_partition_ends_nothing_there() -> None:
    """The coordinator's transaction of the producer is on another partition: no marker comes to p0."""
    events = [state("Ongoing", [[TOPIC, 1]], ts=150), opened(), hw(lso=12)]
    assert len(transaction_invariants(frame(events), TOPIC, HANGING)) == 1


def test_a_marker_below_the_open_batch_does_not_close_it() -> None:
    events = [state("CompleteAbort"), marker(5), opened(), hw(lso=12)]
    assert len(transaction_invariants(frame(events), TOPIC, HANGING)) == 1


def test_another_topics_transaction_is_not_this_runs() -> None:
    other = {**opened(), "topic": "other"}
    assert transaction_invariants(frame([state("CompleteAbort"), other, hw(lso=12)]), TOPIC, HANGING).empty
