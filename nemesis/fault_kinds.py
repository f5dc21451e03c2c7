"""The one registry of fault kinds: every fault and heal the nemesis can inject, declared once.

Each :class:`FaultKind` says what a newcomer must know of one kind, and every part of the nemesis
reads it from here instead of keeping its own list:

* ``name`` -- the ``f`` of its op in the history, the name in ``--nemesis`` and in a scenario's
  ``fault = "..."`` (one spelling everywhere);
* ``heal`` -- the kind that undoes it, or an explicit :class:`NoHeal` saying why there is none
  (a heal itself; a fault whose op completes the whole change);
* ``drawn_as`` -- how the random schedule picks what it hits (:mod:`nemesis.plan`): a node
  target, a partition shape, the one controller node, the workload's clients, or never (heals);
* ``nodes`` and ``params`` -- what a scenario step of this kind takes (:mod:`nemesis.steps`);
* ``drawn`` -- the parameters the random schedule draws, each from its choices (seeded, so a
  seed still names one run): a schedule's ``clock-skew`` jumps by a drawn ``offset_s``, where a
  scenario names its own;
* ``needs`` -- the abilities of the target (or workload) it cannot do without, by name
  (:data:`nemesis.fault_declaration.ABILITIES`); the mechanism refuses the spec when one is missing;
* ``op_value`` -- the shape of its op's ``value`` in the history (``docs/history.md``);
* ``colour`` -- its colour in the report (:mod:`harness.report.plots`).

*How* it is injected is its mechanism: :data:`nemesis.mechanism.MECHANISMS` holds one entry per
kind here (``tests/nemesis/test_fault_kinds.py`` fails when one is missing, or a heal, or a
colour).  The history's own table of fault/heal pairs (:data:`testbed.record.faults.HEALS`, which
the checker reads and which may not import the nemesis) is checked against :data:`REGISTRY` by
the same test.

Adding a fault kind: one entry here, its mechanism (a per-node act in
:data:`nemesis.broker_acts.NODE_ACTS`, or a mechanism of its own in
:data:`nemesis.kind_mechanisms.MECHANISMS`), the record's pair if it has a heal, and its tests
(``packet-loss`` was added so: :mod:`nemesis.packet_loss`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from nemesis.client_crash_plan import CLIENT_CRASH as CLIENT_CRASH
from nemesis.client_crash_plan import CLIENT_CRASH_KIND, CONSUMER_CRASH_KIND
from nemesis.client_crash_plan import CONSUMER_CRASH as CONSUMER_CRASH
from nemesis.controller_kinds import CONTROLLER_KILL as CONTROLLER_KILL
from nemesis.controller_kinds import CONTROLLER_KINDS
from nemesis.controller_kinds import CONTROLLER_POWER_LOSS as CONTROLLER_POWER_LOSS
from nemesis.controller_kinds import CONTROLLER_START as CONTROLLER_START
from nemesis.fault_declaration import (
    ANNOUNCE,
    CONSUMER_GROUP,
    CONTROLLER_NODE,
    DISK_FAULTS_ABILITY,
    FAKE_CLOCK,
    IS_A_HEAL,
    NODE_CONTROL,
    NODE_FAULT_VALUE,
    NODES_VALUE,
    OTHER_COLOUR,
    POWER_LOSS_ABILITY,
    DrawnAs,
    FaultKind,
    NoHeal,
    Param,
    every_broker_heal,
)
from nemesis.membership_kinds import MEMBERSHIP_KINDS
from nemesis.request_kinds import HELD_REQUESTS as HELD_REQUESTS
from nemesis.request_kinds import NAMED_REQUESTS as NAMED_REQUESTS
from nemesis.request_kinds import REQUEST_DELAY as REQUEST_DELAY
from nemesis.request_kinds import REQUEST_DELAY_MS as REQUEST_DELAY_MS
from nemesis.request_kinds import REQUEST_DELAY_MS_DRAWN as REQUEST_DELAY_MS_DRAWN
from nemesis.request_kinds import REQUEST_DUPLICATE as REQUEST_DUPLICATE
from nemesis.request_kinds import REQUEST_HOLD as REQUEST_HOLD
from nemesis.request_kinds import REQUEST_KINDS
from nemesis.request_kinds import REQUEST_RELEASE as REQUEST_RELEASE
from nemesis.request_kinds import REQUEST_REORDER as REQUEST_REORDER
from nemesis.request_kinds import REQUEST_REORDER_MS as REQUEST_REORDER_MS
from nemesis.request_kinds import REQUEST_RESET as REQUEST_RESET

KILL: Final = "kill"
SHUTDOWN: Final = "shutdown"
PAUSE: Final = "pause"
POWER_LOSS: Final = "power-loss"
METADATA_DELAY: Final = "metadata-delay"
PARTITION: Final = "partition"
CONSUMER_CHURN: Final = "consumer-churn"
START: Final = "start"
RESUME: Final = "resume"
PARTITION_HEAL: Final = "heal"
METADATA_HEAL: Final = "metadata-heal"
PACKET_LOSS: Final = "packet-loss"
PACKET_LOSS_HEAL: Final = "packet-loss-heal"
SLOW_LINK: Final = "slow-link"
SLOW_LINK_HEAL: Final = "slow-link-heal"
CLOCK_SKEW: Final = "clock-skew"
CLOCK_DRIFT: Final = "clock-drift"
CLIENT_CUT: Final = "client-cut"
CLIENT_HEAL: Final = "client-heal"
CLOCK_HEAL: Final = "clock-heal"
DISK_ERROR: Final = "disk-error"
SLOW_DISK: Final = "slow-disk"
DISK_HEAL: Final = "disk-heal"
ONE_WAY: Final = "one-way"
ONE_WAY_HEAL: Final = "one-way-heal"

PACKET_LOSS_PROBABILITY: Final = 0.3
"""The chance each packet from a peer is dropped under ``packet-loss`` (why 0.3: :mod:`nemesis.packet_loss`)."""
SLOW_LINK_RATE_KBIT: Final = 256
"""The rate (kbit/s) of a node's links to its peers under ``slow-link`` unless a step says otherwise
(why 256: :mod:`nemesis.slow_link`)."""
CLOCK_OFFSET_S: Final = 120
"""How far ``clock-skew`` moves a broker's wall clock unless a step says otherwise: forward by two
minutes, past the clients' default ``transaction.timeout.ms`` (60 s) and a session timeout, so a
timer that wrongly reads the wall clock fires (why forward: :mod:`testbed.cluster.fake_clock`)."""
SLOW_LINK_RATES_DRAWN: Final[tuple[int, ...]] = (64, 128, 256, 1024)
"""The rates a schedule's ``slow-link`` draws from: from a link that stalls replication for
seconds (64) to one that only delays it (1024)."""
CLOCK_OFFSETS_DRAWN: Final[tuple[int, ...]] = (-3600, -120, -5, 5, 120, 3600)
"""The jumps a schedule's ``clock-skew`` draws from, both ways: seconds (an NTP step), past the
clients' transaction and session timeouts (two minutes), and an hour (a time-zone slip)."""
CLOCK_RATE_PCT: Final = 1000
"""How fast ``clock-drift`` runs a broker's wall clock unless a step says otherwise: ten times real
speed, so it gains a minute in under seven seconds and a fault window outruns the clients' default
``transaction.timeout.ms`` (60 s) on it, as a jump does."""
CLOCK_RATES_DRAWN: Final[tuple[int, ...]] = (25, 50, 200, 1000)
"""The rates (% of real speed) a schedule's ``clock-drift`` draws from: clocks losing three
quarters or half of each second, and gaining one or nine."""
DISK_ERROR_OP, DISK_ERROR_ERRNO, DISK_FILES = "fsync", "EIO", "*"
"""What a ``disk-error`` fails, with what error, on which files, unless a step says otherwise: every
fsync in the data directory with EIO (why: :mod:`nemesis.disk_faults`)."""
SLOW_DISK_MS: Final = 200
"""How long each fsync waits under ``slow-disk`` unless a step says otherwise."""
SLOW_DISK_MS_DRAWN: Final[tuple[int, ...]] = (20, 200, 1000)
"""The delays a schedule's ``slow-disk`` draws from: a busy disk, a saturated one, a dying one."""
SHUTDOWN_TIMEOUT_S: Final = 30.0
"""How long ``shutdown`` waits for the broker to exit after its SIGTERM before it SIGKILLs it (Kafka's
system tests wait likewise, then kill): a controlled shutdown that cannot move its leaderships
must not hold the nemesis for good, and the op says it ended in a kill."""
MIN_RATE_KBIT: Final = 8
"""The slowest ``slow-link``: below one kilobyte per second even a heartbeat waits for seconds (a cut)."""

