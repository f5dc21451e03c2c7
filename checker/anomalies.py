"""One registry of the anomalies the checker knows, as data: name, family, severity, what it
implies, the evidence it needs, what excuses it, its example columns and its one-line doc.

Everything else reads this table instead of keeping a list of its own: the names and family
tuples of :mod:`checker.definitions` (``ALL_CHECKS``, ``VALUE_CHECKS``, ``WARNINGS``, the example
columns ...) are derived from it; both engines declare the entries they implement (their
``implements``, checked against :data:`ANOMALIES` by ``tests/checker/test_anomalies.py`` and
refused by the driver when a check is asked of an engine that lacks it); the expectations
(:mod:`checker.expectations`) permit an anomaly by the conditions its entry names; the names
table of ``docs/anomalies.md`` is generated from it (:func:`checker.anomaly_docs.names_table`, kept in step by
``tests/checker/test_docs.py``); and the reports, JUnit and ``tidemark check`` list the
anomalies a run reported causes first (:mod:`checker.anomaly_order`, which reads ``implies``).
The long definitions, with their tiny examples, stay prose: :attr:`Anomaly.definition` names
where (the docstring of :mod:`checker.definitions`).

**Adding an anomaly** touches: its entry here, its definition (prose), its implementation in
both engines (each engine module declares what it flags in its ``IMPLEMENTS``), its doc line in
``docs/anomalies.md`` (the table is generated) and its tests.

**implies** is Elle's anomaly graph in small: ``A implies B`` means that where A happens, B is
what it brings about -- by definition (every nonmonotonic-poll is a stale-read, every
nonmonotonic-send a realtime-order) or by the mechanism the definitions give (acknowledged data
that vanishes leaves its offsets to be handed out again: inconsistent-offsets and the send order
checks; data that consumers had read and that vanished resets them: the poll order checks; a
leader elected without committed records lets the HW go back).  It is a graph of explanations,
not of proofs: a report folds B under A when both were reported, and leads with the anomalies no
other reported one implies -- the causes.  It has no cycles (checked on import).

**One definition for both engines?**  Most families are written twice (pandas, Spark) and tested for
identical ``results.json``; the transactional one once (:mod:`checker.txn`, its entries' data in
:mod:`checker.txn.registry`), run per run by both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from checker.txn import registry as txn_registry

ERROR: Final = "error"
WARNING: Final = "warning"

# ----------------------------------------------------------------------------- evidence

HISTORY: Final = "history"
"""The clients' history (``history.parquet``)."""
FINAL_DRAIN: Final = "final drain"
"""The final drain of every partition (whether it is complete decides lost against unseen)."""
REPLICA_DUMPS: Final = "replica dumps"
"""Every replica's log, dumped offline (``replicas.parquet``, ``replica_partitions.parquet``)."""
EVENT_LOGS: Final = "event logs"
"""The brokers' and the controller's own event logs (``events.parquet``)."""
GROUP_OPS: Final = "group ops"
"""The consumer group's ``assign``/``revoke``/``commit`` ops (``--consume-via subscribe``)."""
FAULT_OPS: Final = "fault ops"
"""The nemesis's fault and heal ops, which open and close fault windows."""
EVIDENCE: Final = (HISTORY, FINAL_DRAIN, REPLICA_DUMPS, EVENT_LOGS, GROUP_OPS, FAULT_OPS)

# ----------------------------------------------------------------------------- conditions

