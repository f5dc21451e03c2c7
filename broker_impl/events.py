"""The structured event log: what a broker or the controller decided, one JSON line per event.

Each process appends to one file -- :data:`BROKER_EVENTS_FILE` in a broker's ``event.log.dir``
(default: ``log.dirs``), :data:`CONTROLLER_EVENTS_FILE` in the controller's (default:
``metadata.log.dir``); these two names are the writer's (the run record names the copies the
harness collects, ``testbed.record.rundir``; a test pins that they agree).  It is **evidence, not state**:
nothing ever reads it back to decide anything (only the last sequence number, below), so a lost
or damaged line can never change the broker's behaviour, only what a checker can prove.  Every
kind and field is documented in ``docs/events.md``; this module owns the line format and the
file's durability, the emitters (:mod:`broker_impl.partition`, :mod:`broker_impl.broker`,
:mod:`broker_impl.handlers`, :mod:`broker_impl.controller_events`) own the fields.  The *reader*
is the run record's (``testbed.record.events``): the file is a contract between the broker and
the run record, and this package ships alone in the node image, where nothing reads it.

**Line format.**  One JSON object per line, keys in this order: ``ts`` (the kernel's wall clock
in nanoseconds since the Unix epoch, even under a skewed process clock:
:mod:`broker_impl.real_clock`), ``node`` (the writer's ``node.id``),
``seq`` (this node's sequence number), ``kind``, then the kind's fields.  ``seq`` grows by one per
event and continues across restarts (a new process reads the last intact line's ``seq``), so
within one file ``seq`` is strictly increasing and orders events exactly even where ``ts`` ties
or the wall clock stepped back.  The first event of every process is ``start``, which carries
:data:`FORMAT` and :data:`SCHEMA_VERSION`.

**Durability.**  Each event is one ``os.write`` on an ``O_APPEND`` descriptor, made before the
call that decided it returns: it is in the operating system's page cache at once, so a clean
shutdown *or a SIGKILL* of the process loses no event that was emitted (a ``write`` of a few
hundred bytes to a regular file is not torn by a signal).  It is **not** fsynced per event
(measured: the per-event ``write`` costs about 1 us, an fsync milliseconds); :meth:`EventLog.close`
fsyncs once, at a clean shutdown.  So a power loss of the host may cut the file's tail anywhere,
even inside a line: a reader must treat the file as possibly truncated at its end, and a torn
last line is detectable because every complete line ends with a newline and parses as an event.
When a process starts on a file whose tail was torn, it first ends the torn line with a newline,
so the damage stays confined to that line and the next line is that process's ``start``.  (The
harness keeps the file beside the process logs, outside the power-loss filesystem, so its
*simulated* power losses do not cut it.)  If a ``write`` fails (a full disk), the event is lost,
logged, and its ``seq`` skipped: a gap in ``seq`` within one process is a lost event.

The writer is not thread-safe: each process calls it from its one asyncio loop.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Final

from broker_impl.real_clock import real_time_ns

logger = logging.getLogger(__name__)

BROKER_EVENTS_FILE: Final = "broker-events.jsonl"
"""A broker's event log, in its ``event.log.dir`` (default ``log.dirs``)."""
CONTROLLER_EVENTS_FILE: Final = "controller-events.jsonl"
"""The controller's event log, in its ``event.log.dir`` (default ``metadata.log.dir``)."""
FORMAT: Final = "tidemark-broker-events"
"""The ``format`` this writer stamps on every ``start``."""
SCHEMA_VERSION: Final = 1
"""The ``schema_version`` this writer stamps on every ``start`` (``docs/events.md``)."""
START: Final = "start"
"""The kind of every process's first event."""
HEADER_FIELDS: Final = ("ts", "node", "seq", "kind")

_TAIL_CHUNK = 1 << 16
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class EventLog:
    """Appends events to one file (see the module docstring), or does nothing when disabled.

    ``emit`` never raises for an I/O problem: the broker under test must behave the same with
    its event log on or off, so a failed write is logged and counted in :attr:`lost`.
    """

    def __init__(self, path: Path | None, node_id: int) -> None:
        self.path = path
        self.node_id = node_id
        self.enabled = path is not None
        self.lost = 0
        self._descriptor = -1
        self._sequence = 0
        self._needs_newline = False
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            last, torn = _last_sequence(path)
            self._sequence = last + 1
            self._needs_newline = torn

    @classmethod
    def disabled(cls, node_id: int = -1) -> EventLog:
        """An event log that writes nothing (``event.log.enable=false``, and unit tests)."""
        return cls(None, node_id)

    @property
    def next_sequence(self) -> int:
        """The ``seq`` the next event gets."""
        return self._sequence

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event now (see the module docstring for what survives what)."""
        if not self.enabled:
            return
        sequence = self._sequence
        self._sequence += 1
        # The header by hand, the fields by the C encoder: a third cheaper than one merged dict.
        body = _encode(fields)[1:] if fields else "}"
        separator = "," if fields else ""
        line = f'{{"ts":{real_time_ns()},"node":{self.node_id},"seq":{sequence},"kind":{_encode(kind)}{separator}{body}\n'
        data = line.encode()
        if self._needs_newline:
            data = b"\n" + data
        try:
            while data:
                written = os.write(self._descriptor, data)
                data = data[written:]
        except OSError as error:
            self.lost += 1
            self._needs_newline = True  # a partial line must not swallow the next event
            logger.error("event log %s: event %d (%s) lost: %s", self.path, sequence, kind, error)
        else:
            self._needs_newline = False

    def close(self) -> None:
        """fsync and close (a clean shutdown: its events then survive a later power loss)."""
        if self._descriptor < 0:
            return
        try:
            os.fsync(self._descriptor)
        except OSError as error:
            logger.error("event log %s: fsync failed: %s", self.path, error)
        finally:
            os.close(self._descriptor)
            self._descriptor = -1
            self.enabled = False


NO_EVENTS: Final = EventLog.disabled()
"""A shared disabled event log: the default of whatever can run without one (unit tests)."""


def open_event_log(
    settings: dict[str, Any], default_directory: str, file_name: str, node_id: int
) -> EventLog:
    """The event log a process configured with ``settings`` writes: ``event.log.enable``
    switches it, ``event.log.dir`` (empty: ``default_directory``) says where."""
    if not settings["event.log.enable"]:
        return EventLog.disabled(node_id)
    directory = settings["event.log.dir"] or default_directory
    return EventLog(Path(directory) / file_name, node_id)


def _last_sequence(path: Path) -> tuple[int, bool]:
    """(``seq`` of the last intact event, or -1; whether the file ends inside a line)."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        if size == 0:
            return -1, False
        file.seek(size - 1)
        torn = file.read(1) != b"\n"
        chunk = _TAIL_CHUNK
        while True:
            start = max(0, size - chunk)
            file.seek(start)
            lines = file.read(size - start).split(b"\n")
            if start > 0:
                lines = lines[1:]  # the first piece may be the end of a longer line
            for line in reversed(lines):
                event = _parse(line)
                if event is not None:
                    return int(event["seq"]), torn
            if start == 0:
                return -1, torn
            chunk *= 4


def _parse(line: bytes | str) -> dict[str, Any] | None:
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
