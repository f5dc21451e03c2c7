"""The transactional family's entries of the anomaly registry, as plain data.

:mod:`checker.anomalies` turns each :class:`Entry` into its ``Anomaly`` of family ``transaction``
and checks it on import like every other entry (its evidence, severity and conditions must be
the registry's own words, :data:`checker.anomalies.EVIDENCE`, ``CONDITIONS``).  They live here,
spelled as the registry's strings, because the registry module imports this one: the transactional
checks are a package of their own and so are their entries.  Why each is an error, a warning or
permitted where (the registry's tools):

* **int-send-skip**, **G0**, **G0-process** and **G0-realtime** are *warnings*: Kafka's model
  allows them in every configuration -- other producers' records and transaction markers land
  between one transaction's sends to a partition, and Kafka isolates no transaction's writes: two
  transactions may write x and y in opposite orders, and a long transaction may write one
  partition before a process's earlier transaction and another after its later one (T1 -process->
  T2 -ww-> T3 -ww-> T1).  Jepsen's Kafka test allows all three G0s (``allowed-error-types``).  A
  warning is reported and never makes a run invalid; a condition (``permitted_by``) is for what a
  *configuration* makes possible, and no configuration is needed here.
* **int-nonmonotonic-send**, **G1c** and its ``-process`` / ``-realtime`` variants and
  **torn-transaction** are errors that data loss explains (``acknowledged data may vanish``, which
  every loss rule permits): offsets handed out again put a later write below an earlier one, and a
  committed transaction that loses some records is torn.  ``G1c-process`` implies
  ``G1c-realtime``: a process's transactions follow each other in real time.
* **consumed-twice** and **consumed-skipped** (exactly-once processing, :mod:`checker.txn.offsets`)
  are errors that data loss explains: offsets handed out again put a new record where a processed
  one was, below the group's committed offset.
* **precommitted-read** is an error nothing permits: losing data does not make uncommitted
  records visible to a ``read_committed`` consumer.
* **lso-past-open-transaction** (:data:`WHITE_BOX`, family ``invariant``: the brokers' event logs)
  is an error nothing permits: each leader tenure is judged on its own log, which lost data, a
  restart or a leader change leave consistent.  It implies G1a and precommitted-read: a
  ``read_committed`` fetch up to such an LSO returns the open transaction's records with no aborted
  range, before its outcome is decided.
"""

from __future__ import annotations

from typing import Final, NamedTuple

_READS = ("history",)
_DRAINED = ("history", "final drain")
_LOSS = ("acknowledged data may vanish",)
_OFFSETS = "checker.txn.offsets"
LSO_PAST_OPEN_TRANSACTION: Final = "lso-past-open-transaction"


class Entry(NamedTuple):
    """One registry entry's fields (see :class:`checker.anomalies.Anomaly`), family aside."""

    name: str
    doc: str
    evidence: tuple[str, ...] = _READS
    implies: tuple[str, ...] = ()
    severity: str = "error"
    permitted_by: tuple[str, ...] = ()
    definition: str = "checker.definitions"
    """The module whose docstring holds the long definition (a ``* **name** --`` bullet)."""


ERRORS: Final[tuple[Entry, ...]] = (
    Entry(
        "precommitted-read",
        "a `read_committed` read of a value whose transaction had not begun to commit (or its own write)",
    ),
    Entry(
        "int-nonmonotonic-send",
        "inside one committed transaction, a send at or below its previous send to the partition",
        permitted_by=_LOSS,
    ),
    Entry(
        "G1c",
        "a cycle of wr and ww edges with a wr, on the event graph: a ww edge orders two appends, not two"
        " transactions (concurrent transactions interleave in Kafka's log by design)",
        permitted_by=_LOSS,
    ),
    Entry(
        "G1c-process",
        "a cycle of wr, ww and process edges holding a wr and a process edge (event graph: see G1c)",
        implies=("G1c-realtime",),
        permitted_by=_LOSS,
    ),
    Entry(
        "G1c-realtime",
        "a cycle of wr, ww and realtime edges holding a wr and a realtime edge (event graph: see G1c)",
        permitted_by=_LOSS,
    ),
    Entry(
        "consumed-twice",
        "a record read by two committed transactions of one consumer group that each sent the group's"
        " offsets (consume-transform-produce processed it twice)",
        permitted_by=_LOSS,
        definition=_OFFSETS,
    ),
    Entry(
        "consumed-skipped",
        "a committed record below a consumer group's committed offset that no transaction of the group"
        " that may have committed read (consume-transform-produce never processed it)",
        permitted_by=_LOSS,
        definition=_OFFSETS,
    ),
    Entry(
        "torn-transaction",
        "a committed transaction some of whose sends the complete final drain holds and some not",
        _DRAINED,
        permitted_by=_LOSS,
    ),
)
"""The errors, in the order reports list them."""
WARNINGS: Final[tuple[Entry, ...]] = (
    Entry(
        "int-send-skip",
        "inside one committed transaction, a send more than one offset past its previous send to the partition",
        severity="warning",
    ),
    Entry("G0", "a cycle of transactions by write-write (log order) edges alone", severity="warning"),
    Entry(
        "G0-process",
        "a cycle of ww and process edges: a process's later transaction wrote before its earlier one",
        severity="warning",
    ),
    Entry(
        "G0-realtime",
        "a cycle of ww and realtime edges: a transaction wrote before one that committed before it began",
        severity="warning",
    ),
)
"""The warnings, listed after every error."""
WHITE_BOX: Final[tuple[Entry, ...]] = (
    Entry(
        LSO_PAST_OPEN_TRANSACTION,
        "a partition leader served an LSO past the first offset of a transaction it held open",
        ("event logs",),
        implies=("G1a", "precommitted-read"),
        definition="checker.txn.lso",
    ),
)
"""The transactional white-box checks whose entries live here (family ``invariant``, after
unmarked-transaction)."""
