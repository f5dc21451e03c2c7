"""Config-aware expectations: which anomalies the run's own configuration permits.

A run configured with ``acks=1`` that loses acknowledged writes has not found a bug: Kafka
documents that loss.  The checker still reports the anomaly (the run is ``invalid``: the
log did lose data) but tags it ``expected: true`` with the rule that permits it, so a user
reads "lost-write x3, expected: acks=1".  In a safe configuration no rule applies and any
anomaly is plainly unexpected.

The rules, read from ``test.json``: ``broker_config`` (the effective settings the test
spec resolved when the run started, defaults applied, ``acks`` included) and the faults
(the random nemesis's ``nemesis.faults`` plus the ``scenario_faults`` a scripted scenario
injects).  No default is assumed here: a rule fires only on a setting the run recorded
(an external cluster's unstated configuration permits nothing), except that acks falls
back to the workload's own record for runs stored before ``broker_config`` held it.

``acks=0`` / ``acks=1``
    The leader acknowledges before (or without) replication; a leader change loses the
    acknowledged tail and reuses its offsets, and producer retries are not idempotent.
    Permits lost-write, inconsistent-offsets, duplicate -- and, since the offsets of the lost
    tail are handed out again, a send invoked after an acknowledgement may land at or below
    its offset, in the same process or another: nonmonotonic-send, realtime-order.  Not the
    poll checks: consumers are served only records below the high watermark, which the ISR
    holds, so a clean leader change keeps everything a consumer could have read.
``idempotent=false`` (the workload's producers, any target)
    A producer without idempotence retries a send whose answer it did not get; if the first
    attempt was written, the retry writes the record again.  Permits duplicate, nothing else.
``isolation=read_uncommitted`` (the workload's consumers under ``--txn``, any target)
    A ``read_uncommitted`` consumer is handed every record below the high watermark, an open or
    aborted transaction's included (Kafka's definition of the level).  Permits G1a, nothing
    else: precommitted-read is not even checked at that level (``checker.txn``), and what a
    consumer at either level may never see -- a record no one sent, one lost -- stays an error.
``unclean.leader.election.enable=true``
    An out-of-sync replica may become leader and the others truncate to it: committed data
    (already read by consumers) vanishes and consumers are reset; a producer's retry of a
    vanished write lands again at a new offset.  Permits lost-write, lost-read,
    inconsistent-offsets, duplicate, and every order check: offsets already acknowledged are
    handed out again (nonmonotonic-send, realtime-order); a consumer whose position fell off
    the shorter log is reset to its start and re-reads what it had read (nonmonotonic-poll,
    stale-read), or reads a log rewritten under it, inside one poll too (poll-skip,
    int-poll-skip, int-nonmonotonic-poll).  This set is called the *committed-data-loss set*
    below.
``flush never + power-loss``
    No ``flush.messages=1``, so acknowledged data may live only in page caches; the nemesis
    cuts power, which drops them.  Permits the same set as unclean election, for the same
    reasons: committed data vanishes.
``min.insync.replicas=1 + flush never + power-loss``
    The ISR may shrink to the leader alone, so one node's power loss suffices.  It never
    permits more than the previous rule; it is named so the reader knows why a single
    power-cycled node was enough.
``truncation.mode=high-watermark``
    Pre-KIP-101 truncation to the follower's own high watermark (Kafka < 0.11): the
    documented loss and the documented divergence.  Permits replica-divergence and the
    committed-data-loss set.
``leader.epoch.lookup=single``
    KIP-101's one-shot OffsetsForLeaderEpoch (before KIP-279): after fast leader changes a
    follower keeps records of another lineage.  Permits replica-divergence and, since
    consumers may have read either lineage, the committed-data-loss set.
``isr.join.offset=high-watermark``
    KAFKA-7128 unfixed: a follower may join the ISR below records a previous leader
    committed, then lead without them.  Permits the committed-data-loss set.
``leader.epoch.fencing.enable=false``
    No KIP-320 fencing: a replica with stale metadata replicates from, or truncates against,
    a leader of another epoch.  Permits replica-divergence and the committed-data-loss set.
``min.insync.replicas.strict=false``
    The HW (and with it acks=all) may advance over an ISR smaller than min ISR, so an
    acknowledged write may live on the leader alone (before KAFKA-15583).  Permits the
    committed-data-loss set.
``eligible.leader.replicas.enable=false + flush never + power-loss``
    Election from the ISR only re-elects a last ISR member that lost power with unsynced
    writes (KIP-966's "last replica standing").  Never permits more than the power-loss
    rule; named so the reader knows why one power-cycled node was enough.

**A log kept in PostgreSQL** (the tansu target: stateless brokers, every produce one
PostgreSQL transaction).  Such a run records ``postgresql.*`` settings, and then only these
rules (and ``acks=0``, a client's rule) apply -- the Kafka replication rules above describe
another system, and acks=1 acknowledges the same commit acks=all does:

``postgresql.fsync=off + power-loss``
    PostgreSQL never forces its WAL to disk, so a power loss of its node takes every commit
    since the files were last written back: acknowledged records vanish and their offsets are
    handed out again.  Permits the committed-data-loss set.
``postgresql.synchronous_commit=off + power-loss`` (or ``+ kill``)
    A commit is acknowledged before its WAL is written, let alone flushed: a crash of the
    server -- a power loss, or a kill, which takes the WAL buffers in shared memory -- loses the
    last commits.  Permits the committed-data-loss set.

With PostgreSQL's defaults (``fsync=on``, ``synchronous_commit=on``) no rule applies: a power
loss or a crash must not lose anything acknowledged.  The nisshi target on PostgreSQL records the
same settings and gets the same rules.

**A log kept in one SQLite file** (the nisshi target with ``nisshi.storage=sqlite``: one broker,
its embedded engine):

``nisshi.storage=sqlite + power-loss``
    nisshi opens its file in WAL mode with ``synchronous = normal`` (hard-coded, ``nisshi-storage-sql``
    0.8.1 ``lite.rs``): a commit -- and the produce answered after it -- is not fsynced until the
    next checkpoint, so a power loss takes the last acknowledged records and their offsets are
    handed out again (measured: 161 lost writes in one 30 s run with one power loss).  The same
    permission as Kafka's ``flush never + power-loss`` on a single replica; a kill loses nothing
    (the WAL is in the page cache), so no rule names it.  Permits the committed-data-loss set.

**Consumer groups** (``--consume-via subscribe``).  A group's commits are records of
``__consumer_offsets``, which the coordinator appends acks=all whatever the producers' acks:
the rules that let committed data vanish let a commit vanish too (the group's position goes
back: commit-regression, and a later generation re-reads what was committed:
group-redelivery), and a log rewritten below a committed position holds acknowledged records
the group never reads (group-skip).  The group's generation is a record of the same log (the
group's metadata record, which the next coordinator loads): where it vanishes, the coordinator
forgets the group and hands out generations again from 1 (generation-regression) -- whatever
the commit mode, since the group forms and every assignment is recorded under ``--commit auto``
too.  So the committed-data-loss set includes those four; ``acks=0``/``acks=1`` permit none
of them (consumers read, and commit, only below the high watermark, which a clean leader
change keeps, and the coordinator appends acks=all).  ``--commit auto`` is no rule either (it
permits nothing by itself, and takes nothing from the rules above): an auto commit stores the position after the records a poll *returned* -- every one of which
the history records -- so it never passes an unread record, and it lags at most: the next
generation re-reads above the last known position (at-least-once), which the group checks
already allow.  committed-beyond-read is never permitted: it is the workload's (or a
client's) arithmetic, which no broker setting changes.

**The white-box checks** (the bundled broker's event logs).  Where committed data may vanish --
unclean election, power loss without ``flush.messages=1`` (and its variants), and every bug
switch -- the brokers' own records show how: a truncation below an exposed HW
(truncated-committed), a leader elected without committed records (incomplete-leader) and, once
its HW is established, the partition's HW going back (hw-regression); those rules permit these
three.  The switches that let replicas diverge (``truncation.mode=high-watermark``,
``leader.epoch.lookup=single``, ``leader.epoch.fencing.enable=false``) also permit
isr-divergence; power loss does not (as it does not permit replica-divergence: leader-epoch
truncation repairs a replica that lost its tail).  ``min.insync.replicas.strict=false`` is the
rule min-isr-violation checks, switched off: it permits it.  ``acks`` permits none of them: a
producer's acks change what is acknowledged, not how the brokers replicate or truncate, and an
``acks=1`` loss is a loss of records that were never below the HW.  The tansu rules permit none
(it keeps no event log: the checks do not apply).

**The transactional checks** (:mod:`checker.txn`).  Where acknowledged data may vanish -- every
rule above but ``idempotent=false`` -- a committed transaction may lose some of its records
(torn-transaction), and offsets handed out again put a later write at or below an earlier one,
inside one transaction (int-nonmonotonic-send) or across transactions that a read had ordered
(G1c, G1c-process, G1c-realtime): the entries name ``acknowledged data may vanish``, which every
loss rule's set includes.  int-send-skip, G0, G0-process and G0-realtime need no rule: Kafka's
model allows them everywhere, so they are warnings (``checker.txn.registry``).

Never permitted by any rule: precommitted-read (losing records shows no consumer an open
transaction's), aborted-read and -- but at ``isolation=read_uncommitted`` -- G1a (a definite failure that took effect),
unexpected (a value nobody sent) and committed-beyond-read -- those are bugs in any
configuration -- and stalled: every fault the nemesis injects is already outside the gaps it
measures (``checker.definitions``, liveness), so no setting excuses a partition that stops
outside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from checker.anomalies import (
    ACKED_LOSS,
    BROKER_LOSS,
    COMMITTED_LOSS,
    DIVERGENCE,
    MIN_ISR_OFF,
    RETRIED_SENDS,
    UNCOMMITTED_READS,
    UNVERIFIED_PRODUCE,
    permitted_under,
)

# What each rule permits is read from the registry: an anomaly's entry names the conditions that
# excuse it (``Anomaly.permitted_by``), and a rule says which conditions its configuration makes
# possible.  Acknowledged data can vanish and its offsets be handed out again: lost-write,
# inconsistent-offsets, duplicate, and whoever sends after an acknowledgement may land at or below
# its offset (the send order checks).
_ACKED_DATA_LOSS = permitted_under({ACKED_LOSS})
# When committed data can vanish, a producer's retry of a write that vanished from the log
# but had been read (or acknowledged) before can land again at another offset: a duplicate;
# consumers are reset or read a rewritten log: every poll order check.  A consumer group's
# commits are records of the same kind (``__consumer_offsets``, acks=all): a commit that vanishes
# takes the group back (commit-regression, and its members re-read: group-redelivery), and a
# log rewritten below a committed position holds records the group never reads (group-skip).
# The group's metadata record (its generation) is one too: lost, the group restarts at
# generation 1 (generation-regression), in every commit mode.
_COMMITTED_DATA_LOSS = permitted_under({ACKED_LOSS, COMMITTED_LOSS})
# In the bundled broker's own records, committed data vanishing is a truncation below an exposed
# HW, a leader elected without it and, once that leader's HW is established, the HW going back.
_BROKER_LOSS = permitted_under({ACKED_LOSS, COMMITTED_LOSS, BROKER_LOSS})
_DIVERGING = permitted_under({ACKED_LOSS, COMMITTED_LOSS, BROKER_LOSS, DIVERGENCE})
_NOT_STRICT = permitted_under({ACKED_LOSS, COMMITTED_LOSS, BROKER_LOSS, MIN_ISR_OFF})
_RETRIES = permitted_under({RETRIED_SENDS})
# A leader that does not verify a transactional produce appends one that arrives after its
# transaction ended: it opens a transaction no coordinator will end (KAFKA-14402).
_UNVERIFIED = permitted_under({UNVERIFIED_PRODUCE})
# A read_uncommitted consumer reads what any transaction wrote, aborted or not.
_UNCOMMITTED = permitted_under({UNCOMMITTED_READS})


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    name: str
    permits: frozenset[str]


def _setting(config: Mapping[str, Any], key: str) -> str:
    """A recorded setting as lower-case text ("" when the run did not record it)."""
    value = config.get(key)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower()


def unsynced_acks_possible(config: Mapping[str, Any]) -> bool:
    """True unless every message is fsynced before it is acknowledged (``flush.messages=1``).

    ``flush.ms`` alone does not count: it syncs on a timer, after the acknowledgement.
    """
    return _setting(config, "flush.messages") not in ("1",)


def applicable_rules(spec: Mapping[str, Any]) -> list[Rule]:
    """The rules that the run's recorded configuration triggers (see the module docstring)."""
    workload = spec.get("workload") or {}
    config = spec.get("broker_config") or {}
    faults = {str(f) for f in (spec.get("nemesis") or {}).get("faults") or []}
    faults |= {str(f) for f in spec.get("scenario_faults") or []}  # faults a scripted scenario injects
    rules: list[Rule] = []
    acks = str(workload.get("acks", "all")).strip().lower()  # the workload owns acks
    if workload.get("idempotent") is False:  # a client's rule, whatever the target
        rules.append(Rule("idempotent=false", _RETRIES))
    if workload.get("txn") is True and workload.get("isolation") == "read_uncommitted":  # a client's too
        rules.append(Rule("isolation=read_uncommitted", _UNCOMMITTED))
    if _setting(config, _NISSHI_STORAGE) == "sqlite":
        if acks == "0":
            rules.append(Rule("acks=0", _ACKED_DATA_LOSS))
        if "power-loss" in faults:
            rules.append(Rule(f"{_NISSHI_STORAGE}=sqlite + power-loss", _COMMITTED_DATA_LOSS))
        return rules
    if any(str(key).startswith(_POSTGRESQL) for key in config):
        if acks == "0":
            rules.append(Rule("acks=0", _ACKED_DATA_LOSS))
        return rules + _postgresql_rules(config, faults)
    if acks in ("0", "1"):
        rules.append(Rule(f"acks={acks}", _ACKED_DATA_LOSS))
    if _setting(config, "unclean.leader.election.enable") == "true":
        rules.append(Rule("unclean.leader.election.enable=true", _BROKER_LOSS))
    if "power-loss" in faults and unsynced_acks_possible(config):
        rules.append(Rule("flush never + power-loss", _BROKER_LOSS))
        if _setting(config, "min.insync.replicas") == "1":
            rules.append(Rule("min.insync.replicas=1 + flush never + power-loss", _BROKER_LOSS))
        if _setting(config, "eligible.leader.replicas.enable") == "false":
            rules.append(
                Rule("eligible.leader.replicas.enable=false + flush never + power-loss", _BROKER_LOSS)
            )
    for key, value, permits in (
        ("truncation.mode", "high-watermark", _DIVERGING),
        ("leader.epoch.lookup", "single", _DIVERGING),
        ("isr.join.offset", "high-watermark", _BROKER_LOSS),
        ("leader.epoch.fencing.enable", "false", _DIVERGING),
        ("min.insync.replicas.strict", "false", _NOT_STRICT),
        ("transaction.partition.verification.enable", "false", _UNVERIFIED),
    ):
        if _setting(config, key) == value:
            rules.append(Rule(f"{key}={value}", permits))
    return rules


