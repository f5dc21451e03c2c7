"""Fault windows: which nemesis op starts a fault, which op heals it, and when a fault was active.

The record owns this because two rooms read it off the same history and must not disagree: the
report shades each window, and the checker's liveness figures (``checker.liveness``) measure
progress *outside* them.  The fault names and :data:`HEALS` are the history's vocabulary (the
``f`` of nemesis ops, ``docs/history.md``).  Each fault kind is declared once, in the nemesis'
registry (:mod:`nemesis.fault_kinds`, with its heal, parameters, mechanism and colour); the record
sits below the nemesis and the checker may not import it, so this module keeps a plain copy of
the fault/heal pairs, and ``tests/nemesis/test_fault_kinds.py`` fails when the two disagree.

**Pairing.**  Each nemesis fault is paired with the heal that undid it: ``kill`` and
``power-loss`` end at the ``start`` of the same node, ``pause`` at its ``resume``,
``metadata-delay`` at its ``metadata-heal``, ``packet-loss`` at its ``packet-loss-heal``, ``slow-link`` at its ``slow-link-heal``, ``clock-skew`` at its ``clock-heal``, ``client-cut`` at its ``client-heal``, ``request-hold``, ``request-delay``, ``request-reorder``, ``request-duplicate`` and ``request-reset`` at the ``request-release`` of the same node, ``disk-error`` and ``slow-disk`` at the ``disk-heal`` of the same node, ``decommission`` at the ``recommission`` of the same node, ``controller-kill`` and ``controller-power-loss`` at the ``controller-start`` of the controller node, ``partition`` at the next ``heal`` (which ends every
partition; one naming nodes ends those touching them).  A window opens at the fault's invoke (it
may act from then on) and closes at the heal's completion (it acts until then).  A fault whose
completion is ``fail`` certainly did not happen: no window.  A fault never healed stays open to
the end of the history (``end_ns`` None).

**Unannounced faults.**  A fault op whose value says ``"announced": false`` (a scenario step with
``announce = false``) is a planted liveness bug: the brokers really stop, but as far as the
liveness checks know nothing was injected -- it opens no window for them and its heal is no heal
(:func:`fault_windows` with ``announced_only``).  The report still shades it, marked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

KILL: Final = "kill"
SHUTDOWN: Final = "shutdown"
PAUSE: Final = "pause"
PARTITION: Final = "partition"
POWER_LOSS: Final = "power-loss"
METADATA_DELAY: Final = "metadata-delay"
PACKET_LOSS: Final = "packet-loss"
SLOW_LINK: Final = "slow-link"
CLOCK_SKEW: Final = "clock-skew"
CLOCK_DRIFT: Final = "clock-drift"
CLOCK_FAULTS: Final[frozenset[str]] = frozenset({CLOCK_SKEW, CLOCK_DRIFT})
"""The faults that move a broker's wall clock: a run that may inject one starts its brokers under
libfaketime (``testbed.cluster.fake_clock``)."""
CLIENT_CUT: Final = "client-cut"
REQUEST_HOLD: Final = "request-hold"
REQUEST_DELAY: Final = "request-delay"
REQUEST_DUPLICATE: Final = "request-duplicate"
REQUEST_RESET: Final = "request-reset"
REQUEST_REORDER: Final = "request-reorder"
DISK_ERROR: Final = "disk-error"
SLOW_DISK: Final = "slow-disk"
ONE_WAY: Final = "one-way"
DECOMMISSION: Final = "decommission"
CONTROLLER_KILL: Final = "controller-kill"
CONTROLLER_POWER_LOSS: Final = "controller-power-loss"
ELECT_PREFERRED: Final = "elect-preferred"
MOMENTARY_KINDS: Final[frozenset[str]] = frozenset({ELECT_PREFERRED})
"""Node faults without a heal (the op does the whole change): each one's window is its op, from
invoke to completion."""

HEALS: Mapping[str, str] = MappingProxyType(
    {
        KILL: "start",
        SHUTDOWN: "start",
        PAUSE: "resume",
        POWER_LOSS: "start",
        METADATA_DELAY: "metadata-heal",
        PACKET_LOSS: "packet-loss-heal",
        SLOW_LINK: "slow-link-heal",
        CLOCK_SKEW: "clock-heal",
        CLOCK_DRIFT: "clock-heal",
        CLIENT_CUT: "client-heal",
        REQUEST_HOLD: "request-release",
        REQUEST_DELAY: "request-release",
        REQUEST_DUPLICATE: "request-release",
        REQUEST_RESET: "request-release",
        REQUEST_REORDER: "request-release",
        DISK_ERROR: "disk-heal",
        SLOW_DISK: "disk-heal",
        ONE_WAY: "one-way-heal",
        DECOMMISSION: "recommission",
        CONTROLLER_KILL: "controller-start",
        CONTROLLER_POWER_LOSS: "controller-start",
        PARTITION: "heal",
    }
)
"""Fault -> the ``f`` of the nemesis op that heals it (kill, shutdown and power loss are all healed by ``start``)."""
PARTITION_HEAL: Final = HEALS[PARTITION]
NODE_FAULT_HEALS: Final[Mapping[str, str]] = MappingProxyType(
    {f: heal for f, heal in HEALS.items() if f != PARTITION}
)
FAULT_KINDS: Final[tuple[str, ...]] = (*NODE_FAULT_HEALS, PARTITION)
HEAL_KINDS: Final[frozenset[str]] = frozenset(HEALS.values())
ANNOUNCED: Final = "announced"
"""The key of a fault or heal op's value that, set to ``false``, makes it unannounced (see above)."""


