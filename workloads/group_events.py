"""Group consumers (``subscribe``) behind one interface: what a poll returned, in the order it happened.

A group consumer's poll does more than return records: inside it the client joins the group,
runs the rebalance callbacks (partitions revoked, partitions assigned) and the callbacks of
earlier asynchronous commits.  The workload records each of those as an op, and the op model
needs them in the order they happened -- an ``assign`` must be recorded before the first poll
of the records that assignment delivered.  So a :class:`GroupConsumerClient` returns a list of
:data:`Step` s in order: :class:`~workloads.clients.Received` records interleaved with
:class:`Assigned`, :class:`Revoked` and :class:`CommitDone` events.  The callbacks only note
events (they may run on a client's I/O thread); the workload records them after the call
returned, from its own thread, so one thread records everything of one consumer.

Commit outcomes follow the op model (``fail`` only when the commit certainly did not take
effect): :func:`commit_outcome` is the one rule for both libraries.

Implementations: :mod:`workloads.group_kafka_python` and :mod:`workloads.group_confluent`, which
import this module; :func:`workloads.group_fleet.make_group_consumer` picks one.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from .clients import Received

CommitMode = Literal["sync", "async", "auto"]
Outcome = Literal["ok", "fail", "info"]
"""A completion's type: the op model's three outcomes."""
COMMIT_MODES: tuple[str, ...] = ("sync", "async", "auto")
CONSUME_VIA: tuple[str, ...] = ("assign", "subscribe")

SESSION_TIMEOUT_MS = 10000
"""Group session of every member: at least the bundled broker's ``group.min.session.timeout.ms``
(6 s), short enough that a member the coordinator lost is replaced within a test."""
HEARTBEAT_INTERVAL_MS = 1000
AUTO_COMMIT_INTERVAL_MS = 1000
"""``--commit auto``: how often the client commits by itself (both clients' default is 5 s; 1 s
makes a run's auto commits many)."""


def max_poll_interval_ms(request_timeout: float) -> int:
    """``max.poll.interval.ms`` (also the rebalance timeout both clients send in JoinGroup).

    The workload's loop polls at least every 0.5 s plus one commit (at most ``request_timeout``),
    so 2 x that + 2 s never fires for a live member; a stalled one (consumer churn) loses its
    partitions after it -- 10 s at least, as the session, so a stall outlasts a heartbeat gap.
    """
    return int(max(10.0, 2 * request_timeout + 2.0) * 1000)


def member_config(group: str, commit: CommitMode, request_timeout: float, isolation: str) -> dict[str, Any]:
    """How every member of the run's group is configured, in the Kafka property names both
    libraries take (librdkafka as they are, kafka-python with ``_`` for ``.``).

    Offsets from the earliest, the workload's isolation level, auto commits only in the
    ``auto`` mode, the group timings above (``docs/consumer-groups.md``: "either way"), and
    reconnect attempts at most 0.5 s apart, so a member is back soon after a fault heals.  Each
    adapter adds what only its library has (the address, the request timeout's name, logging).
    """
    return {
        "group.id": group,
        "enable.auto.commit": commit == "auto",
        "auto.commit.interval.ms": AUTO_COMMIT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "max.poll.interval.ms": max_poll_interval_ms(request_timeout),
        "reconnect.backoff.max.ms": 500,
    }


def client_timeout_ms(request_timeout: float) -> int:
    """A member's network request timeout (librdkafka's ``socket.timeout.ms``, kafka-python's
    ``request_timeout_ms``: the two libraries name it differently): twice the workload's request
    timeout, at least 10 s."""
    return max(10000, int(request_timeout * 2000))


@dataclasses.dataclass(frozen=True, slots=True)
class Assigned:
    """The rebalance callback handed this member ``partitions`` (the whole new assignment)."""

    partitions: tuple[int, ...]
    generation: int | None
    """The group generation the assignment belongs to, when the client exposes it."""
    member_id: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Revoked:
    """The rebalance callback took ``partitions`` away; ``lost``: the member had already been
    dropped from the group (kafka-python ``on_partitions_lost``, librdkafka ``on_lost``)."""

    partitions: tuple[int, ...]
    lost: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class CommitDone:
    """The answer to the asynchronous commit :meth:`GroupConsumerClient.commit_async` sent as ``token``."""

    token: int
    outcome: Outcome
    error: str | None = None


GroupEvent = Assigned | Revoked | CommitDone
Step = Received | GroupEvent

_WIRE_TAGS: dict[type, str] = {
    Received: "record",
    Assigned: "assigned",
    Revoked: "revoked",
    CommitDone: "commit-done",
}
_WIRE_CLASSES: dict[str, type] = {tag: cls for cls, tag in _WIRE_TAGS.items()}


def step_to_wire(step: Step) -> dict[str, Any]:
    """``step`` as one JSON object, ``{"step": <tag>, <its fields>}``: how a client in a process of
    its own (:mod:`workloads.client_child`) hands records and group events to the workload."""
    return {"step": _WIRE_TAGS[type(step)], **dataclasses.asdict(step)}


def step_from_wire(item: Any) -> Step:
    """The step :func:`step_to_wire` made; ValueError naming the item when it is none."""
    if not isinstance(item, dict) or item.get("step") not in _WIRE_CLASSES:
        raise ValueError(f"not a record or group event: {item!r}")
    tag = str(item["step"])
    fields = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in item.items()
        if name != "step"
    }
    try:
        step: Step = _WIRE_CLASSES[tag](**fields)
    except TypeError as error:
        raise ValueError(f"bad {tag} {item!r}: {error}") from None
    return step