ACKED_LOSS: Final = "acknowledged data may vanish"
"""The leader acknowledges before replication (``acks=0/1``), so a leader change loses the tail."""
COMMITTED_LOSS: Final = "committed data may vanish"
"""Records below the high watermark may vanish (unclean election, power loss, the bug switches)."""
BROKER_LOSS: Final = "brokers may cut committed records"
"""Committed data may vanish *and* the bundled broker's event logs show how."""
DIVERGENCE: Final = "replicas may diverge"
"""A switch lets replicas keep records of another lineage below the HW."""
MIN_ISR_OFF: Final = "strict min ISR is off"
"""``min.insync.replicas.strict=false``: the HW may advance over a too small ISR."""
RETRIED_SENDS: Final = "a retried send may be written twice"
"""Producers without idempotence."""
UNVERIFIED_PRODUCE: Final = "a late transactional produce may open a transaction"
"""``transaction.partition.verification.enable=false`` (before KIP-890 part 1): a leader appends a
transactional batch that arrives after its transaction ended."""
UNCOMMITTED_READS: Final = "uncommitted records are read"
"""Transactional runs whose consumers read ``read_uncommitted``: Kafka hands them every record,
an aborted transaction's included."""
# fmt: off
CONDITIONS: Final[tuple[str, ...]] = (
    ACKED_LOSS, COMMITTED_LOSS, BROKER_LOSS, DIVERGENCE, MIN_ISR_OFF, RETRIED_SENDS,
    UNVERIFIED_PRODUCE, UNCOMMITTED_READS,
)
# fmt: on
"""What a configuration may make possible; :mod:`checker.expectations` maps its rules onto these."""