@dataclasses.dataclass(frozen=True, slots=True)
class NemesisRow:
    """One nemesis op as the history stores it (``type``: invoke, ok, fail or info)."""

    index: int
    time_ns: int
    type: str
    f: str
    value: Any
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class NemesisEvent:
    """One nemesis op pair: what was done, to which nodes, when, with which outcome."""

    f: str
    nodes: tuple[str, ...]
    value: Any
    invoked_ns: int
    completed_ns: int | None
    outcome: str
    """``ok``, ``fail``, ``info``, or ``pending`` (no completion recorded)."""
    error: str | None

    @property
    def invoked_s(self) -> float:
        return self.invoked_ns / 1e9

    @property
    def completed_s(self) -> float | None:
        return None if self.completed_ns is None else self.completed_ns / 1e9

    @property
    def announced(self) -> bool:
        return not (isinstance(self.value, dict) and self.value.get(ANNOUNCED) is False)


@dataclasses.dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    label: str
    nodes: tuple[str, ...]
    start_ns: int
    end_ns: int | None
    """``None``: never healed (open to the end of the history)."""
    healed_by: str | None
    announced: bool = True

    @property
    def start_s(self) -> float:
        return self.start_ns / 1e9

    @property
    def end_s(self) -> float | None:
        return None if self.end_ns is None else self.end_ns / 1e9


def nodes_of(f: str, value: Any) -> tuple[str, ...]:
    """The nodes a nemesis op names: its ``nodes``, or every node of a partition's grudge."""
    if not isinstance(value, dict):
        return ()
    if f == PARTITION and isinstance(value.get("grudge"), dict):
        grudge = value["grudge"]
        named = set(grudge) | {n for targets in grudge.values() if isinstance(targets, list) for n in targets}
        return tuple(sorted(str(n) for n in named))
    nodes = value.get("nodes")
    return tuple(str(n) for n in nodes) if isinstance(nodes, list) else ()


def nemesis_events(rows: Iterable[NemesisRow]) -> list[NemesisEvent]:
    """Pair each nemesis invoke with the next completion of the same ``f`` (in history order);
    a completion without an invoke stands for itself, an invoke without one is ``pending``."""
    open_invokes: dict[str, list[NemesisRow]] = {}
    events: list[tuple[int, NemesisEvent]] = []
    for row in sorted(rows, key=lambda r: r.index):
        if row.type == "invoke":
            open_invokes.setdefault(row.f, []).append(row)
            continue
        waiting = open_invokes.get(row.f)
        invoke = waiting.pop(0) if waiting else row
        value = row.value if row.value is not None else invoke.value
        event = NemesisEvent(
            row.f, nodes_of(row.f, value), value, invoke.time_ns, row.time_ns, row.type, row.error
        )
        events.append((invoke.index, event))
    for waiting in open_invokes.values():
        for invoke in waiting:
            value = invoke.value
            event = NemesisEvent(
                invoke.f, nodes_of(invoke.f, value), value, invoke.time_ns, None, "pending", None
            )
            events.append((invoke.index, event))
    return [event for _, event in sorted(events, key=lambda pair: pair[0])]


def _label(event: NemesisEvent) -> str:
    if event.f == PARTITION and isinstance(event.value, dict) and event.value.get("kind"):
        return f"partition {event.value['kind']}"
    return f"{event.f} {','.join(event.nodes)}".strip()


def fault_windows(events: Iterable[NemesisEvent], *, announced_only: bool = False) -> list[FaultWindow]:
    """Fault windows from paired nemesis events (the pairing is the module docstring's), by start.

    ``announced_only``: leave unannounced faults and heals out altogether (the liveness checks).
    """
    open_faults: list[tuple[NemesisEvent, set[str]]] = []
    windows: list[FaultWindow] = []

    def close(event: NemesisEvent, end_ns: int | None, healed_by: str | None) -> None:
        window = FaultWindow(
            event.f, _label(event), event.nodes, event.invoked_ns, end_ns, healed_by, event.announced
        )
        windows.append(window)

    chosen = [e for e in events if e.announced or not announced_only]
    for event in sorted(chosen, key=lambda e: e.completed_ns if e.completed_ns is not None else e.invoked_ns):
        if event.f in MOMENTARY_KINDS and event.outcome != "fail":
            close(event, event.completed_ns, None)
        elif event.f in FAULT_KINDS and event.outcome != "fail":
            open_faults.append((event, set(event.nodes)))
        elif event.f in HEAL_KINDS and event.outcome in ("ok", "info") and event.completed_ns is not None:
            healed = set(event.nodes)
            still_open = []
            for fault, unhealed in open_faults:
                if (
                    event.f == PARTITION_HEAL
                    and fault.f == PARTITION
                    and (not healed or healed & unhealed or not unhealed)
                ):
                    close(fault, event.completed_ns, event.f)
                    continue
                if NODE_FAULT_HEALS.get(fault.f) == event.f:
                    unhealed -= healed
                    if not unhealed:
                        close(fault, event.completed_ns, event.f)
                        continue
                still_open.append((fault, unhealed))
            open_faults = still_open
    for fault, _ in open_faults:
        close(fault, None, None)
    return sorted(windows, key=lambda w: w.start_ns)


def active_intervals(windows: Iterable[FaultWindow], end_ns: int) -> list[tuple[int, int]]:
    """The time some fault was active, as sorted disjoint ``[start, end]`` intervals (an open
    window ends at ``end_ns``, the end of the history)."""
    spans = sorted((w.start_ns, end_ns if w.end_ns is None else max(w.end_ns, w.start_ns)) for w in windows)
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
