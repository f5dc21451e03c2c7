"""Real Kafka clients behind two small interfaces: one producer send, one consumer poll.

The workload must know, for every send, whether it *certainly* failed or might have
taken effect -- the difference between a ``fail`` and an ``info`` op, and so between
a correct verdict and a false alarm.  The rule here is conservative: a send is a
:class:`DefiniteFailure` only when the client never handed the message to a broker
(no metadata, local queue full, the message could not be encoded).  Every error after
the message may have left the process -- timeouts, NOT_LEADER after retries, even
NOT_ENOUGH_REPLICAS_AFTER_APPEND -- is :class:`IndefiniteFailure`, because a retry of
an earlier attempt that did reach the log is indistinguishable from here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, Protocol

CLIENTS = ("kafka-python", "confluent-kafka", "kafka-python-kip890")
"""``kafka-python-kip890`` is kafka-python whose *transactional* producer is a KIP-890 part 2 client
(:mod:`workloads.txn_kip890`, made in :mod:`workloads.txn_clients`); its plain producers and its
consumers are kafka-python's."""
KAFKA_PYTHON = ("kafka-python", "kafka-python-kip890")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
"""What the consumers and the drain read (``--isolation``).  Without transactions (the queue
workload without ``--txn``) both see the same records, up to the high watermark; they differ in
the ListOffsets query a broker answers for the drain's end offset (the last stable offset under
``read_committed``, librdkafka's default and ours; the high watermark otherwise), which is how a
target that breaks one of them can still be tested through the other.  With ``--txn``
(:mod:`workloads.txn`) ``read_committed`` also skips aborted transactions' records and stops at
the first open transaction."""


class DefiniteFailure(Exception):
    """The message certainly did not reach any broker."""


class IndefiniteFailure(Exception):
    """The message may or may not have been appended."""


class NoDeliveryReport(IndefiniteFailure):
    """The client still holds the message: it reported no outcome within the wait, and may yet
    retry it, time it out, or have it acknowledged (:mod:`workloads.txn_clients` cares why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Received:
    partition: int
    offset: int
    key: str | None
    value: str | None

    def to_json(self) -> dict[str, Any]:
        """The record as a history op holds it: ``{"partition", "offset", "key", "value"}``."""
        return {
            "partition": self.partition,
            "offset": self.offset,
            "key": self.key,
            "value": parse_value(self.value),
        }


def parse_value(text: str | None) -> int | str | None:
    """Values are integers as text; anything else is kept as text (the checker calls it unexpected)."""
    if text is not None and text.lstrip("-").isdigit():
        return int(text)
    return text


class ProducerClient(Protocol):
    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        """Send one message and wait for its acknowledgement; return its offset."""
        ...

    def close(self) -> None: ...


class ConsumerClient(Protocol):
    def assign(self, topic: str, start_offsets: dict[int, int]) -> None: ...

    def poll(self, timeout: float) -> list[Received]: ...

    def end_offsets(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]: ...

    def position(self, topic: str, partition: int) -> int:
        """The offset the next poll of ``partition`` reads from: past the records returned and past
        what the isolation level skips (transaction markers, aborted records); -1 when unknown."""
        ...

    def close(self) -> None: ...


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


# ---- kafka-python ------------------------------------------------------------------------


class KafkaPythonProducer:
    def __init__(
        self, bootstrap: str, acks: str, idempotent: bool, request_timeout: float, **extra: Any
    ) -> None:
        """``extra``: more KafkaProducer settings (the transactional producer's, ``workloads.txn_clients``)."""
        from kafka import KafkaProducer

        acks_value: int | str = "all" if acks == "all" else int(acks)
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=acks_value,
            enable_idempotence=idempotent and acks == "all",
            request_timeout_ms=int(request_timeout * 1000),
            max_block_ms=int(request_timeout * 1000),
            delivery_timeout_ms=int(request_timeout * 1000) * 2 + 1000,
            linger_ms=0,
            reconnect_backoff_max_ms=500,
            retry_backoff_ms=100,
            **extra,
        )

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        from kafka.errors import KafkaTimeoutError

        try:
            future = self._producer.send(topic, key=key.encode(), value=value.encode(), partition=partition)
        except KafkaTimeoutError as error:  # metadata never arrived: nothing was sent
            raise DefiniteFailure(f"metadata unavailable: {error}") from None
        except (ValueError, TypeError, AssertionError) as error:
            raise DefiniteFailure(str(error)) from None
        try:
            metadata = future.get(timeout=timeout)
        except Exception as error:
            raise IndefiniteFailure(f"{type(error).__name__}: {error}") from None
        return int(metadata.offset)

    def close(self) -> None:
        """Never raises: every send's outcome is already recorded, so a flush that does not end
        within 2 s (a leader that died with the batch) only abandons what is still in flight.

        kafka-python's ``close`` flushes first and, when the flush times out, raises before it
        has closed anything: the sender thread keeps running and the producer's ``__del__``
        tries again later and prints a traceback.  So after a failed close the sender is
        force-closed (pending batches are dropped, as Kafka's ``close(Duration.ZERO)`` does) and
        the producer marked closed.
        """
        try:
            self._producer.close(timeout=2)
        except Exception:
            with contextlib.suppress(Exception):
                sender = getattr(self._producer, "_sender", None)
                if sender is not None:
                    sender.force_close()
                    sender.join(2)
            with contextlib.suppress(Exception):
                self._producer._closed = True


