"""unmarked-transaction: a transaction its coordinator completed whose marker one of its partitions lacks.

* **unmarked-transaction** -- a transaction coordinator stored ``CompleteCommit`` (or
  ``CompleteAbort``) for a transactional id -- the state Kafka writes only after every partition
  of the transaction acknowledged its marker (``WriteTxnMarkers``) -- yet the brokers' event logs
  hold fewer ``txn-marker`` events of that outcome (producer id, epoch, partition, no error) on
  one of the run's topic's partitions than completed transactions needed there.  The partition's
  transaction then never ends: ``read_committed`` readers stop at it (its LSO holds) or, with an
  abort lost, its records may be read as if committed after the open transaction is otherwise
  closed.  ``txn-state`` ``CompleteCommit`` for ``tx-1`` after ``PrepareCommit`` of producer 1000
  epoch 0 over ``[t, 0]`` and ``[t, 1]``; ``txn-marker`` of 1000/0 committed on ``t-0`` only ->
  ``t-1`` unmarked.

How it is counted, so that no healthy run is flagged: the coordinator's ``txn-state`` events of
each transactional id are taken in the coordinator's order (``coordinator_epoch``, then time, then
sequence: a new coordinator of the id's partition has a higher epoch), and each ``Complete*`` is
paired with the ``Prepare*`` of the same outcome just before it (that event holds the partitions;
the ``Complete*`` state has none, and under KIP-890 part 2 a bumped epoch); a ``Prepare*`` counts
once however often it is completed (a new coordinator that reloads it writes its markers again).
Then per (producer id, epoch, outcome, partition) the completions must not outnumber the markers
appended -- a count, not a pairing in time: under ``transaction.version=1`` one producer id and
epoch end many transactions, markers may be written twice (a retry after a lost answer), and the
nodes' clocks need not agree.  Markers on ``__consumer_offsets`` (a consume-transform-produce
transaction's offsets) are not checked: their events are of another topic.

A finding is one (producer id, epoch, outcome, partition) short of markers: its ``node``/``seq``/
``ts`` the first ``Complete*`` that needed one, ``value`` the producer id, ``bound`` the epoch,
``positions`` how many markers are missing, ``prev_node``/``prev_seq`` the ``Prepare*``,
``peer`` the transactional id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from checker.definitions import UNMARKED_TRANSACTION

PREPARED: Final = {"PrepareCommit": True, "PrepareAbort": False}
COMPLETED: Final = {"CompleteCommit": True, "CompleteAbort": False}

Key = tuple[int, int, bool, int]
"""(producer id, producer epoch, committed, partition)."""


def _order(event: dict[str, Any]) -> tuple[int, int, int]:
    epoch = event.get("coordinator_epoch")
    return (epoch if isinstance(epoch, int) else -1, event["_ts"], event["_seq"])


def _needed(states: Sequence[dict[str, Any]], topic: str) -> tuple[Counter[Key], dict[Key, tuple[Any, Any]]]:
    """The markers completed transactions needed on ``topic``'s partitions, and per key the first
    (complete, prepare) pair that needed it."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for event in states:
        if isinstance(event.get("transactional_id"), str):
            by_id.setdefault(event["transactional_id"], []).append(event)
    needed: Counter[Key] = Counter()
    first: dict[Key, tuple[Any, Any]] = {}
    for events in by_id.values():
        prepared: dict[str, Any] | None = None
        for event in sorted(events, key=_order):
            state = event.get("state")
            if state in PREPARED:
                prepared = event
            elif (
                state in COMPLETED
                and prepared is not None
                and PREPARED[prepared["state"]] == COMPLETED[state]
            ):
                for entry in prepared.get("partitions") or []:
                    if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == topic):
                        continue
                    key = (prepared["producer_id"], prepared["producer_epoch"], COMPLETED[state], entry[1])
                    needed[key] += 1
                    first.setdefault(key, (event, prepared))
                prepared = None  # counted once, however often it is completed
    return needed, first


def unmarked_transactions(decoded: Sequence[dict[str, Any]], topic: str, run_id: int) -> list[dict[str, Any]]:
    """The unmarked-transaction rows of one run's decoded events (``_node``, ``_seq``, ``_ts`` set:
    :func:`checker.txn.white_box.decoded`)."""
    states = [e for e in decoded if e.get("kind") == "txn-state" and isinstance(e.get("producer_id"), int)]
    needed, first = _needed(states, topic)
    if not needed:
        return []
    appended: Counter[Key] = Counter()
    for event in decoded:
        if event.get("kind") == "txn-marker" and event.get("topic") == topic and event.get("error_code") == 0:
            offset = event.get("offset")
            if isinstance(offset, int) and offset >= 0:
                key = (
                    event["producer_id"],
                    event["producer_epoch"],
                    bool(event["committed"]),
                    event["partition"],
                )
                appended[key] += 1
    rows = []
    for key in sorted(needed):
        missing = needed[key] - appended[key]
        if missing <= 0:
            continue
        complete, prepare = first[key]
        rows.append(
            {
                "run_id": run_id,
                "kind": UNMARKED_TRANSACTION,
                "partition": key[3],
                "ts": complete["_ts"],
                "node": complete["_node"],
                "seq": complete["_seq"],
                "value": key[0],
                "bound": key[1],
                "positions": missing,
                "prev_node": prepare["_node"],
                "prev_seq": prepare["_seq"],
                "peer": complete["transactional_id"],
            }
        )
    return rows
