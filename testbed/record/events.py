"""Reading the brokers' and the controller's event logs: every intact event, the torn lines, the gaps.

The bundled broker (``broker_impl.events``, the *writer*) appends one JSON line per decision to
``broker-events.jsonl`` / ``controller-events.jsonl``; the harness collects them into the run
directory (``nodes/<node>/``, names in :mod:`testbed.record.rundir`), and this module is their
*reader*: the event log is a contract between the broker and the run record, like the replica
dump (written by ``broker_impl.dump``, read by :mod:`testbed.record.replicas`).  The format is
``docs/events.md``.

Who owns what, since neither side may import the other (``broker_impl`` ships alone in the node
image; the run record imports nothing of Tidemark): the writer owns what a process writes and
where on its node (the file names in ``event.log.dir``, the line format it produces, the
version it stamps on ``start``); the reader owns what a run record accepts -- :data:`FORMAT` and
:data:`SCHEMA_VERSION` here are the format this reader understands, and the run directory's names
are :mod:`testbed.record.rundir`'s.  They coincide because the harness copies the node's log
directory as it is; ``tests/testbed/record/test_events.py`` pins that the reader reads exactly
what the writer writes (names, format, version), so a change on one side fails until the other
follows.

What a crash may leave, and what is damage: every event is one ``write()`` ending in ``\\n``,
never fsynced per event, so a power loss may cut a file anywhere -- the last line may be torn --
and a process restarting on a torn file first ends the torn line with a newline, so a torn line
is the file's last line or the line just before a ``start``.  A failed ``write()`` (a full disk)
skips its ``seq``: a *gap*, after which a half-written line may also sit.  A torn line is an
event cut short (:func:`is_cut_event`: a proper prefix of a JSON object); anything else (a
garbage line, wherever it sits; a cut line where no crash explains it; a ``seq`` that does not
grow; a ``start`` of another format or version) is damage: :class:`EventFormatError` naming
``file:line``.

Pure standard library; reads a whole file at once (event logs are small: a few MB per run).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Final

FORMAT: Final = "tidemark-broker-events"
"""The ``format`` every ``start`` event of a readable file carries."""
SCHEMA_VERSION: Final = 1
"""The ``schema_version`` this reader understands (``docs/events.md`` describes it)."""
START: Final = "start"
"""The kind of every process's first event."""
HEADER_FIELDS: Final = ("ts", "node", "seq", "kind")
"""The fields every event starts with: ints, and ``kind`` a string."""


class EventFormatError(ValueError):
    """An event file damaged in a way no crash explains; the message names ``file:line``."""


@dataclasses.dataclass(frozen=True)
class TornLine:
    """A line that is not an event, explained by a crash or a failed write: the file's last
    line, the line just before a ``start`` (a process restarted after its predecessor's tail
    was torn), or a line after which ``seq`` skips (the event whose write failed half-way)."""

    line: int
    """1-based line number."""
    text: str
    """The line's first 200 characters (bytes that are not UTF-8 replaced)."""


@dataclasses.dataclass(frozen=True)
class EventFile:
    events: list[dict[str, Any]]
    """Every intact event, in file order (= ``seq`` order)."""
    torn: list[TornLine]
    """Lines dropped as torn by a crash or power loss (empty for a file closed cleanly)."""
    gaps: list[tuple[int, int]]
    """``(expected seq, found seq)`` wherever ``seq`` skipped: events lost to failed writes.
    (Events a power loss took are not gaps: the next process continues from the last
    ``seq`` that survived.)"""


def parse_event(line: bytes | str) -> dict[str, Any] | None:
    """The event on ``line``, or None if it is not one (torn, garbage, a header field missing)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    for field in HEADER_FIELDS:
        value = event.get(field)
        if isinstance(value, bool) or not isinstance(value, str if field == "kind" else int):
            return None
    return event


def read_event_file(path: Path | str) -> EventFile:
    """Read an event file, tolerating exactly the damage a crash or power loss causes.

    A line that is not an event is dropped as torn where :class:`TornLine` says a crash or a
    failed write explains it; anywhere else it is an :class:`EventFormatError` naming
    ``file:line``, as is a ``seq`` that does not grow, or a ``start`` of another format or
    schema version.  A last line without its newline that parses is a whole event (no proper
    prefix of a JSON object is one).  ``OSError`` if the file cannot be read.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline: no torn tail
    events: list[dict[str, Any]] = []
    torn: list[TornLine] = []
    gaps: list[tuple[int, int]] = []
    parsed = [parse_event(line) for line in lines]
    previous: int | None = None
    for index, (line, event) in enumerate(zip(lines, parsed, strict=True)):
        number = index + 1
        if event is None:
            if not is_cut_event(line):
                raise EventFormatError(
                    f"{path}:{number}: not an event, and not one cut short by a crash (a garbage line: {line[:60]!r})"
                )
            if index + 1 == len(lines) or _explains_torn_line(parsed[index + 1], previous):
                torn.append(TornLine(number, line[:200].decode("utf-8", "replace")))
                continue
            raise EventFormatError(f"{path}:{number}: not an event (and no crash explains it)")
        if event["kind"] == START and (
            event.get("format") != FORMAT or event.get("schema_version") != SCHEMA_VERSION
        ):
            raise EventFormatError(
                f"{path}:{number}: format {event.get('format')!r} version {event.get('schema_version')!r}, "
                f"expected {FORMAT!r} version {SCHEMA_VERSION}"
            )
        if previous is not None and event["seq"] != previous + 1:
            if event["seq"] <= previous:
                raise EventFormatError(f"{path}:{number}: seq {event['seq']} after {previous}")
            gaps.append((previous + 1, event["seq"]))
        previous = event["seq"]
        events.append(event)
    return EventFile(events, torn, gaps)


_CUT_TAIL = re.compile(r"t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|[-+.eE0-9]*|u[0-9a-fA-F]{0,4}")
"""What may stand where a cut line's JSON stops parsing: part of a literal, a number or a
``\\uXXXX`` escape (the decoder reports those at their start, not at the line's end)."""


def is_cut_event(line: bytes) -> bool:
    """Whether ``line`` can be an event line cut short -- a proper prefix of a JSON object,
    possibly followed by the zero bytes a power loss leaves in a file's unwritten tail -- rather
    than garbage no crash writes (text that is not JSON before its end, invalid UTF-8 inside it,
    a whole JSON value that is no event)."""
    raw = line.rstrip(b"\0")
    if not raw:
        return bool(line)  # zero bytes only: a tail the power loss never wrote
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.reason != "unexpected end of data":
            return False
        text = raw[: error.start].decode("utf-8")  # a character cut in two at the end
    if not text.startswith("{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return (
            error.msg.startswith("Unterminated string") or _CUT_TAIL.fullmatch(text[error.pos :]) is not None
        )
    return False


def _explains_torn_line(following: dict[str, Any] | None, previous: int | None) -> bool:
    """Whether the event after a damaged line shows a crash or a failed write before it."""
    if following is None:
        return False
    return bool(following["kind"] == START or (previous is not None and following["seq"] != previous + 1))


def read_events(path: Path | str) -> list[dict[str, Any]]:
    """The intact events of an event file, in order (see :func:`read_event_file`)."""
    return read_event_file(path).events