def kafka_python_committed(
    consumer: Any, topic: str, partitions: Sequence[int], timeout: float
) -> dict[int, int]:
    """A kafka-python ``KafkaConsumer``'s group's committed offsets of ``partitions`` (a partition
    without one is absent); also read on the group members' consumers (``workloads.txn_subscribed``)."""
    from kafka import TopicPartition

    found = {}
    for partition in partitions:
        offset = consumer.committed(TopicPartition(topic, partition), timeout_ms=int(timeout * 1000))
        if offset is not None and offset >= 0:
            found[partition] = int(offset)
    return found


class KafkaPythonConsumer:
    def __init__(self, bootstrap: str, isolation: str, group: str | None = None) -> None:
        """``group``: the consumer group whose committed offsets :meth:`committed` reads and a
        transaction's offsets go to (consume-transform-produce); partitions are still assigned."""
        from kafka import KafkaConsumer

        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            request_timeout_ms=10000,
            reconnect_backoff_max_ms=500,
        )

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        from kafka import TopicPartition

        partitions = [TopicPartition(topic, p) for p in sorted(start_offsets)]
        self._consumer.assign(partitions)
        for partition in partitions:
            self._consumer.seek(partition, start_offsets[partition.partition])

    def poll(self, timeout: float) -> list[Received]:
        batches = self._consumer.poll(timeout_ms=int(timeout * 1000))
        return [
            Received(message.partition, message.offset, _text(message.key), _text(message.value))
            for messages in batches.values()
            for message in messages
        ]

    def end_offsets(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]:
        from kafka import TopicPartition

        ends = self._consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    def position(self, topic: str, partition: int) -> int:
        from kafka import TopicPartition

        position = self._consumer.position(TopicPartition(topic, partition))
        return -1 if position is None else int(position)

    def committed(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]:
        """The group's committed offsets of ``partitions`` (a partition without one is absent)."""
        return kafka_python_committed(self._consumer, topic, partitions, timeout)

    def group_metadata(self) -> Any:
        return self._consumer.group_metadata()

    def close(self) -> None:
        self._consumer.close(autocommit=False)


# ---- confluent-kafka (librdkafka) -----------------------------------------------------------