@dataclasses.dataclass(frozen=True, slots=True)
class Family:
    """Anomalies one engine question answers together (``question`` names the ``Engine`` method)."""

    name: str
    label: str
    """How ``docs/anomalies.md`` names the family."""
    question: str
    example_columns: tuple[str, ...]
    """The columns every engine returns for each example row, besides ``run_id, kind, total``."""
    example_order: tuple[str, ...]
    """The order the first ``limit`` example rows are taken in (ascending, nulls first)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Anomaly:
    """One entry of the registry (see the module docstring for what reads which field)."""

    name: str
    family: Family
    doc: str
    """One line, as ``docs/anomalies.md`` shows it."""
    evidence: tuple[str, ...]
    implies: tuple[str, ...] = ()
    severity: str = ERROR
    error_when_strict: bool = False
    """A warning that ``--liveness strict`` makes an error (stalled)."""
    permitted_by: frozenset[str] = frozenset()
    """The :data:`CONDITIONS` under which a configuration permits it (none: never expected)."""
    definition: str = "checker.definitions"
    """The module whose docstring holds the long definition with its tiny example."""


# fmt: off
VALUE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "partition", "value", "value_text", "ack_offset", "send_index", "read_index", "poll_offset",
    "read_min_offset", "read_max_offset",
)
ORDER_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "process", "partition", "index", "item", "prev_index", "prev_offset", "offset", "invoke_index",
)
GROUP_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "process", "partition", "index", "item", "offset", "prev_index", "prev_offset",
)
INVARIANT_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "partition", "ts", "node", "seq", "value", "bound", "positions", "prev_node", "prev_seq", "peer",
)
# fmt: on

VALUE: Final = Family(
    "value", "value", "value_anomalies", VALUE_EXAMPLE_COLUMNS, ("partition", "value", "value_text")
)
OFFSET: Final = Family(
    "offset", "offset", "offset_anomalies", ("partition", "offset", "observations"), ("partition", "offset")
)
POLL_ORDER: Final = Family(
    "poll order", "order", "order_anomalies", ORDER_EXAMPLE_COLUMNS, ("process", "partition", "index", "item")
)
SEND_ORDER: Final = dataclasses.replace(POLL_ORDER, name="send order")
REPLICA: Final = Family(
    "replica",
    "replica",
    "divergence",
    ("partition", "node_a", "node_b", "offset", "positions"),
    ("partition", "node_a", "node_b"),
)
GROUP: Final = Family(
    "group", "group", "group_anomalies", GROUP_EXAMPLE_COLUMNS, ("partition", "offset", "index", "item")
)
INVARIANT: Final = Family(
    "invariant",
    "white-box",
    "invariant_anomalies",
    INVARIANT_EXAMPLE_COLUMNS,
    ("partition", "ts", "node", "seq"),
)
LIVENESS: Final = Family(
    "liveness", "liveness", "liveness", ("partition", "from_s", "to_s", "gap_s"), ("partition",)
)
TXN: Final = Family(
    "transaction", "transaction", "txn_anomalies", ("index", "partition", "example"), ("index", "partition")
)
FAMILIES: Final[tuple[Family, ...]] = (
    VALUE,
    OFFSET,
    POLL_ORDER,
    SEND_ORDER,
    REPLICA,
    GROUP,
    INVARIANT,
    LIVENESS,
    TXN,
)

_READS = (HISTORY,)
_DRAINED = (HISTORY, FINAL_DRAIN)
_GROUP = (HISTORY, GROUP_OPS)
_ACKED = frozenset({ACKED_LOSS})
_COMMITTED = frozenset({COMMITTED_LOSS})
_BROKER = frozenset({BROKER_LOSS})
_ACKED_LOSS_BRINGS = ("inconsistent-offsets", "duplicate", "lost-read", "nonmonotonic-send", "realtime-order")
_POLL_ORDER = ("poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll", "stale-read")

LOST_WRITE: Final = Anomaly(
    "lost-write",
    VALUE,
    "an `ok` send whose value is absent from the complete final drain",
    _DRAINED,
    implies=(*_ACKED_LOSS_BRINGS, "torn-transaction"),
    permitted_by=_ACKED,
)
REPLICA_DIVERGENCE: Final = Anomaly(
    "replica-divergence",
    REPLICA,
    "two replicas hold different records at one (partition, offset) below both their high watermarks",
    (REPLICA_DUMPS,),
    permitted_by=frozenset({DIVERGENCE}),
)
INCONSISTENT_OFFSETS: Final = Anomaly(
    "inconsistent-offsets",
    OFFSET,
    "one (partition, offset) observed with different values",
    _READS,
    permitted_by=_ACKED,
)
DUPLICATE: Final = Anomaly(
    "duplicate",
    VALUE,
    "one value read at more than one offset",
    _READS,
    permitted_by=frozenset({ACKED_LOSS, RETRIED_SENDS}),
)
ABORTED_READ: Final = Anomaly("aborted-read", VALUE, "a read of a value whose send definitely failed", _READS)
G1A: Final = Anomaly(
    "G1a",
    VALUE,
    "a read of a value whose transaction aborted (or whose producer was fenced)",
    _READS,
    permitted_by=frozenset({UNCOMMITTED_READS}),
)
LOST_READ: Final = Anomaly(
    "lost-read",
    VALUE,
    "a value a consumer read that the complete final drain lacks",
    _DRAINED,
    implies=_POLL_ORDER,
    permitted_by=_COMMITTED,
)
UNEXPECTED: Final = Anomaly("unexpected", VALUE, "a read value that no one sent", _READS)
POLL_SKIP: Final = Anomaly(
    "poll-skip",
    POLL_ORDER,
    "a consumer's next poll of a partition starts more than one offset past the previous one",
    _READS,
    permitted_by=_COMMITTED,
)
NONMONOTONIC_POLL: Final = Anomaly(
    "nonmonotonic-poll",
    POLL_ORDER,
    "a consumer's next poll of a partition does not move forward",
    _READS,
    implies=("stale-read",),
    permitted_by=_COMMITTED,
)
INT_POLL_SKIP: Final = Anomaly(
    "int-poll-skip",
    POLL_ORDER,
    "inside one poll, a gap between consecutive records of a partition: `poll p0 [@3, @5]`",
    _READS,
    permitted_by=_COMMITTED,
)
INT_NONMONOTONIC_POLL: Final = Anomaly(
    "int-nonmonotonic-poll",
    POLL_ORDER,
    "inside one poll, a record not above the one before: `poll p0 [@5, @3]`",
    _READS,
    permitted_by=_COMMITTED,
)
STALE_READ: Final = Anomaly(
    "stale-read",
    POLL_ORDER,
    "a read (poll or drain chunk) below what earlier reads of the same consumer had shown committed",
    _READS,
    permitted_by=_COMMITTED,
)
NONMONOTONIC_SEND: Final = Anomaly(
    "nonmonotonic-send",
    SEND_ORDER,
    "one producer process's acknowledged offsets in a partition do not increase",
    _READS,
    implies=("realtime-order",),
    permitted_by=_ACKED,
)
REALTIME_ORDER: Final = Anomaly(
    "realtime-order",
    SEND_ORDER,
    "a send invoked after another's acknowledgement, same partition, got an offset at or below it",
    _READS,
    permitted_by=_ACKED,
)
GROUP_SKIP: Final = Anomaly(
    "group-skip",
    GROUP,
    "an acknowledged record below the group's known committed position that no member ever read",
    _GROUP,
    permitted_by=_COMMITTED,
)
GROUP_REDELIVERY: Final = Anomaly(
    "group-redelivery",
    GROUP,
    "a member read a record below a position committed (or resumed from) in an older generation",
    _GROUP,
    permitted_by=_COMMITTED,
)
COMMIT_REGRESSION: Final = Anomaly(
    "commit-regression",
    GROUP,
    "an `ok` commit invoked after a higher `ok` commit of the partition completed",
    _GROUP,
    implies=("group-redelivery",),
    permitted_by=_COMMITTED,
)
COMMITTED_BEYOND_READ: Final = Anomaly(
    "committed-beyond-read",
    GROUP,
    "an `ok` commit more than one past what its reader had read",
    _GROUP,
    implies=("group-skip",),
)
GENERATION_REGRESSION: Final = Anomaly(
    "generation-regression",
    GROUP,
    "a consumer was assigned an older generation than one it had already been assigned",
    _GROUP,
    implies=("group-redelivery",),
    permitted_by=_COMMITTED,
)
TRUNCATED_COMMITTED: Final = Anomaly(
    "truncated-committed",
    INVARIANT,
    "a broker truncated records below a HW that a leader of their lineage had exposed",
    (EVENT_LOGS,),
    implies=("incomplete-leader",),
    permitted_by=_BROKER,
)
INCOMPLETE_LEADER: Final = Anomaly(
    "incomplete-leader",
    INVARIANT,
    "a newly elected leader's log ends below the HW exposed before its election",
    (EVENT_LOGS,),
    implies=("hw-regression",),
    permitted_by=_BROKER,
)
HW_REGRESSION: Final = Anomaly(
    "hw-regression",
    INVARIANT,
    "the current leader's established HW is below the HW the partition had exposed",
    (EVENT_LOGS,),
    permitted_by=_BROKER,
)
MIN_ISR_VIOLATION: Final = Anomaly(
    "min-isr-violation",
    INVARIANT,
    "a leader's HW advanced while its ISR was smaller than `min.insync.replicas`",
    (EVENT_LOGS,),
    permitted_by=frozenset({MIN_ISR_OFF}),
)
EPOCH_REUSE: Final = Anomaly(
    "epoch-reuse",
    INVARIANT,
    "the controller published a partition's leader epoch twice, or one below an epoch it had published",
    (EVENT_LOGS,),
    definition="checker.controller_log",
)
METADATA_ROLLBACK: Final = Anomaly(
    "metadata-rollback",
    INVARIANT,
    "the controller started from a metadata version below one it had published before its restart",
    (EVENT_LOGS,),
    definition="checker.controller_log",
)
HANGING_TRANSACTION: Final = Anomaly(
    "hanging-transaction",
    INVARIANT,
    "a partition's LSO held for good by a transaction its coordinator no longer has in progress",
    (EVENT_LOGS,),
    permitted_by=frozenset({UNVERIFIED_PRODUCE}),
)
UNMARKED_TRANSACTION: Final = Anomaly(
    "unmarked-transaction",
    INVARIANT,
    "a transaction its coordinator completed while one of its partitions lacks its marker",
    (EVENT_LOGS,),
    definition="checker.txn.markers",
)
ISR_DIVERGENCE: Final = Anomaly(
    "isr-divergence",
    INVARIANT,
    "a member of the final ISR holds other records than the leader below the leader's HW",
    (EVENT_LOGS, REPLICA_DUMPS),
    permitted_by=frozenset({DIVERGENCE}),
)
STALLED: Final = Anomaly(
    "stalled",
    LIVENESS,
    "a partition made no progress (no acknowledged send) for longer than the stall threshold"
    " while no fault was active",
    (HISTORY, FAULT_OPS),
    severity=WARNING,
    error_when_strict=True,
)
UNSEEN: Final = Anomaly(
    "unseen",
    VALUE,
    "acknowledged, never read, in a partition without a complete drain",
    _DRAINED,
    severity=WARNING,
)
DIVERGENT_TAIL: Final = Anomaly(
    "divergent-tail",
    REPLICA,
    "two replicas hold different records at one (partition, offset) at or above the lower of"
    " their high watermarks: an uncommitted tail",
    (REPLICA_DUMPS,),
    severity=WARNING,
)


def _txn(entries: Iterable[txn_registry.Entry], family: Family = TXN) -> tuple[Anomaly, ...]:
    """The entries of :mod:`checker.txn.registry` (of ``family``) as registry entries."""
    return tuple(
        Anomaly(e.name, family, *e[1:5], False, frozenset(e.permitted_by), e.definition) for e in entries
    )


# fmt: off
ANOMALIES: Final[tuple[Anomaly, ...]] = (
    LOST_WRITE, REPLICA_DIVERGENCE, INCONSISTENT_OFFSETS, DUPLICATE, ABORTED_READ, G1A, LOST_READ, UNEXPECTED,
    POLL_SKIP, NONMONOTONIC_POLL, INT_POLL_SKIP, INT_NONMONOTONIC_POLL, STALE_READ, NONMONOTONIC_SEND,
    REALTIME_ORDER, GROUP_SKIP, GROUP_REDELIVERY, COMMIT_REGRESSION, COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION, TRUNCATED_COMMITTED, INCOMPLETE_LEADER, HW_REGRESSION, MIN_ISR_VIOLATION,
    ISR_DIVERGENCE, EPOCH_REUSE, METADATA_ROLLBACK, HANGING_TRANSACTION, UNMARKED_TRANSACTION,
    *_txn(txn_registry.WHITE_BOX, INVARIANT), *_txn(txn_registry.ERRORS),
    STALLED, UNSEEN, DIVERGENT_TAIL, *_txn(txn_registry.WARNINGS),
)
# fmt: on
"""Every anomaly, in the order ``results.json``, the summary and ``--checks`` list them: the errors by family, the warnings last."""
BY_NAME: Final[dict[str, Anomaly]] = {anomaly.name: anomaly for anomaly in ANOMALIES}


def names(anomalies: Iterable[Anomaly] = ANOMALIES) -> tuple[str, ...]:
    return tuple(anomaly.name for anomaly in anomalies)


def of_families(*families: Family) -> tuple[str, ...]:
    """The names of the anomalies of ``families``, in registry order."""
    return names(anomaly for anomaly in ANOMALIES if anomaly.family in families)


def of_question(question: str) -> tuple[str, ...]:
    """The names of the anomalies one engine question answers, in registry order."""
    return names(anomaly for anomaly in ANOMALIES if anomaly.family.question == question)


def permitted_under(conditions: Iterable[str]) -> frozenset[str]:
    """The names of the anomalies that some of ``conditions`` permits (:attr:`Anomaly.permitted_by`)."""
    given = frozenset(conditions)
    return frozenset(anomaly.name for anomaly in ANOMALIES if anomaly.permitted_by & given)


def _check_registry() -> None:
    """Names unique, implications name entries, no cycle, conditions known: a broken registry fails on import."""
    if len(BY_NAME) != len(ANOMALIES):
        raise ValueError("anomaly names are not unique")
    for anomaly in ANOMALIES:
        unknown = [name for name in anomaly.implies if name not in BY_NAME or name == anomaly.name]
        if (
            unknown
            or anomaly.severity not in (ERROR, WARNING)
            or anomaly.permitted_by - set(CONDITIONS)
            or set(anomaly.evidence) - set(EVIDENCE)
        ):
            raise ValueError(
                f"registry entry {anomaly.name}: bad implies {unknown}, severity, conditions or evidence"
            )
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str) -> None:
        if state.get(name) == 1:
            raise ValueError(f"the anomaly graph has a cycle through {name}")
        if state.get(name) is None:
            state[name] = 1
            for implied in BY_NAME[name].implies:
                visit(implied)
            state[name] = 2

    for anomaly in ANOMALIES:
        visit(anomaly.name)


_check_registry()