CHURN_STOPS: Final[tuple[str, ...]] = ("leave", "stall")
"""How ``consumer-churn`` stops its victim (:mod:`nemesis.consumer_churn`), the default first."""

DISK_FILES_PARAM = Param(
    "files", False, f"a glob of data-directory paths, e.g. *.log or *checkpoint* (default {DISK_FILES})"
)
DISK_NEEDS = frozenset({NODE_CONTROL, POWER_LOSS_ABILITY, DISK_FAULTS_ABILITY})
DISK_KINDS: Final[tuple[FaultKind, ...]] = (
    FaultKind(
        DISK_ERROR,
        f"the broker's lazy filesystem fails every op (default {DISK_ERROR_OP}) of the files matching"
        f" files (default {DISK_FILES}) with errno (default {DISK_ERROR_ERRNO}) until the heal; a failed"
        " fsync loses the file's unsynced writes for good (fsyncgate); the broker halts, as Kafka does"
        " when its only log directory fails (nemesis.disk_faults)",
        heal=DISK_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE
        + f' (+ "op": "{DISK_ERROR_OP}", "errno": "{DISK_ERROR_ERRNO}", "files": "{DISK_FILES}")',
        colour="#5b3a29",
        params=(
            Param("op", False, f"the call that fails: fsync, write or read (default {DISK_ERROR_OP})"),
            Param("errno", False, f"the error: EIO, ENOSPC or EROFS (default {DISK_ERROR_ERRNO})"),
            DISK_FILES_PARAM,
        ),
        needs=DISK_NEEDS,
    ),
    FaultKind(
        SLOW_DISK,
        f"every fsync of the files matching files (default {DISK_FILES}) on the broker's lazy filesystem"
        f" first waits delay_ms (default {SLOW_DISK_MS}), the whole data directory stalled meanwhile",
        heal=DISK_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "delay_ms": {SLOW_DISK_MS}, "files": "{DISK_FILES}")',
        colour="#a47551",
        params=(
            Param("delay_ms", False, f"milliseconds per fsync, 1..60000 (default {SLOW_DISK_MS})"),
            DISK_FILES_PARAM,
        ),
        needs=DISK_NEEDS,
        drawn=(("delay_ms", SLOW_DISK_MS_DRAWN),),
    ),
    every_broker_heal(
        DISK_HEAL,
        "clear the lazy filesystem's disk rules on the nodes and start the broker where it is not"
        " running (heal of disk-error and slow-disk; no node: every broker)",
        DISK_NEEDS,
    ),
)
"""The disk faults (:mod:`nemesis.disk_faults`), declared before :data:`KINDS` ends with them."""


