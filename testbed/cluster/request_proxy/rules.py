"""What the request proxy (:mod:`testbed.cluster.request_proxy`) reads and decides, without I/O.

A Kafka request frame is a 4-byte big-endian size, then the request header: ``api_key`` int16,
``api_version`` int16, ``correlation_id`` int32, ``client_id`` a nullable int16-length string --
the same in every header version (v2 only adds tagged fields *after* the client id), so the proxy
reads these four fields of any request of any version without knowing its body.  A response
frame starts with the size and the correlation id; the proxy passes responses back untouched and
reads only that id (to swallow the answer of a duplicate).  Of one request it reads the body too:
an ``EndTxn``'s ``Committed`` flag (:attr:`RequestHeader.ending`), so that a rule may act on a
commit and let an abort pass -- KAFKA-17754 needs a late *commit*: a late abort that ends the next
transaction shows nothing, since the client then ends it as it meant to anyway.

A :class:`Rule` says what the proxy does to matching requests: ``hold`` (keep them until
released), ``drop`` (close the client's connection instead of forwarding), ``delay`` (forward
after ``ms``), ``duplicate`` (forward twice, swallow the second answer), ``reset`` (forward, then
reset the client's connection before the answer: the broker acts, the client never learns) or
``observe`` (forward, and log it: which requests of which versions a client sends, for the run's
events).  It matches by API key (a set, by number or name, :data:`API_NAMES`; or ``"*"``, every
request), optionally by a substring of the client id and, for ``EndTxn`` alone, by its ending
(``"ends": "commit"`` or ``"abort"``), and acts on at most ``count`` requests (None: every one) --
after that it is spent and removed.
:class:`RuleBook` keeps the rules in the order they were added: the first live match wins --
except that a ``delay`` is the path's latency, not a verdict on the request: every matching
delay adds its milliseconds (:meth:`RuleBook.latency`) and the request then meets the other
rules, so a slow path can also duplicate or reset.  A delay with a ``jitter`` waits a different
time for each request, drawn uniformly from ``ms - jitter .. ms + jitter``: a connection's requests
still reach the broker in order (TCP and Kafka keep a connection's order, and a proxy that broke
it would test nothing a network can do), but requests on *different* connections -- a producer's
and a follower's Fetch, a retry on a new connection and the copy on the old one -- overtake one
another: the reordering a network can do to a Kafka cluster.  The draws come from the rule
book's own random generator (seeded in tests); they are not reproducible from a run's seed
anyway, since when each request arrives is not.

Control lines (:func:`parse_command`) are JSON objects, one per line, e.g.
``{"op": "hold", "api_key": "Produce", "client": "txn-1", "count": 1}``,
``{"op": "hold", "api_key": "Produce", "disconnect": true}`` (hold it and close the client's
connection, so the client retries on a new one at once), ``{"op": "hold", "api_key": "EndTxn",
"ends": "commit", "count": 1}`` (the next commit; aborts pass), ``{"op": "release", "mode":
"new-connection"}``, ``{"op": "clear"}``, ``{"op": "status"}``.
A bad line raises :class:`ControlError` with a one-line message naming the field.

This module and the proxy use the standard library only, so that they run on a node next to a
broker (as ``python -m testbed.cluster.request_proxy``) with nothing else installed.
"""

from __future__ import annotations

import dataclasses
import json
import random
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

API_NAMES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "Produce": 0,
        "Fetch": 1,
        "ListOffsets": 2,
        "Metadata": 3,
        "OffsetCommit": 8,
        "OffsetFetch": 9,
        "FindCoordinator": 10,
        "JoinGroup": 11,
        "Heartbeat": 12,
        "LeaveGroup": 13,
        "SyncGroup": 14,
        "ApiVersions": 18,
        "InitProducerId": 22,
        "AddPartitionsToTxn": 24,
        "AddOffsetsToTxn": 25,
        "EndTxn": 26,
        "WriteTxnMarkers": 27,
        "TxnOffsetCommit": 28,
    }
)
"""The request names a rule may use instead of the API key number (Kafka's spelling)."""

