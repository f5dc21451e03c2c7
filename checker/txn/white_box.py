"""The transactions' white-box checks on the brokers' event logs: hanging-transaction (KAFKA-14402),
unmarked-transaction (:mod:`checker.txn.markers`) and lso-past-open-transaction (:mod:`checker.txn.lso`).

One implementation over one run's events (pandas), run by both engines -- the pandas engine per
run, the Spark engine per ``run_id`` group with ``applyInPandas``, as :mod:`checker.txn.run` is.
It reads the few transaction events, the leaders' ``hw`` events and the role changes of the run's
topic (``docs/events.md``): the fields it needs (``producer_id``, ``first_offset``, ``lso``, a
marker's ``offset``, a coordinator state's ``partitions``, a new leader's ``open_transactions``) are
not projected into ``events.parquet``'s columns, so it decodes each such event's ``line``.

**hanging-transaction.**  A partition leader recorded that a batch of producer id *X* opened a
transaction at offset *F* of partition *P* (``txn-open``); by the end of the run

1. no marker of *X* was appended to *P* above *F* (``txn-marker`` with ``offset`` > *F*: markers
   close a producer id's open transaction, whatever its epoch);
2. the coordinator's last recorded state of *X* (``txn-state``, the latest by time) is not a
   transaction in progress holding *P* (``Ongoing``, ``PrepareCommit`` or ``PrepareAbort`` with
   *P* among its partitions) -- so no marker will ever come: nothing ends it;
3. and *P*'s last stable offset is held there: the last ``hw`` event of *P*'s leader (the latest
   by time) has ``lso`` <= *F* (a batch a truncation removed holds nothing, and is not reported).

Then read_committed consumers of *P* never pass *F* again: the stuck consumers of Bufstream 0.1
and of KAFKA-14402, which a produce that arrives after its transaction ended causes when the
partition leader does not verify it (``transaction.partition.verification.enable=false``).

Each finding is a row of the white-box family's example columns: ``node``/``seq``/``ts`` the
``txn-open`` event, ``value`` *F*, ``bound`` the last LSO, ``positions`` the offsets it holds back
(last HW - *F*), ``prev_node``/``prev_seq`` the coordinator's last state event of *X* (null when
no coordinator ever recorded *X*).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pandas as pd

from checker.definitions import (
    HANGING_TRANSACTION,
    INVARIANT_EXAMPLE_COLUMNS,
    LSO_PAST_OPEN_TRANSACTION,
    UNMARKED_TRANSACTION,
)
from checker.engine import to_pandas
from checker.evidence import RunInput
from checker.run_reads import read_runs
from checker.txn import lso
from checker.txn.markers import unmarked_transactions

EVENT_KINDS: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(("txn-open", "txn-marker", "txn-state", "hw", *lso.EVENT_KINDS))
)
"""The events these checks read (``hw`` only of leaders, for the LSO; the role changes for the
leader tenures of lso-past-open-transaction)."""
INPUT_COLUMNS: Final[tuple[str, ...]] = (
    "run_id",
    "node_name",
    "seq",
    "ts",
    "kind",
    "topic",
    "partition",
    "role",
    "line",
)
INPUT_DDL: Final = (
    "run_id long, node_name string, seq long, ts long, kind string, topic string, partition int, role string,"
    " line string"
)
OUTPUT_COLUMNS: Final[tuple[str, ...]] = ("run_id", "kind", *INVARIANT_EXAMPLE_COLUMNS)
OUTPUT_DDL: Final = (
    "run_id long, kind string, partition int, ts long, node string, seq long, value long, bound long,"
    " positions long, prev_node string, prev_seq long, peer string"
)
IN_PROGRESS: Final = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
CHECKS: Final = frozenset({HANGING_TRANSACTION, UNMARKED_TRANSACTION, LSO_PAST_OPEN_TRANSACTION})
"""The white-box checks of transactions, all answered here."""


def decoded(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row's event (its ``line``) with the row's node name; lines that do not decode are
    skipped (the event table's reader already accepted them: a damaged one is its business)."""
    events = []
    for node, seq, ts, line in zip(rows["node_name"], rows["seq"], rows["ts"], rows["line"], strict=True):
        try:
            event = json.loads(line)
        except (TypeError, ValueError):
            continue
        if isinstance(event, dict):
            events.append({**event, "_node": str(node), "_seq": int(seq), "_ts": int(ts)})
    return events


