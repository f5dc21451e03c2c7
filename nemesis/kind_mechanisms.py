"""Each fault kind's mechanism: how :class:`nemesis.mechanism.Nemesis` carries out a step of it.

:data:`MECHANISMS` has one entry per kind of :data:`nemesis.fault_kinds.REGISTRY`.  Node-shaped
kinds (kill, pause, power loss, metadata delay and their heals) share one mechanism -- track the
fault on its nodes, record the op, run the kind's per-node act
(:data:`nemesis.broker_acts.NODE_ACTS`) on each node -- so a new node fault needs only its act
there; a partition, its heal, consumer churn and client crashes have mechanisms of their own, and packet loss
the node mechanism with its probability added to the op's value (a slow link: its rate; a disk
error or slow disk: its rule), and a request hold and
release (:mod:`nemesis.request_faults`) the node mechanism and its heal with the requests held
(duplicated, reset; a delay: its milliseconds) and the release mode added.  The nemesis is
seen through :class:`FaultActions`, the few operations the mechanisms share, so this table does
not import the nemesis that reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Protocol

from nemesis.broker_acts import NODE_ACTS
from nemesis.client_crash import run_crash
from nemesis.fault_declaration import IS_A_HEAL, FaultKind
from nemesis.fault_kinds import (
    CLIENT_CRASH,
    CLOCK_DRIFT,
    CLOCK_OFFSET_S,
    CLOCK_RATE_PCT,
    CLOCK_SKEW,
    CONSUMER_CHURN,
    CONSUMER_CRASH,
    CONTROLLER_KILL,
    CONTROLLER_POWER_LOSS,
    CONTROLLER_START,
    DISK_ERROR,
    DISK_ERROR_ERRNO,
    DISK_ERROR_OP,
    DISK_FILES,
    PACKET_LOSS,
    PARTITION,
    PARTITION_HEAL,
    REGISTRY,
    REQUEST_DELAY,
    REQUEST_DELAY_MS,
    REQUEST_DUPLICATE,
    REQUEST_HOLD,
    REQUEST_RELEASE,
    REQUEST_REORDER,
    REQUEST_REORDER_MS,
    REQUEST_RESET,
    SHUTDOWN,
    SLOW_DISK,
    SLOW_DISK_MS,
    SLOW_LINK,
    SLOW_LINK_RATE_KBIT,
)
from nemesis.nemesis_config import NemesisConfig
from nemesis.packet_loss import LOSS_PROBABILITY
from nemesis.plan import Grudge, Layout
from nemesis.request_faults import HELD_REQUESTS, RELEASE_MODE
from nemesis.steps import FaultStep
from testbed.record.faults import ANNOUNCED
from testbed.record.ops import Op
from testbed.record.recorder import Recorder


class FaultActions(Protocol):
    """What the mechanisms do through the nemesis (:class:`nemesis.mechanism.Nemesis` has it)."""

    @property
    def layout(self) -> Layout: ...

    recorder: Recorder
    config: NemesisConfig
    """Its workload (``config.workload``) is the one a ``client-crash`` asks (:mod:`nemesis.client_crash`)."""

    def inject_on_nodes(self, fault: str, nodes: Sequence[str], extra: Mapping[str, Any]) -> Op: ...

    def heal_on_nodes(self, heal: str, nodes: Sequence[str], extra: Mapping[str, Any] | None = ...) -> Op: ...

    def partition(self, grudge: Grudge, kind: str = ..., *, extra: Mapping[str, Any] | None = ...) -> Op: ...

    def heal_partition(self) -> Op: ...

    def consumer_churn(self, stop: str, pick: int) -> Op: ...


Mechanism = Callable[["FaultActions", FaultStep, Mapping[str, Any]], Op]
"""How one fault kind is carried out: the nemesis, the resolved step, and what the schedule adds
to the op's value (``target``, ``leader_of``)."""


def _unannounced(step: FaultStep) -> dict[str, Any]:
    return {} if step.announced else {ANNOUNCED: False}