KINDS: Final[tuple[FaultKind, ...]] = (
    FaultKind(
        KILL,
        "SIGKILL the broker daemon; ok once it is dead (not merely signalled)",
        heal=START,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#c0392b",
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        SHUTDOWN,
        "SIGTERM the broker daemon: a clean shutdown, as an operator's restart (the bundled broker"
        " first has the controller move its leaderships away -- Kafka's controlled shutdown -- then"
        " flushes and checkpoints); ok once it has exited, info if it had to be SIGKILLed after"
        f" {SHUTDOWN_TIMEOUT_S:g} s",
        heal=START,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + ' (+ "controlled": true|false)',
        colour="#e07a5f",
        params=(
            Param(
                "controlled",
                False,
                "false: SIGINT, a clean shutdown without the controlled handover (Kafka with"
                " controlled.shutdown.enable=false, or once its controlled shutdown gave up): the broker"
                " keeps its ISR memberships while it restarts; default true (SIGTERM)",
            ),
        ),
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        START,
        "start the broker where it is not running (heal of kill, shutdown and power-loss)",
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="required",
        op_value=NODES_VALUE + ' (heal-all adds "not_killed_by_nemesis")',
        colour=OTHER_COLOUR,
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        PAUSE,
        "SIGSTOP the broker's process group",
        heal=RESUME,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#7d4cc2",
        params=(ANNOUNCE,),
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        RESUME,
        "SIGCONT the broker (heal of pause)",
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="required",
        op_value=NODES_VALUE,
        colour=OTHER_COLOUR,
        params=(ANNOUNCE,),
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        POWER_LOSS,
        "SIGKILL the broker, then drop every write its data directory had not fsynced",
        heal=START,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#7b2d0a",
        needs=frozenset({NODE_CONTROL, POWER_LOSS_ABILITY}),
    ),
    FaultKind(
        PARTITION,
        "each node drops traffic from the nodes its grudge names (iptables, chain TIDEMARK)",
        heal=PARTITION_HEAL,
        drawn_as="partition-shape",
        nodes="none",
        op_value='{"kind": "halves", "grudge": {"n1": ["n2"], ...}}',
        colour="#1f6fc5",
        params=(
            Param("grudge", True, "node -> the nodes it drops traffic from"),
            Param("kind", False, "the shape's name, for the history (default: scenario)"),
        ),
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        PARTITION_HEAL,
        "flush the partition chain (heal of partition; a metadata delay stays)",
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="none",
        op_value=NODES_VALUE,
        colour=OTHER_COLOUR,
        needs=frozenset({NODE_CONTROL}),
    ),
    FaultKind(
        METADATA_DELAY,
        "the brokers drop every packet from the controller (chain TIDEMARK-META): KIP-320's zombie",
        heal=METADATA_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour=OTHER_COLOUR,
        needs=frozenset({NODE_CONTROL, CONTROLLER_NODE}),
    ),
    every_broker_heal(
        METADATA_HEAL,
        "flush TIDEMARK-META on the brokers (heal of metadata-delay; no node: every broker)",
    ),
    FaultKind(
        PACKET_LOSS,
        f"the nodes drop each packet from their peers with probability {PACKET_LOSS_PROBABILITY:g}"
        " (iptables statistic, chain TIDEMARK-LOSS): a degraded network, not a cut",
        heal=PACKET_LOSS_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "probability": {PACKET_LOSS_PROBABILITY:g})',
        colour="#d4a017",
        needs=frozenset({NODE_CONTROL}),
    ),
    every_broker_heal(
        PACKET_LOSS_HEAL,
        "flush TIDEMARK-LOSS on the nodes (heal of packet-loss; no node: every broker)",
    ),
    FaultKind(
        ONE_WAY,
        "the nodes stop hearing the other brokers, who still hear them: every TCP segment with data"
        " from another broker is dropped, handshakes and ACKs pass (iptables u32, chain TIDEMARK-ONEWAY);"
        " the controller, clients and the nemesis are heard as before",
        heal=ONE_WAY_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#7b2cbf",
        needs=frozenset({NODE_CONTROL}),
    ),
    every_broker_heal(
        ONE_WAY_HEAL,
        "flush TIDEMARK-ONEWAY on the nodes (heal of one-way; no node: every broker)",
    ),
    FaultKind(
        SLOW_LINK,
        f"the nodes send to their peers at {SLOW_LINK_RATE_KBIT} kbit/s at most (tc htb on their"
        " egress; nothing lost): a slow link, not a cut; a step may name the controller node",
        heal=SLOW_LINK_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE
        + f' (+ "rate_kbit": {SLOW_LINK_RATE_KBIT}, "peers" when a step named them)',
        colour="#e76f51",
        params=(
            Param(
                "rate_kbit",
                False,
                f"the rate in kilobits per second, >= {MIN_RATE_KBIT} (default {SLOW_LINK_RATE_KBIT})",
            ),
            Param("peers", False, "the peers whose links slow down (default: every other node)"),
        ),
        needs=frozenset({NODE_CONTROL}),
        drawn=(("rate_kbit", SLOW_LINK_RATES_DRAWN),),
        on_controller=True,
    ),
    dataclasses.replace(
        every_broker_heal(
            SLOW_LINK_HEAL,
            "delete the nemesis' root qdisc on the nodes (heal of slow-link; no node: every broker)",
        ),
        on_controller=True,
    ),
    FaultKind(
        CLIENT_CUT,
        "the brokers drop every TCP packet from anything but their peers (iptables, chain"
        " TIDEMARK-CLIENT): clients cannot reach them, replication and the controller can",
        heal=CLIENT_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE,
        colour="#264653",
        needs=frozenset({NODE_CONTROL}),
    ),
    every_broker_heal(
        CLIENT_HEAL,
        "flush TIDEMARK-CLIENT on the nodes (heal of client-cut; no node: every broker)",
    ),
    FaultKind(
        CLOCK_SKEW,
        f"the brokers' wall clocks jump by offset_s seconds (default +{CLOCK_OFFSET_S}; libfaketime,"
        " the monotonic clock untouched): record timestamps and transaction start times move,"
        " timeouts must not",
        heal=CLOCK_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "offset_s": {CLOCK_OFFSET_S})',
        colour="#8e6c8a",
        params=(
            Param(
                "offset_s",
                False,
                f"seconds, negative for a jump back, not 0 (default +{CLOCK_OFFSET_S})",
            ),
        ),
        needs=frozenset({NODE_CONTROL, FAKE_CLOCK}),
        drawn=(("offset_s", CLOCK_OFFSETS_DRAWN),),
    ),
    FaultKind(
        CLOCK_DRIFT,
        f"the brokers' wall clocks run at rate_pct % of real speed (default {CLOCK_RATE_PCT}; libfaketime,"
        " the monotonic clock untouched) from the reading they have: slow or fast clocks, whose"
        " timestamps drift apart from the other brokers' and from real time",
        heal=CLOCK_HEAL,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "rate_pct": {CLOCK_RATE_PCT})',
        colour="#b07aa1",
        params=(
            Param(
                "rate_pct",
                False,
                f"% of real speed, 0 (stopped) to 10000, not 100 (default {CLOCK_RATE_PCT})",
            ),
        ),
        needs=frozenset({NODE_CONTROL, FAKE_CLOCK}),
        drawn=(("rate_pct", CLOCK_RATES_DRAWN),),
    ),
    every_broker_heal(
        CLOCK_HEAL,
        "the brokers' wall clocks back to real time at real speed (heal of clock-skew and clock-drift;"
        " no node: every broker)",
        frozenset({NODE_CONTROL, FAKE_CLOCK}),
    ),
    FaultKind(
        CONSUMER_CHURN,
        "replace one of the workload's group consumers (nemesis.consumer_churn)",
        heal=NoHeal("the op starts the replacement itself: the group is whole when it completes"),
        drawn_as="workload",
        nodes="none",
        op_value='{"stop": "leave"|"stall", "pick": 1234} (+ "stopped", "started" on completion)',
        colour=OTHER_COLOUR,
        params=(
            Param(
                "stop", False, f"how the victim stops: {' or '.join(CHURN_STOPS)} (default {CHURN_STOPS[0]})"
            ),
            Param("pick", False, "which running consumer, modulo their count (default 0)"),
        ),
        needs=frozenset({CONSUMER_GROUP}),
    ),
    CLIENT_CRASH_KIND,
    CONSUMER_CRASH_KIND,
    *REQUEST_KINDS,
    *DISK_KINDS,
    *MEMBERSHIP_KINDS,
    *CONTROLLER_KINDS,
)
"""Every kind, each fault followed by its heal, in the order scenario messages list them."""


