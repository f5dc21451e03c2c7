"""confluent-kafka (librdkafka) as a group consumer: ``Consumer.subscribe`` with rebalance callbacks.

What the library does that shapes this module (confluent-kafka 2.x, librdkafka 2.x):

* ``on_assign`` / ``on_revoke`` / ``on_lost`` and the ``on_commit`` callback of asynchronous
  commits run on the application thread, inside ``poll()``/``consume()`` (and ``close()``).
  ``consume(n)`` may serve a rebalance between two of the records it returns, and the caller
  cannot see where; so :meth:`ConfluentGroupConsumer.poll` calls ``poll()`` -- one record per
  call, the callbacks it served all before that record -- until no record is ready: the steps
  are then in the order they happened.  The first join calls ``on_assign`` only.
* The generation: ``consumer_group_metadata()`` is librdkafka's serialised group metadata;
  :func:`~workloads.group_events.librdkafka_generation` reads the generation id and member id
  out of it, inside ``on_assign`` (the member's generation at that moment: librdkafka does not
  rejoin while the application still owes it the assign call).
* A synchronous ``commit(asynchronous=False)`` has no timeout of its own: it waits for the
  coordinator, however long that takes, and librdkafka retries it internally after
  REQUEST_TIMED_OUT, NOT_COORDINATOR or a lost connection.  So it runs on a helper thread and
  the workload waits at most its timeout (then the outcome is ``info``); and a final definite
  error may follow an earlier attempt that librdkafka retried (``docs/consumer-groups.md``).
* ``on_commit`` is not called for synchronous commits, and only asynchronous commits are
  sent with it here (auto commits are disabled unless the mode is ``auto``, where nothing per
  commit is recorded): at most one asynchronous commit is in flight, so the next ``on_commit``
  answers it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .clients import IndefiniteFailure, Received, _text
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
    librdkafka_generation,
    member_config,
    partitions_of,
)

MAX_RECORDS_PER_POLL = 1000
PARTITION_EOF = -191


def _code(error: Any) -> int | None:
    try:
        return int(error.code())
    except Exception:
        return None


def _error_outcome(error: Any) -> tuple[Outcome, str]:
    return commit_outcome(_code(error) if _code(error) is not None else -1, None), str(error)


def _partitions_outcome(partitions: list[Any]) -> tuple[Outcome, str | None]:
    """The outcome of a commit answered per partition: the worst of them (info over fail)."""
    errors = [tp.error for tp in partitions if tp.error is not None]
    if not errors:
        return "ok", None
    outcomes = [_error_outcome(error) for error in errors]
    worst: Outcome = "info" if any(outcome == "info" for outcome, _ in outcomes) else "fail"
    return worst, "; ".join(text for _, text in outcomes)


class ConfluentGroupConsumer:
    """A :class:`~workloads.group_events.GroupConsumerClient` on confluent-kafka."""

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
        self._events = NotedEvents()
        self._pending_token: int | None = None
        self._helper = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit")
        self._unanswered: concurrent.futures.Future[Any] | None = None
        self._error: BaseException | None = None
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            **member_config(group, commit, request_timeout, isolation),
            "socket.timeout.ms": client_timeout_ms(request_timeout),
            "topic.metadata.refresh.interval.ms": 5000,
            "log_level": 0,
        }
        if commit == "async":
            config["on_commit"] = self._on_commit
        self.consumer = Consumer(config)
        self.consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # ---- callbacks (application thread, inside poll/close) ------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        generation, member = None, None
        with contextlib.suppress(Exception):  # recorded as unknown, never a reason to break the rebalance
            generation, member = librdkafka_generation(bytes(consumer.consumer_group_metadata()))
        self._events.note(Assigned(partitions_of(partitions), generation, member))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._events.note(Revoked(partitions_of(partitions)))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._events.note(Revoked(partitions_of(partitions), lost=True))

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        token, self._pending_token = self._pending_token, None
        if token is None:
            return  # not an asynchronous commit of ours (none is in flight)
        if error is not None:
            outcome, text = _error_outcome(error)
            self._events.note(CommitDone(token, outcome, text))
            return
        outcome, detail = _partitions_outcome(partitions)
        self._events.note(CommitDone(token, outcome, detail))

    # ---- the client interface -------------------------------------------------------------------

    def poll(self, timeout: float) -> list[Step]:
        if self._error is not None:
            stashed, self._error = self._error, None
            raise stashed
        steps: list[Step] = []
        records = 0
        wait = timeout
        while records < MAX_RECORDS_PER_POLL:
            message = self.consumer.poll(wait)
            wait = 0.0
            steps += self._events.take()  # served inside that poll(), so before its record
            if message is None:
                break
            error = message.error()
            if error is not None:
                if _code(error) == PARTITION_EOF:
                    continue
                failure = IndefiniteFailure(str(error))
                if not steps:
                    raise failure
                self._error = failure  # the steps so far happened: report them, fail next time
                break
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # always set on consumed records
            steps.append(Received(partition, offset, _text(message.key()), _text(message.value())))
            records += 1
        return steps

    def _partitions(self, offsets: Mapping[int, int]) -> list[Any]:
        return [
            TopicPartition(self.topic, partition, offset) for partition, offset in sorted(offsets.items())
        ]

    def commit_in_flight(self) -> bool:
        if self._unanswered is not None and self._unanswered.done():
            self._unanswered = None
        return self._unanswered is not None

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        partitions = self._partitions(offsets)
        future = self._helper.submit(self.consumer.commit, offsets=partitions, asynchronous=False)
        try:
            answered = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            self._unanswered = future
            return "info", f"no answer within {timeout:g} s"
        except KafkaException as error:
            return _error_outcome(error.args[0] if error.args else error)
        except Exception as error:
            return "info", f"{type(error).__name__}: {error}"
        return _partitions_outcome(list(answered or []))

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        self._pending_token = token
        try:
            self.consumer.commit(offsets=self._partitions(offsets), asynchronous=True)
        except KafkaException as error:
            self._pending_token = None
            return _error_outcome(error.args[0] if error.args else error)
        except Exception as error:
            self._pending_token = None
            return "info", f"{type(error).__name__}: {error}"
        return None

    def close(self) -> list[Step]:
        # A rebalance event still queued when close() serves it can hang for good inside
        # rd_kafka_rebalance_protocol(), which confluent-kafka's callback wrapper calls with the
        # GIL held -- so every thread of the harness stops (librdkafka #4041; seen here with
        # confluent-kafka 2.16.1 when a consumer that had just joined was closed mid-rebalance).
        # A member that stalled, or joined and is told to leave, has such events queued: they are
        # served first by a poll, while the consumer group handle is alive.
        steps: list[Step] = []
        with contextlib.suppress(Exception):  # a failed poll here changes nothing of the close
            steps += self.poll(0.0)
        with contextlib.suppress(Exception):  # a close that fails leaves nothing more to record
            self.consumer.close()  # serves the revoke (and any commit answer) callbacks first
        self._helper.shutdown(wait=False, cancel_futures=True)
        return steps + self._events.take()
