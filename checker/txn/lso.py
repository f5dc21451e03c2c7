"""lso-past-open-transaction: a partition leader served a last stable offset past an open transaction.

* **lso-past-open-transaction** -- on one broker, in one leader tenure of a partition of the run's
  topic (from its ``become-leader`` to its next ``become-follower``, ``replica-opened`` or
  ``truncate``, in the broker's ``seq`` order), the leader recorded an LSO (``lso`` of its
  ``become-leader``, of a leader ``hw`` event or of a ``txn-close``) above the first offset F of a
  transaction that was open at that point of its event order: opened in the tenure (``txn-open``)
  or inherited from the log at the election (``become-leader``'s ``open_transactions``), and not yet
  closed by a marker the leader appended (``txn-close`` of the producer id).  The rule is Kafka's:
  the LSO stops at the oldest open transaction's first offset, so ``read_committed`` consumers,
  which read up to the LSO and drop only the aborted ranges the fetch names, never see a record
  whose transaction is undecided.  ``n1 become-leader e2``; ``n1 txn-open pid=7 F=12``; ``n1 hw
  lso=15`` -> the LSO passed F by 3.  Counted per transaction passed (node, leader epoch, producer
  id, F); the example is the first event that passed it, with the event that opened it and the
  transaction's outcome where a marker later closed it (``abort``, ``commit``; null: never closed).

**What is not a violation** (each has a test in ``tests/checker/txn/test_lso.py``):

* another broker's transactions: a tenure holds only its own log's -- a new leader's open
  transactions are those of its ``become-leader``, which its index rebuilt from the batches it
  replicated (a batch the previous leader opened that never reached it opens nothing there, and an
  LSO past it is right);
* the LSO passing F once the marker was appended (``txn-close``), even before the HW passed the
  marker -- the LSO moves at the append -- and whatever the coordinator's ``txn-marker`` event says
  afterwards (it is written after the wait for the HW, with ``offset`` -1 when the wait timed out);
* transactions aborted by their timeout or by a fenced producer: their abort markers close them;
* restarts (``replica-opened``), truncations and leader changes end the tenure: the next
  ``become-leader`` states what is open then (power loss may have cut the open batch away);
* an LSO *at* F, a follower's ``hw`` (followers serve no LSO), and an ``hw`` of another epoch;
* ``__consumer_offsets`` (a consume-transform-produce transaction's offsets), not the run's topic.

A ``become-leader`` of an older event log without ``open_transactions`` leaves the inherited
transactions unknown: only those opened in the tenure are held against the LSO then.

**Not checked here -- aborted records exposed below the LSO (issue 32 (c)).**  A finding whose
transaction later aborts *is* that anomaly: until the marker, a fetch up to such an LSO returns the
records with no aborted range, so a ``read_committed`` consumer takes them as committed (the
example's outcome says ``abort``).  The other way to expose them -- an LSO that is right, but a
fetch answer that omits an aborted range below it -- leaves no trace in the event logs (fetch
answers are not recorded) or in the replica dumps (which hold the final log, not what was served);
it needs new broker evidence, and its client-side form is G1a.  Likewise the inherited open
transactions are the leader's own index's word: a follower that never recorded a transaction it
replicated would report none, and only a cross-broker comparison of the logs could show it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

from checker.txn.registry import LSO_PAST_OPEN_TRANSACTION

ENDS_TENURE: Final = frozenset({"become-follower", "replica-opened", "truncate"})
"""Events after which a broker's view of a partition's open transactions is rebuilt from its log."""
EVENT_KINDS: Final[tuple[str, ...]] = ("become-leader", *sorted(ENDS_TENURE), "txn-open", "txn-close", "hw")
"""The events this check reads."""


@dataclasses.dataclass
class _Tenure:
    """One broker's leadership of one partition in one leader epoch, as its events tell it."""

    epoch: Any
    open: dict[int, tuple[int, dict[str, Any]]]
    """Producer id -> (first offset, the event that opened it or handed it down)."""
    passed: set[tuple[int, int]] = dataclasses.field(default_factory=set)


def _inherited(election: dict[str, Any]) -> dict[int, tuple[int, dict[str, Any]]]:
    found: dict[int, tuple[int, dict[str, Any]]] = {}
    for entry in election.get("open_transactions") or []:
        if isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, int) for v in entry):
            found[entry[0]] = (entry[1], election)
    return found


def _outcomes(events: Sequence[dict[str, Any]]) -> dict[tuple[int, int, int], str]:
    """(partition, producer id, first offset) -> ``commit``/``abort``, from the first ``txn-close``
    that closed it on any broker (a later leader may close what an earlier one opened)."""
    outcomes: dict[tuple[int, int, int], str] = {}
    for event in sorted(events, key=lambda e: (e["_ts"], e["_node"], e["_seq"])):
        if event.get("kind") == "txn-close" and isinstance(event.get("first_offset"), int):
            key = (event["partition"], event["producer_id"], event["first_offset"])
            outcomes.setdefault(key, "commit" if event.get("committed") else "abort")
    return outcomes


def lso_past_open_transactions(
    decoded: Sequence[dict[str, Any]], topic: str, run_id: int
) -> list[dict[str, Any]]:
    """The lso-past-open-transaction rows of one run's decoded events (``_node``, ``_seq``, ``_ts``
    set: :func:`checker.txn.white_box.decoded`) on ``topic`` (module docstring)."""
    events = [
        e
        for e in decoded
        if e.get("kind") in EVENT_KINDS and e.get("topic") == topic and isinstance(e.get("partition"), int)
    ]
    events.sort(key=lambda e: (e["_node"], e["_seq"]))
    tenures: dict[tuple[str, int], _Tenure] = {}
    found: list[tuple[dict[str, Any], dict[str, Any], int, int, int]] = []

    def hold(tenure: _Tenure, event: dict[str, Any]) -> None:
        lso = event.get("lso")
        if not isinstance(lso, int) or isinstance(lso, bool):
            return
        for producer, (first, source) in sorted(tenure.open.items(), key=lambda item: item[1][0]):
            if lso > first and (producer, first) not in tenure.passed:
                tenure.passed.add((producer, first))
                found.append((event, source, producer, first, lso))

    for event in events:
        kind, key = event["kind"], (event["_node"], event["partition"])
        tenure = tenures.get(key)
        if kind == "become-leader":
            tenures[key] = _Tenure(event.get("epoch"), _inherited(event))
            hold(tenures[key], event)
        elif kind in ENDS_TENURE:
            tenures.pop(key, None)
        elif tenure is None or not isinstance(event.get("producer_id", 0), int):
            continue
        elif kind == "txn-open" and isinstance(event.get("first_offset"), int):
            tenure.open.setdefault(event["producer_id"], (event["first_offset"], event))
        elif kind == "txn-close":
            tenure.open.pop(event["producer_id"], None)
            hold(tenure, event)
        elif kind == "hw" and event.get("role") == "leader" and event.get("epoch") == tenure.epoch:
            hold(tenure, event)
    outcomes = _outcomes(events)
    return [
        {
            "run_id": run_id,
            "kind": LSO_PAST_OPEN_TRANSACTION,
            "partition": event["partition"],
            "ts": event["_ts"],
            "node": event["_node"],
            "seq": event["_seq"],
            "value": lso,
            "bound": first,
            "positions": lso - first,
            "prev_node": source["_node"],
            "prev_seq": source["_seq"],
            "peer": outcomes.get((event["partition"], producer, first)),
        }
        for event, source, producer, first, lso in found
    ]