def checked_rate(rate_kbit: object) -> int:
    """A ``slow-link`` ``rate_kbit``: a whole number of kilobits per second >= :data:`MIN_RATE_KBIT`;
    ValueError saying so otherwise (a step, an op value and a script all check it here)."""
    if not isinstance(rate_kbit, int) or isinstance(rate_kbit, bool) or rate_kbit < MIN_RATE_KBIT:
        raise ValueError(
            f"a slow-link rate_kbit must be a whole number >= {MIN_RATE_KBIT}, not {rate_kbit!r}"
        )
    return rate_kbit


REGISTRY: Final[Mapping[str, FaultKind]] = MappingProxyType({kind.name: kind for kind in KINDS})
"""Kind name -> its declaration."""


def kind_of(name: str) -> FaultKind:
    """The declaration of ``name``; KeyError naming the known kinds when there is none."""
    if name not in REGISTRY:
        raise KeyError(f"no fault kind {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name]


def names_drawn_as(drawn_as: DrawnAs) -> tuple[str, ...]:
    """The kinds the schedule draws in the way ``drawn_as``, in registry order."""
    return tuple(kind.name for kind in KINDS if kind.drawn_as == drawn_as)


HEALS: Final[Mapping[str, str]] = MappingProxyType(
    {kind.name: kind.heal for kind in KINDS if isinstance(kind.heal, str)}
)
"""Fault -> the kind that heals it (kill, shutdown and power loss are all healed by ``start``)."""
HEAL_KINDS: Final[tuple[str, ...]] = tuple(kind.name for kind in KINDS if kind.heal is IS_A_HEAL)
"""The kinds that are heals."""
SCHEDULED: Final[tuple[str, ...]] = tuple(kind.name for kind in KINDS if kind.drawn_as != "never")
"""The kinds the random schedule may draw (what ``--nemesis`` may name besides packages)."""