class ConfluentProducer:
    def __init__(
        self, bootstrap: str, acks: str, idempotent: bool, request_timeout: float, **extra: Any
    ) -> None:
        """``extra``: more librdkafka settings (the transactional producer's, ``workloads.txn_clients``)."""
        from confluent_kafka import Producer

        config = {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": idempotent and acks == "all",
            "request.timeout.ms": int(request_timeout * 1000),
            "message.timeout.ms": int(request_timeout * 2000),
            "linger.ms": 0,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 100,
            "socket.connection.setup.timeout.ms": int(request_timeout * 1000),
            "log_level": 0,
            **extra,
        }
        self.message_timeout: float = int(config["message.timeout.ms"]) / 1000
        """Seconds after which librdkafka reports a message it could not deliver (``_MSG_TIMED_OUT``)."""
        self._producer = Producer(config)
        self._lock = threading.Lock()

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        from confluent_kafka import KafkaException

        outcome: dict[str, Any] = {}
        done = threading.Event()

        def delivered(error: Any, message: Any) -> None:
            outcome["error"] = error
            outcome["offset"] = message.offset() if error is None else None
            done.set()

        try:
            self._producer.produce(
                topic, key=key.encode(), value=value.encode(), partition=partition, on_delivery=delivered
            )
        except (BufferError, KafkaException, TypeError, ValueError) as error:
            raise DefiniteFailure(str(error)) from None
        deadline_polls = max(1, int(timeout / 0.05)) + 40
        for _ in range(deadline_polls):
            self._producer.poll(0.05)
            if done.is_set():
                break
        if not done.is_set():
            raise NoDeliveryReport(f"no delivery report within {timeout:g} s")
        if outcome["error"] is not None:
            raise IndefiniteFailure(str(outcome["error"]))
        return int(outcome["offset"])

    def close(self) -> None:
        """Never raises (as :meth:`KafkaPythonProducer.close`): a flush of a producer in a fatal
        state -- a transactional one fenced, or whose transaction could not end -- raises that
        error from the delivery poll, and every outcome is recorded by then."""
        with contextlib.suppress(Exception):
            self._producer.flush(2)


def confluent_committed(
    consumer: Any, topic: str, partitions: Sequence[int], timeout: float
) -> dict[int, int]:
    """A confluent-kafka ``Consumer``'s group's committed offsets of ``partitions`` (as
    :func:`kafka_python_committed`)."""
    from confluent_kafka import TopicPartition

    answers = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
    return {answer.partition: int(answer.offset) for answer in answers if answer.offset >= 0}


class ConfluentConsumer:
    def __init__(self, bootstrap: str, isolation: str, group: str | None = None) -> None:
        """``group``: as :class:`KafkaPythonConsumer`'s."""
        from confluent_kafka import Consumer

        # librdkafka insists on a group id even for assign(); without ``group`` nothing is committed.
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group or "tidemark",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
                "reconnect.backoff.max.ms": 500,
                "log_level": 0,
            }
        )

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign(
            [TopicPartition(topic, p, offset) for p, offset in sorted(start_offsets.items())]
        )

    def poll(self, timeout: float) -> list[Received]:
        messages = self._consumer.consume(num_messages=1000, timeout=timeout)
        received = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == -191:  # _PARTITION_EOF: not an error
                    continue
                raise IndefiniteFailure(str(error))
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # always set on consumed records
            received.append(Received(partition, offset, _text(message.key()), _text(message.value())))
        return received

    def end_offsets(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        ends = {}
        for partition in partitions:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )
            ends[partition] = int(high)
        return ends

    def position(self, topic: str, partition: int) -> int:
        from confluent_kafka import TopicPartition

        offset = self._consumer.position([TopicPartition(topic, partition)])[0].offset
        return max(-1, int(offset))  # librdkafka's OFFSET_INVALID (-1001): nothing consumed yet

    def committed(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]:
        """As :meth:`KafkaPythonConsumer.committed` (librdkafka asks with ``require_stable`` when
        reading ``read_committed``, KIP-447: a pending transactional commit is waited for)."""
        return confluent_committed(self._consumer, topic, partitions, timeout)

    def group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def close(self) -> None:
        self._consumer.close()


def make_producer(
    client: str, bootstrap: str, acks: str, idempotent: bool, request_timeout: float
) -> ProducerClient:
    if client in KAFKA_PYTHON:
        return KafkaPythonProducer(bootstrap, acks, idempotent, request_timeout)
    if client == "confluent-kafka":
        return ConfluentProducer(bootstrap, acks, idempotent, request_timeout)
    raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")


def make_consumer(client: str, bootstrap: str, isolation: str, group: str | None = None) -> ConsumerClient:
    if client in KAFKA_PYTHON:
        return KafkaPythonConsumer(bootstrap, isolation, group)
    if client == "confluent-kafka":
        return ConfluentConsumer(bootstrap, isolation, group)
    raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