def _on_nodes(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    return nemesis.inject_on_nodes(step.fault, step.nodes, {**extra, **_unannounced(step)})


def _lose_packets(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying how likely each packet is lost (its act drops with that)."""
    return _on_nodes(nemesis, step, {**extra, "probability": LOSS_PROBABILITY})


def _slow_links(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying the rate and the peers a step named (its act shapes the
    links to those peers, or to every other node, to the rate)."""
    peers = {"peers": list(step.peers)} if step.peers else {}
    return _on_nodes(nemesis, step, {**extra, "rate_kbit": step.rate_kbit or SLOW_LINK_RATE_KBIT, **peers})


def _skew_clocks(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying the offset (its act moves the wall clock by it)."""
    return _on_nodes(nemesis, step, {**extra, "offset_s": step.offset_s or CLOCK_OFFSET_S})


def _drift_clocks(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying the rate (its act makes the wall clock run at it)."""
    return _on_nodes(
        nemesis, step, {**extra, "rate_pct": CLOCK_RATE_PCT if step.rate_pct is None else step.rate_pct}
    )


def _break_disks(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying which call fails how on which files (its act sets the rule)."""
    rule = {
        "op": step.op or DISK_ERROR_OP,
        "errno": step.errno or DISK_ERROR_ERRNO,
        "files": step.files or DISK_FILES,
    }
    return _on_nodes(nemesis, step, {**extra, **rule})


def _slow_disks(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying the delay and the files (its act sets the rule)."""
    rule = {"delay_ms": step.delay_ms or SLOW_DISK_MS, "files": step.files or DISK_FILES}
    return _on_nodes(nemesis, step, {**extra, **rule})


def _named_requests(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op naming the requests acted on (held, duplicated or reset)."""
    return _on_nodes(nemesis, step, {**extra, "requests": list(step.requests or HELD_REQUESTS)})


def _delay_requests(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying how long each request waits (its act sets the rule)."""
    return _on_nodes(nemesis, step, {**extra, "delay_ms": step.delay_ms or REQUEST_DELAY_MS})


def _reorder_requests(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying the longest wait of a request (its act sets the rule)."""
    return _on_nodes(nemesis, step, {**extra, "delay_ms": step.delay_ms or REQUEST_REORDER_MS})


def _shut_down(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism, the op saying whether the stop is controlled (its act sends the signal that asks for it)."""
    return _on_nodes(nemesis, step, {**extra, "controlled": step.controlled})


def _heal_on_nodes(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    optional = REGISTRY[step.fault].nodes == "optional"  # no node named: every broker
    nodes = step.nodes or (nemesis.layout.brokers if optional else ())
    return nemesis.heal_on_nodes(step.fault, nodes, {**extra, **_unannounced(step)})


def _release_requests(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node heal (no node named: every broker), the op saying how the held requests go
    (late, on a new connection)."""
    nodes = step.nodes or nemesis.layout.brokers
    return nemesis.heal_on_nodes(step.fault, nodes, {**extra, **_unannounced(step), "mode": RELEASE_MODE})


def _partition(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    if step.grudge is None:
        raise ValueError(f"a {PARTITION} needs a grudge")
    return nemesis.partition(step.grudge, step.kind, extra=extra)


def _heal_partition(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    return nemesis.heal_partition()


def _consumer_churn(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    return nemesis.consumer_churn(step.stop, step.pick)


def _client_crash(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """No lock, as churn: the crash may wait seconds for its victim to be mid-call."""
    return run_crash(nemesis.recorder, nemesis.config.workload, step.pick, step.fault)


def _on_controller(nemesis: FaultActions, step: FaultStep, extra: Mapping[str, Any]) -> Op:
    """The node mechanism (or its heal's) on the one controller node, which the step does not name."""
    controller = nemesis.layout.controller
    if controller is None:  # the kind's needs refused it first
        raise ValueError(f"a {step.fault} needs a controller node")
    if REGISTRY[step.fault].heal is IS_A_HEAL:
        return nemesis.heal_on_nodes(step.fault, (controller,), {**extra, **_unannounced(step)})
    return nemesis.inject_on_nodes(step.fault, (controller,), {**extra, **_unannounced(step)})


def mechanism_of(kind: FaultKind) -> Mechanism | None:
    """A kind's own mechanism, else the shared one of node-shaped kinds (those with a per-node act)."""
    own: dict[str, Mechanism] = {
        PARTITION: _partition,
        PARTITION_HEAL: _heal_partition,
        CONSUMER_CHURN: _consumer_churn,
        CLIENT_CRASH: _client_crash,
        CONSUMER_CRASH: _client_crash,
        PACKET_LOSS: _lose_packets,
        SLOW_LINK: _slow_links,
        CLOCK_SKEW: _skew_clocks,
        CLOCK_DRIFT: _drift_clocks,
        REQUEST_HOLD: _named_requests,
        REQUEST_DUPLICATE: _named_requests,
        REQUEST_RESET: _named_requests,
        REQUEST_DELAY: _delay_requests,
        REQUEST_REORDER: _reorder_requests,
        REQUEST_RELEASE: _release_requests,
        DISK_ERROR: _break_disks,
        SLOW_DISK: _slow_disks,
        SHUTDOWN: _shut_down,
        CONTROLLER_KILL: _on_controller,
        CONTROLLER_POWER_LOSS: _on_controller,
        CONTROLLER_START: _on_controller,
    }
    if kind.name in own:
        return own[kind.name]
    if kind.name not in NODE_ACTS:
        return None
    return _heal_on_nodes if kind.heal is IS_A_HEAL else _on_nodes


MECHANISMS: Final[Mapping[str, Mechanism]] = MappingProxyType(
    {kind.name: mechanism for kind in REGISTRY.values() if (mechanism := mechanism_of(kind)) is not None}
)
"""Fault kind -> its mechanism: one entry per kind of :data:`nemesis.fault_kinds.REGISTRY`
(``tests/nemesis/test_fault_kinds.py`` fails when one is missing)."""