def partitions_of(topic_partitions: Iterable[Any]) -> tuple[int, ...]:
    """The partition numbers of a rebalance callback's topic-partitions (either library's
    ``TopicPartition``: the run has one topic), sorted: the form :class:`Assigned` and
    :class:`Revoked` hold."""
    return tuple(sorted(tp.partition for tp in topic_partitions))


class NotedEvents:
    """The events a client's callbacks noted and the workload has not taken yet, in order.

    Thread-safe: a callback may run on a client's I/O thread (kafka-python) while the member's
    thread takes the events, and nothing noted is lost or taken twice.
    """

    def __init__(self) -> None:
        self._events: list[Step] = []
        self._lock = threading.Lock()

    def note(self, event: GroupEvent) -> None:
        with self._lock:
            self._events.append(event)

    def take(self) -> list[Step]:
        """Every event noted since the last take, oldest first."""
        with self._lock:
            events, self._events = self._events, []
        return events


class GroupConsumerClient(Protocol):
    """One member of the run's consumer group, subscribed to the topic (see the module docstring)."""

    def poll(self, timeout: float) -> list[Step]:
        """Records and events in the order they happened; raises when the client failed."""
        ...

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        """Commit ``{partition: next offset}`` and wait at most ``timeout``: ``(outcome, error)``
        with outcome ``ok``/``fail``/``info``.  ``info`` also when no answer came in time."""
        ...

    def commit_in_flight(self) -> bool:
        """A synchronous commit whose wait timed out is still unanswered: another would queue
        behind it, so the workload skips committing until it is answered."""
        ...

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        """Send a commit without waiting: None, and its answer is a :class:`CommitDone` of
        ``token`` among the steps of a later :meth:`poll` (or of :meth:`close`); or, when the
        client refused it at once, ``(outcome, error)`` as :meth:`commit_sync` gives them."""
        ...

    def close(self) -> list[Step]:
        """Close the client -- it leaves the group (LeaveGroup); neither library can close a
        dynamic member without leaving -- and return the events its close produced."""
        ...


def commit_outcome(error_code: int | None, error_name: str | None) -> Outcome:
    """The op type of a commit answered with Kafka error ``error_code`` (None: no error).

    ``fail`` for answers that say the coordinator refused the commit before writing it: the
    member's generation or membership is stale (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID), the coordinator is still loading, the commit is
    malformed or not authorised -- and the client-side refusals named in ``error_name``
    (kafka-python's CommitFailedError: not in an active group).  Everything else -- a timeout,
    a lost connection, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT (the
    bundled coordinator appended the commit and the HW did not pass it in time: it may still
    become committed) -- is ``info``: the commit may have been written.
    """
    if error_code is None and error_name is None:
        return "ok"
    if error_code in DEFINITE_COMMIT_ERRORS or error_name in DEFINITE_COMMIT_ERROR_NAMES:
        return "fail"
    return "info"


DEFINITE_COMMIT_ERRORS: frozenset[int] = frozenset(
    {
        12,  # OFFSET_METADATA_TOO_LARGE
        14,  # COORDINATOR_LOAD_IN_PROGRESS
        22,  # ILLEGAL_GENERATION
        25,  # UNKNOWN_MEMBER_ID
        27,  # REBALANCE_IN_PROGRESS
        28,  # INVALID_COMMIT_OFFSET_SIZE
        29,  # TOPIC_AUTHORIZATION_FAILED
        30,  # GROUP_AUTHORIZATION_FAILED
        82,  # FENCED_INSTANCE_ID
        -168,  # librdkafka _NO_OFFSET: nothing to commit, nothing sent
    }
)
"""Kafka (and librdkafka local) error codes after which a commit certainly was not written."""
DEFINITE_COMMIT_ERROR_NAMES: frozenset[str] = frozenset({"CommitFailedError", "IllegalStateError"})
"""kafka-python exceptions raised before anything was sent, or wrapping a definite answer."""


def librdkafka_generation(metadata: bytes) -> tuple[int | None, str | None]:
    """The generation id and member id in librdkafka's serialised consumer group metadata.

    confluent-kafka's ``Consumer.consumer_group_metadata()`` returns librdkafka's
    ``rd_kafka_consumer_group_metadata_write`` output: the magic ``CGMDv2:``, the generation id
    (int32, host byte order), then the group id and the member id as NUL-terminated strings.  The
    format is librdkafka's, not a public contract: anything else gives ``(None, None)``.
    """
    magic = b"CGMDv2:"
    if not metadata.startswith(magic) or len(metadata) < len(magic) + 4:
        return None, None
    (generation,) = struct.unpack_from("=i", metadata, len(magic))
    strings = metadata[len(magic) + 4 :].split(b"\0")
    if len(strings) < 2:
        return None, None
    member = strings[1].decode("utf-8", errors="replace")
    return (generation if generation >= 0 else None), (member or None)