def _last(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(events, key=lambda e: (e["_ts"], e["_node"], e["_seq"]), default=None)


def transaction_invariants(events: pd.DataFrame, topic: str, checks: frozenset[str] = CHECKS) -> pd.DataFrame:
    """The rows (:data:`OUTPUT_COLUMNS`) of the checks among ``checks`` of :data:`CHECKS` in one
    run's ``events`` (at least :data:`INPUT_COLUMNS`, any order) on ``topic``."""
    rows = events[events["kind"].isin(EVENT_KINDS)]
    if rows.empty:
        return pd.DataFrame(columns=list(OUTPUT_COLUMNS))
    events_read = decoded(rows[(rows["kind"] == "txn-state") | (rows["topic"] == topic)])
    run_id = int(rows["run_id"].iloc[0])
    found = []
    if HANGING_TRANSACTION in checks:
        found += _hanging(events_read, topic, run_id)
    if UNMARKED_TRANSACTION in checks:
        found += unmarked_transactions(events_read, topic, run_id)
    if LSO_PAST_OPEN_TRANSACTION in checks:
        found += lso.lso_past_open_transactions(events_read, topic, run_id)
    return pd.DataFrame(found, columns=list(OUTPUT_COLUMNS))


def _hanging(decoded: list[dict[str, Any]], topic: str, run_id: int) -> list[dict[str, Any]]:
    """The hanging-transaction rows (module docstring)."""
    opens = [e for e in decoded if e.get("kind") == "txn-open"]
    if not opens:
        return []
    marks: dict[tuple[int, int], list[int]] = {}
    for e in decoded:
        if e.get("kind") == "txn-marker" and isinstance(e.get("offset"), int) and e["offset"] >= 0:
            marks.setdefault((e["partition"], e["producer_id"]), []).append(e["offset"])
    states: dict[int, list[dict[str, Any]]] = {}
    leader_hws: dict[int, list[dict[str, Any]]] = {}
    for e in decoded:
        if e.get("kind") == "txn-state" and isinstance(e.get("producer_id"), int):
            states.setdefault(e["producer_id"], []).append(e)
        elif e.get("kind") == "hw" and e.get("role") == "leader" and isinstance(e.get("lso"), int):
            leader_hws.setdefault(e["partition"], []).append(e)
    found = []
    for opened in opens:
        partition, producer, first = opened["partition"], opened["producer_id"], opened["first_offset"]
        if any(offset > first for offset in marks.get((partition, producer), [])):
            continue
        state = _last(states.get(producer, []))
        if (
            state is not None
            and state.get("state") in IN_PROGRESS
            and [topic, partition] in state.get("partitions", [])
        ):
            continue
        final = _last(leader_hws.get(partition, []))
        if final is None or final["lso"] > first:
            continue
        found.append(
            {
                "run_id": run_id,
                "kind": HANGING_TRANSACTION,
                "partition": partition,
                "ts": opened["_ts"],
                "node": opened["_node"],
                "seq": opened["_seq"],
                "value": first,
                "bound": final["lso"],
                "positions": max(0, final["new_hw"] - first),
                "prev_node": None if state is None else state["_node"],
                "prev_seq": None if state is None else state["_seq"],
                "peer": None,
            }
        )
    return found


def transactional_runs(runs: Sequence[RunInput]) -> list[RunInput]:
    """The runs with event logs whose workload ran transactions (``test.json``'s
    ``workload.txn``): only they can hold a transaction, and the others' event ``line``s -- the
    largest column of ``events.parquet`` -- are then never read (a pass of plain runs costs the
    check nothing, in either engine)."""
    return [
        run
        for run in runs
        if run.events_path is not None
        and run.events_run_id is not None
        and (run.spec.get("workload") or {}).get("txn") is True
    ]


def pass_anomalies(runs: Sequence[RunInput], checks: frozenset[str] = CHECKS) -> pd.DataFrame:
    """The pandas engine's answer for a pass: every transactional run, one run at a time."""
    located = transactional_runs(runs)
    if not located:
        return pd.DataFrame(columns=list(OUTPUT_COLUMNS))
    sources = [(run.events_path, run.events_slice) for run in located if run.events_path is not None]
    events = to_pandas(read_runs(sources, INPUT_COLUMNS, ()))
    events = events[events["kind"].isin(EVENT_KINDS)]
    found = [
        transaction_invariants(of_run, run.topic, checks)
        for run in located
        if not (of_run := events[events["run_id"] == run.events_run_id]).empty
    ]
    found = [frame for frame in found if not frame.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=list(OUTPUT_COLUMNS))


def spark_function(
    topics: Mapping[int, str], checks: frozenset[str] = CHECKS
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """What the Spark engine's ``groupBy("run_id").applyInPandas`` runs per run (``topics``: run id ->
    the run's topic): :func:`transaction_invariants`, as the pandas engine runs it."""

    def per_run(events: pd.DataFrame) -> pd.DataFrame:
        answer = transaction_invariants(events, topics[int(events["run_id"].iloc[0])], checks)
        return answer.astype({"partition": "int32", "seq": "int64", "prev_seq": "Int64"})

    return per_run