_NISSHI_STORAGE = "nisshi.storage"
"""nisshi's storage setting (``testbed.cluster.nisshi.STORAGE_SETTING``); ``sqlite`` is its embedded engine."""
_POSTGRESQL = "postgresql."
"""The prefix of the settings a run whose log is PostgreSQL's records (``testbed.cluster.postgres``)."""


def _postgresql_rules(config: Mapping[str, Any], faults: set[str]) -> list[Rule]:
    """The rules of a log kept in PostgreSQL (see the module docstring)."""
    rules = []
    if "power-loss" in faults and _setting(config, "postgresql.fsync") in _OFF:
        rules.append(Rule("postgresql.fsync=off + power-loss", _COMMITTED_DATA_LOSS))
    crashes = sorted(faults & {"power-loss", "kill"}, reverse=True)
    if crashes and _setting(config, "postgresql.synchronous_commit") in _OFF:
        rule = f"postgresql.synchronous_commit=off + {' or '.join(crashes)}"
        rules.append(Rule(rule, _COMMITTED_DATA_LOSS))
    return rules


_OFF = ("off", "false", "no", "0")
"""How PostgreSQL spells a boolean that is off."""


def expectation(anomaly: str, rules: list[Rule]) -> tuple[bool, str | None]:
    """``(expected, rule)`` for one anomaly: the names of every permitting rule, joined by '; '."""
    names = [rule.name for rule in rules if anomaly in rule.permits]
    return (True, "; ".join(names)) if names else (False, None)