END_TXN: Final = API_NAMES["EndTxn"]
_END_TXN_FIRST_FLEXIBLE: Final = 3
"""EndTxn v3 and later are flexible versions: request header v2 (tagged fields after the client
id) and a compact transactional id (unsigned varint length + 1)."""
Ending = Literal["commit", "abort"]
ENDINGS: Final[tuple[Ending, ...]] = ("commit", "abort")

Action = Literal["hold", "drop", "delay", "duplicate", "reset", "observe"]
ACTIONS: Final[tuple[Action, ...]] = ("hold", "drop", "delay", "duplicate", "reset", "observe")
EVERY_REQUEST: Final = "*"
"""The ``api_key`` of a rule that matches every request, whatever its key (a slow link for clients)."""
ReleaseMode = Literal["new-connection", "original"]
RELEASE_MODES: Final[tuple[ReleaseMode, ...]] = ("new-connection", "original")
"""``new-connection``: the held requests go upstream on a fresh connection whose answers go
nowhere (the client moved on -- KAFKA-17754's late request); ``original``: each on the
connection it came on, its answer to its client (a plain slow network)."""

_HEADER: Final = struct.Struct(">hhih")
_SIZE: Final = struct.Struct(">i")


class FrameError(ValueError):
    """Bytes that cannot be a Kafka request or response frame; the message says why."""


class ControlError(ValueError):
    """A control line the proxy cannot obey; the message (one line) names the field."""


@dataclasses.dataclass(frozen=True)
class RequestHeader:
    """The four header fields every request version starts with, and an EndTxn's ending."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    ending: Ending | None = None
    """An EndTxn's ``Committed`` field as ``"commit"`` or ``"abort"``; None for every other
    request, and for an EndTxn whose body is too short to say (the broker refuses that itself)."""


def frame_size(prefix: bytes, limit: int = 100 * 1024 * 1024) -> int:
    """The payload size a 4-byte frame prefix announces; FrameError outside ``0..limit``."""
    if len(prefix) != _SIZE.size:
        raise FrameError(f"frame size prefix of {len(prefix)} bytes, expected 4")
    size: int = _SIZE.unpack(prefix)[0]
    if not 0 <= size <= limit:
        raise FrameError(f"frame size {size} out of range 0..{limit}")
    return size


def parse_request_header(payload: bytes) -> RequestHeader:
    """The header of a request frame's payload (the bytes after the size); FrameError if short."""
    if len(payload) < _HEADER.size:
        raise FrameError(f"request of {len(payload)} bytes is shorter than a header ({_HEADER.size})")
    api_key, api_version, correlation_id, length = _HEADER.unpack_from(payload, 0)
    client_id = None
    end = _HEADER.size + max(length, 0)
    if length >= 0:
        if len(payload) < end:
            raise FrameError(f"client id of {length} bytes runs past the {len(payload)}-byte request")
        client_id = payload[_HEADER.size : end].decode("utf-8", errors="replace")
    ending = _end_txn_ending(payload, end, api_version) if api_key == END_TXN else None
    return RequestHeader(api_key, api_version, correlation_id, client_id, ending)


