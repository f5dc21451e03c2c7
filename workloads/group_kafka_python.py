"""kafka-python as a group consumer: ``KafkaConsumer(group_id=...)`` subscribed to the topic.

What the library does that shapes this module (kafka-python 3.0):

* Rebalance callbacks run on the client's I/O thread, inside the caller's ``poll()`` (the join
  is driven from there) or ``close()``, before the records of that poll are fetched: so the
  events a callback notes come, in :meth:`KafkaPythonGroupConsumer.poll`'s steps, before the
  poll's records.  The first join calls ``on_partitions_revoked`` with no partitions.
* The generation: ``KafkaConsumer.group_metadata()`` (public, KIP-447) holds the generation id
  and member id the member joined with; read inside ``on_partitions_assigned`` it is the
  generation of that assignment (the coordinator lock is not held while listeners run).
* ``commit()`` retries retriable errors (REQUEST_TIMED_OUT, NOT_COORDINATOR, a lost connection)
  until its timeout, so a definite error at the end may follow an earlier attempt that was
  written.  ``commit_async()`` sends exactly one request: both commit modes use it, so a
  ``fail`` here means that one request was refused.  Its callback only runs when the
  application calls into the consumer (``poll``, ``commit``); a synchronous commit therefore
  waits for the request's future and then lets ``commit({})`` -- which sends nothing --
  dispatch the callback.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata

from .clients import Received, _text
from .group_events import (
    Assigned,
    CommitDone,
    CommitMode,
    NotedEvents,
    Outcome,
    Revoked,
    Step,
    client_timeout_ms,
    commit_outcome,
    member_config,
    partitions_of,
)

DISPATCH_INTERVAL = 0.02
"""Seconds between attempts to dispatch a synchronous commit's callback while its request is
unanswered -- a wait on a condition with a deadline, not a pause."""


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _outcome(error: BaseException) -> tuple[Outcome, str]:
    code = getattr(error, "errno", None)
    return commit_outcome(code if isinstance(code, int) else -1, type(error).__name__), _error_text(error)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Notes rebalance callbacks as events (they run on the client's I/O thread)."""

    def __init__(self, owner: KafkaPythonGroupConsumer) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._owner.events.note(Revoked(partitions_of(revoked)))

    def on_partitions_lost(self, lost: Any) -> None:
        self._owner.events.note(Revoked(partitions_of(lost), lost=True))

    def on_partitions_assigned(self, assigned: Any) -> None:
        generation: int | None = None
        member: str | None = None
        try:
            metadata = self._owner.consumer.group_metadata()
            generation = int(metadata.generation_id) if metadata.generation_id >= 0 else None
            member = str(metadata.member_id) or None
        except Exception:  # recorded as unknown, never a reason to break the rebalance
            pass
        self._owner.events.note(Assigned(partitions_of(assigned), generation, member))


class KafkaPythonGroupConsumer:
    """A :class:`~workloads.group_events.GroupConsumerClient` on kafka-python."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        commit: CommitMode,
        request_timeout: float,
        isolation: str,
    ) -> None:
        self.topic = topic
        self.events = NotedEvents()
        self._unanswered: object | None = None  # the future of a synchronous commit given up on
        config = member_config(group, commit, request_timeout, isolation)
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            **{name.replace(".", "_"): value for name, value in config.items()},
            request_timeout_ms=client_timeout_ms(request_timeout),
        )
        self.consumer.subscribe([topic], listener=_Listener(self))

    def poll(self, timeout: float) -> list[Step]:
        batches = self.consumer.poll(timeout_ms=int(timeout * 1000))
        records: list[Step] = [
            Received(message.partition, message.offset, _text(message.key), _text(message.value))
            for messages in batches.values()
            for message in messages
        ]
        return self.events.take() + records

    def _offsets(self, offsets: Mapping[int, int]) -> dict[Any, Any]:
        return {
            TopicPartition(self.topic, partition): OffsetAndMetadata(offset, "", -1)
            for partition, offset in offsets.items()
        }

    def commit_in_flight(self) -> bool:
        future = self._unanswered
        if future is not None and getattr(future, "is_done", True):
            self._unanswered = None
        return self._unanswered is not None

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        def answered(_offsets: Any, response: Any) -> None:
            if isinstance(response, BaseException):
                outcome, text = _outcome(response)
                self.events.note(CommitDone(token, outcome, text))
            else:
                self.events.note(CommitDone(token, "ok"))

        try:
            self.consumer.commit_async(self._offsets(offsets), callback=answered)
        except Exception as error:  # refused before sending (e.g. IllegalStateError)
            return _outcome(error)
        return None

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        result: list[tuple[Outcome, str | None]] = []

        def answered(_offsets: Any, response: Any) -> None:
            result.append(_outcome(response) if isinstance(response, BaseException) else ("ok", None))

        try:
            future = self.consumer.commit_async(self._offsets(offsets), callback=answered)
        except Exception as error:  # refused before sending (e.g. IllegalStateError)
            return _outcome(error)
        deadline = time.monotonic() + timeout
        answered_event = threading.Event()
        future.add_both(lambda _result: answered_event.set())
        while not result and time.monotonic() < deadline:
            answered_event.wait(min(DISPATCH_INTERVAL, max(0.0, deadline - time.monotonic())))
            try:
                self.consumer.commit({})  # sends nothing; runs the completed commits' callbacks
            except Exception as error:
                return "info", f"dispatching the commit's answer failed: {_error_text(error)}"
        if not result:
            self._unanswered = future
            return "info", f"no answer within {timeout:g} s"
        return result[0]

    def close(self) -> list[Step]:
        with contextlib.suppress(Exception):  # nothing to dispatch, or a broken client: close anyway
            self.consumer.commit({})  # the callbacks of answered asynchronous commits
        with contextlib.suppress(Exception):  # a close that fails leaves nothing more to record
            self.consumer.close(autocommit=True, timeout_ms=5000)
        return self.events.take()
