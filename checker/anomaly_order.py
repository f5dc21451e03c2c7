"""The anomalies a run reported, causes first: how reports, JUnit and ``tidemark check`` list them.

A run that lost acknowledged writes usually reports a dozen kinds: the loss, and what the loss
brought about (offsets handed out again, consumers reset, the HW going back ...).  Listed
alphabetically, the cause reads after its consequences.  :func:`causes_first` lists them as a
forest instead: the *causes* -- the reported anomalies that no other reported anomaly implies
(:attr:`checker.anomalies.Anomaly.implies`, followed through entries that were not reported) --
errors before warnings, each in registry order, and under each cause its consequences, indented
one level per step.  Each anomaly appears once, under the first cause that reaches it.

:func:`anomaly_phrases` is the one-line form (``lost-write x3 (-> lost-read x1)``), the common
words of ``results.json``'s ``anomalies`` section; names the registry does not know (a
``results.json`` from another version) are listed last, as causes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from checker.anomalies import ANOMALIES, BY_NAME, WARNING

_RANK = {anomaly.name: number for number, anomaly in enumerate(ANOMALIES)}


@dataclasses.dataclass(frozen=True, slots=True)
class Placed:
    """One reported anomaly in causes-first order: ``depth`` 0 is a cause; ``cause`` the cause it is
    listed under (itself for a cause), ``parent`` the anomaly right above it (None for a cause)."""

    name: str
    depth: int
    cause: str
    parent: str | None = None


def _reachable(name: str) -> set[str]:
    """Every anomaly that ``name`` implies, directly or through others."""
    seen: set[str] = set()
    stack = list(BY_NAME[name].implies) if name in BY_NAME else []
    while stack:
        implied = stack.pop()
        if implied not in seen:
            seen.add(implied)
            stack.extend(BY_NAME[implied].implies)
    return seen


def causes_first(reported: Iterable[str], warnings: Iterable[str] = ()) -> list[Placed]:
    """``reported`` as a forest of causes and their consequences, flattened in reading order.

    ``warnings``: the reported names whose severity is ``warning`` in this run (stalled is one
    only under ``--liveness warn``); causes that are errors come first.  Among the reported
    anomalies, A is placed under B when B implies A and no reported C lies between them (B
    implies C, C implies A): the transitive reduction of the implication graph on the run.
    """
    names = sorted(set(reported), key=lambda name: (_RANK.get(name, len(_RANK)), name))
    warned = set(warnings)
    below = {name: _reachable(name) & set(names) for name in names}
    children = {
        name: [
            other
            for other in names
            if other in below[name] and not any(other in below[middle] for middle in below[name])
        ]
        for name in names
    }
    implied = {other for name in names for other in below[name]}
    roots = sorted((name for name in names if name not in implied), key=lambda name: name in warned)
    placed: list[Placed] = []
    shown: set[str] = set()

    def place(name: str, depth: int, cause: str, parent: str | None) -> None:
        if name in shown:
            return
        shown.add(name)
        placed.append(Placed(name, depth, cause, parent))
        for child in children[name]:
            place(child, depth + 1, cause, name)

    for root in roots:
        place(root, 0, root, None)
    return placed


def ordered(anomalies: Mapping[str, Mapping[str, Any]]) -> list[Placed]:
    """The ``anomalies`` section of a ``results.json`` in causes-first order."""
    warnings = [name for name, anomaly in anomalies.items() if anomaly.get("severity") == WARNING]
    return causes_first(anomalies, warnings)


def phrase(name: str, anomaly: Mapping[str, Any]) -> str:
    """``lost-write x3 (expected: acks=1)``, ``unseen x2 [warning]``."""
    note = f" (expected: {anomaly.get('rule')})" if anomaly.get("expected") else ""
    warning = " [warning]" if anomaly.get("severity") == WARNING else ""
    return f"{name} x{anomaly['count']}{note}{warning}"


def anomaly_phrases(results: Mapping[str, Any] | None) -> list[str]:
    """One phrase per cause, its consequences in brackets after an arrow:
    ``lost-write x3 (-> lost-read x1, inconsistent-offsets x2)``."""
    if results is None:
        return []
    anomalies: Mapping[str, Mapping[str, Any]] = results.get("anomalies", {})
    return grouped(anomalies, phrase, "{cause} (-> {consequences})", ", ")


def grouped(
    anomalies: Mapping[str, Mapping[str, Any]],
    say: Callable[[str, Mapping[str, Any]], str],
    form: str,
    joiner: str,
) -> list[str]:
    """Per cause, ``say(name, anomaly)`` of the cause and, through ``form``, of its consequences
    joined by ``joiner`` (``form`` has ``{cause}`` and ``{consequences}``)."""
    groups: dict[str, list[str]] = {}
    for placed in ordered(anomalies):
        groups.setdefault(placed.cause, []).append(say(placed.name, anomalies[placed.name]))
    return [
        form.format(cause=said[0], consequences=joiner.join(said[1:])) if len(said) > 1 else said[0]
        for said in groups.values()
    ]