def _unsigned_varint(payload: bytes, at: int) -> tuple[int, int]:
    """The unsigned varint at ``at`` and the offset after it; IndexError when the bytes run out."""
    value = shift = 0
    while shift <= 28:
        byte = payload[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    raise IndexError("unsigned varint longer than 5 bytes")


def _end_txn_ending(payload: bytes, at: int, version: int) -> Ending | None:
    """The ``Committed`` field of the EndTxn body after the client id at ``at`` (its transactional
    id, producer id int64 and epoch int16 come first); None when the bytes run short."""
    try:
        if version >= _END_TXN_FIRST_FLEXIBLE:
            tags, at = _unsigned_varint(payload, at)  # the header's tagged fields
            for _ in range(tags):
                _, at = _unsigned_varint(payload, at)
                size, at = _unsigned_varint(payload, at)
                at += size
            length_plus_one, at = _unsigned_varint(payload, at)
            at += max(length_plus_one - 1, 0)
        else:
            (length,) = struct.unpack_from(">h", payload, at)
            at += 2 + max(length, 0)
        committed = payload[at + 8 + 2]
    except (IndexError, struct.error):
        return None
    return "commit" if committed else "abort"


def response_correlation_id(payload: bytes) -> int:
    """The correlation id a response frame's payload starts with; FrameError if short."""
    if len(payload) < 4:
        raise FrameError(f"response of {len(payload)} bytes has no correlation id")
    correlation_id: int = _SIZE.unpack_from(payload, 0)[0]
    return correlation_id


def api_key_of(value: object) -> int:
    """An API key from a number or a name of :data:`API_NAMES`; ControlError otherwise."""
    if isinstance(value, bool):
        raise ControlError(f"api_key {value!r}: expected a number or a request name")
    if isinstance(value, int):
        if not 0 <= value <= 32767:
            raise ControlError(f"api_key {value}: out of range 0..32767")
        return value
    if isinstance(value, str) and value in API_NAMES:
        return API_NAMES[value]
    raise ControlError(
        f"api_key {value!r}: expected a number or one of {', '.join(API_NAMES)} ({EVERY_REQUEST!r} alone: every request)"
    )


@dataclasses.dataclass
class Rule:
    """What to do with matching requests; ``remaining`` counts down (None: no limit)."""

    rule_id: int
    action: Action
    api_keys: frozenset[int] | None
    """None: every request (:data:`EVERY_REQUEST`)."""
    client: str | None = None
    remaining: int | None = None
    delay_ms: int = 0
    disconnect: bool = False
    """hold only: close the client's connection too, so it retries elsewhere at once."""
    jitter_ms: int = 0
    """delay only: each request waits ``delay_ms`` give or take up to this (uniformly drawn)."""
    ends: Ending | None = None
    """A rule on EndTxn alone: only the requests that end their transaction so."""

    def matches(self, header: RequestHeader) -> bool:
        if (self.api_keys is not None and header.api_key not in self.api_keys) or self.remaining == 0:
            return False
        if self.ends is not None and header.ending != self.ends:
            return False
        return self.client is None or (header.client_id is not None and self.client in header.client_id)

    def describe(self) -> dict[str, Any]:
        """The rule as the control channel and the log show it."""
        return {
            "rule": self.rule_id,
            "op": self.action,
            "api_keys": EVERY_REQUEST if self.api_keys is None else sorted(self.api_keys),
            "client": self.client,
            "remaining": self.remaining,
            **({"ms": self.delay_ms} if self.action == "delay" else {}),
            **({"jitter": self.jitter_ms} if self.jitter_ms else {}),
            **({"disconnect": True} if self.disconnect else {}),
            **({"ends": self.ends} if self.ends else {}),
        }


class RuleBook:
    """The live rules, first added first asked; a rule whose count is used up is removed."""

    def __init__(self, draws: random.Random | None = None) -> None:
        self.rules: list[Rule] = []
        self._next_id = 1
        self._draws = draws or random.Random()

    def add(
        self,
        action: Action,
        api_keys: frozenset[int] | None,
        client: str | None,
        count: int | None,
        delay_ms: int,
        disconnect: bool = False,
        jitter_ms: int = 0,
        ends: Ending | None = None,
    ) -> Rule:
        rule = Rule(self._next_id, action, api_keys, client, count, delay_ms, disconnect, jitter_ms, ends)
        self._next_id += 1
        self.rules.append(rule)
        return rule

    def take(self, header: RequestHeader) -> Rule | None:
        """The first rule but a delay matching ``header``, charged one use; None when none matches."""
        for rule in self.rules:
            if rule.action != "delay" and rule.matches(header):
                self._charge(rule)
                return rule
        return None

    def latency(self, header: RequestHeader) -> tuple[int, list[Rule]]:
        """The milliseconds ``header`` waits -- the sum of every matching delay, each charged one
        use, a jittered one drawn anew for this request -- and those delays."""
        delays = [rule for rule in self.rules if rule.action == "delay" and rule.matches(header)]
        waited = 0
        for rule in delays:
            self._charge(rule)
            jitter = rule.jitter_ms
            waited += rule.delay_ms + (self._draws.randint(-jitter, jitter) if jitter else 0)
        return waited, delays

    def _charge(self, rule: Rule) -> None:
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining == 0:
                self.rules.remove(rule)

    def clear(self) -> int:
        """Remove every rule; returns how many there were."""
        count = len(self.rules)
        self.rules.clear()
        return count


@dataclasses.dataclass(frozen=True)
class Command:
    """One parsed control line: ``op`` and its checked arguments."""

    op: Literal["hold", "drop", "delay", "duplicate", "reset", "observe", "release", "clear", "status"]
    api_keys: frozenset[int] | None = frozenset()
    """None: every request."""
    client: str | None = None
    count: int | None = None
    delay_ms: int = 0
    disconnect: bool = False
    mode: ReleaseMode = "new-connection"
    jitter_ms: int = 0
    rule_id: int | None = None
    ends: Ending | None = None


def _optional_int(fields: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ControlError(f"{name} {value!r}: expected an integer >= {minimum}")
    return value


def _rule_command(op: Action, fields: Mapping[str, Any]) -> Command:
    keys = fields.get("api_key")
    if keys is None:
        raise ControlError(
            f"{op}: api_key is required (a number, a name, a list of them, or {EVERY_REQUEST!r})"
        )
    api_keys: frozenset[int] | None = None
    if keys != EVERY_REQUEST:
        api_keys = frozenset(api_key_of(key) for key in (keys if isinstance(keys, list) else [keys]))
        if not api_keys:
            raise ControlError(f"{op}: api_key is an empty list")
    client = fields.get("client")
    if client is not None and (not isinstance(client, str) or not client):
        raise ControlError(f"client {client!r}: expected a non-empty string (a substring of the client id)")
    delay_ms = _optional_int(fields, "ms", 0)
    if op == "delay" and delay_ms is None:
        raise ControlError("delay: ms is required")
    disconnect = fields.get("disconnect", False)
    if not isinstance(disconnect, bool) or (disconnect and op != "hold"):
        raise ControlError(f"disconnect {disconnect!r}: true or false, and only for hold")
    jitter_ms = _optional_int(fields, "jitter", 0) or 0
    if jitter_ms and (op != "delay" or jitter_ms > (delay_ms or 0)):
        raise ControlError(
            f"jitter {jitter_ms}: only for delay, and at most its ms ({delay_ms or 0}): no wait is negative"
        )
    ends = fields.get("ends")
    if ends is not None and (ends not in ENDINGS or api_keys != frozenset({END_TXN})):
        raise ControlError(f"ends {ends!r}: 'commit' or 'abort', and only with api_key EndTxn alone")
    count = _optional_int(fields, "count", 1)
    return Command(op, api_keys, client, count, delay_ms or 0, disconnect, jitter_ms=jitter_ms, ends=ends)


def parse_command(line: str) -> Command:
    """One control line as a :class:`Command`; ControlError (one line) for anything else."""
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as error:
        raise ControlError(f"not JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(fields, dict):
        raise ControlError(f"expected a JSON object, got {type(fields).__name__}")
    op = fields.get("op")
    known = {"op", "api_key", "client", "count", "ms", "jitter", "disconnect", "mode", "rule", "ends"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ControlError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    if op in ACTIONS:
        return _rule_command(op, fields)
    if op == "release":
        mode = fields.get("mode", "new-connection")
        if mode not in RELEASE_MODES:
            raise ControlError(f"mode {mode!r}: expected one of {', '.join(RELEASE_MODES)}")
        return Command("release", mode=mode, rule_id=_optional_int(fields, "rule", 1))
    if op == "clear":
        mode = fields.get("mode", "new-connection")
        if mode not in RELEASE_MODES:
            raise ControlError(f"mode {mode!r}: expected one of {', '.join(RELEASE_MODES)}")
        return Command("clear", mode=mode)
    if op == "status":
        return Command("status")
    raise ControlError(f"op {op!r}: expected one of {', '.join((*ACTIONS, 'release', 'clear', 'status'))}")
