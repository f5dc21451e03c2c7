"""Real processes, real clients: acked writes survive a broker crash and replicas agree.

Three brokers, one partition with three replicas, ``acks=all``.  Each client library
streams 10,000 unique values; once 3,000 are acked the chosen broker -- the partition
leader, or a follower -- is SIGKILLed while the next chunk is in flight, and it is
restarted once 6,000 are acked.  After the cluster has healed (the ISR holds all three
replicas again) every acked value must be at its acked offset in a fresh consumer's read
of the partition, and the three replicas' logs, read offline by the dump tool, must hold
the same records at the same offsets.

Separately, kafka-python's idempotent producer (its default) must not duplicate a batch
it retried after a request timeout; the same scenario without idempotence shows that the
retry really happens (a duplicate appears), so the idempotent run cannot pass vacuously.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from broker_impl.localcluster import LocalCluster

from .client_support import read_partition, wait_for_full_isr, wait_for_identical_dumps

TOPIC = "stream"
TOTAL = 10_000
CHUNK = 100
KILL_WHEN_ACKED = 3_000
RESTART_WHEN_ACKED = 6_000
CLUSTER_SETTINGS = {"replica.lag.time.max.ms": 3000}

pytestmark = pytest.mark.timeout(300)


class StreamingProducer(Protocol):
    acked: dict[bytes, int]
    failures: list[str]

    def send(self, value: bytes) -> None: ...
    def flush(self, timeout: float) -> None: ...
    def close(self) -> None: ...


class KafkaPythonStream:
    """kafka-python's KafkaProducer (idempotent by default) recording each ack's offset."""

    def __init__(self, bootstrap: str, **config: Any) -> None:
        self.acked: dict[bytes, int] = {}
        self.failures: list[str] = []
        self._lock = threading.Lock()
        settings = {
            "acks": "all",
            "linger_ms": 5,
            "request_timeout_ms": 5000,
            "delivery_timeout_ms": 90000,
            **config,
        }
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)

    def send(self, value: bytes) -> None:
        future = self._producer.send(TOPIC, value)
        future.add_callback(self._acked, value)
        future.add_errback(self._failed, value)

    def _acked(self, value: bytes, metadata: Any) -> None:
        with self._lock:
            self.acked[value] = metadata.offset

    def _failed(self, value: bytes, error: Exception) -> None:
        with self._lock:
            self.failures.append(f"{value!r}: {error!r}")

    def flush(self, timeout: float) -> None:
        self._producer.flush(timeout=timeout)

    def close(self) -> None:
        self._producer.close(timeout=5)


class ConfluentStream:
    """confluent-kafka's Producer (librdkafka), batched, recording each delivery report."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[bytes, int] = {}
        self.failures: list[str] = []
        self._producer = ConfluentProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 90000,
                "request.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def send(self, value: bytes) -> None:
        self._producer.produce(TOPIC, value, on_delivery=self._delivered)
        self._producer.poll(0)

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked[message.value()] = message.offset()
        else:
            self.failures.append(f"{message.value()!r}: {error}")

    def flush(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            raise KafkaException(f"{remaining} messages still undelivered after {timeout} s")

    def close(self) -> None:
        self._producer.flush(5)


CLIENTS: dict[str, Callable[[str], StreamingProducer]] = {
    "kafka-python": KafkaPythonStream,
    "confluent-kafka": ConfluentStream,
}


@dataclasses.dataclass
class CrashRecord:
    victim: str
    acked_at_kill: int = -1
    sent_at_kill: int = -1
    acked_at_restart: int = -1
    alive_after_kill: bool = True


@pytest.fixture
def cluster(start_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    started = start_cluster(brokers=3, settings=CLUSTER_SETTINGS)
    started.create_topic(TOPIC, partitions=1, replication_factor=3)
    return started


@pytest.fixture
def producers() -> Iterator[list[StreamingProducer]]:
    """Producers to close at teardown, whatever the test did."""
    opened: list[StreamingProducer] = []
    yield opened
    for producer in opened:
        try:
            producer.close()
        except Exception:  # a closing client must not mask the test's own failure
            logging.getLogger(__name__).exception("closing a producer failed")


def choose_victim(cluster: LocalCluster, role: str) -> str:
    state = cluster.partition_state(TOPIC, 0)
    if role == "leader":
        return str(state["leader"])
    return str(next(replica for replica in state["replicas"] if replica != state["leader"]))


def stream_through_a_crash(cluster: LocalCluster, producer: StreamingProducer, victim: str) -> CrashRecord:
    """Send TOTAL values in chunks; SIGKILL ``victim`` with a chunk in flight, restart it later."""
    record = CrashRecord(victim)
    values = [f"value-{number:05d}".encode() for number in range(TOTAL)]
    for start in range(0, TOTAL, CHUNK):
        for value in values[start : start + CHUNK]:
            producer.send(value)
        if record.acked_at_kill < 0 and len(producer.acked) >= KILL_WHEN_ACKED:
            record.acked_at_kill, record.sent_at_kill = len(producer.acked), start + CHUNK
            cluster.kill(victim)  # the chunk just sent is in flight
            record.alive_after_kill = cluster.is_alive(victim)
        elif (
            record.acked_at_kill >= 0
            and record.acked_at_restart < 0
            and len(producer.acked) >= RESTART_WHEN_ACKED
        ):
            record.acked_at_restart = len(producer.acked)
            cluster.start(victim)
        producer.flush(120)
    return record


@pytest.mark.parametrize("role", ["leader", "follower"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_acked_writes_survive_a_broker_crash_and_replicas_agree(
    cluster: LocalCluster, producers: list[StreamingProducer], client: str, role: str
) -> None:
    victim = choose_victim(cluster, role)
    epoch_before = cluster.partition_state(TOPIC, 0)["leader_epoch"]
    producer = CLIENTS[client](cluster.bootstrap())
    producers.append(producer)

    crash = stream_through_a_crash(cluster, producer, victim)

    # The crash really happened mid-stream, and the broker really came back.
    assert KILL_WHEN_ACKED <= crash.acked_at_kill < TOTAL
    assert crash.sent_at_kill < TOTAL
    assert not crash.alive_after_kill
    assert crash.acked_at_restart >= RESTART_WHEN_ACKED
    assert cluster.is_alive(victim)
    state = wait_for_full_isr(cluster, TOPIC)
    if role == "leader":
        assert state["leader_epoch"] > epoch_before  # leadership moved off the dead leader

    # Every acked value is in the log, at the offset it was acked with.
    assert len(producer.acked) >= 0.9 * TOTAL, producer.failures[:5]
    log = read_partition(cluster.bootstrap(), TOPIC)
    assert [offset for offset, _ in log] == list(range(len(log)))
    by_offset = dict(log)
    misplaced = {value: offset for value, offset in producer.acked.items() if by_offset.get(offset) != value}
    assert not misplaced, (
        f"{len(misplaced)} acked values not at their acked offsets, e.g. {list(misplaced.items())[:5]}"
    )

    # All three replicas hold the same records at the same offsets -- and the consumer's view.
    dumps = wait_for_identical_dumps(cluster, TOPIC)
    assert sorted(dumps) == ["1", "2", "3"]
    expected = [(offset, value.decode()) for offset, value in log]
    for node, replica in dumps.items():
        assert replica.records == expected, f"replica {node} differs from the committed log"
        assert replica.summary["torn_bytes"] == 0
        assert replica.summary["log_end_offset"] == len(log)


# ---- idempotent producers: a retried batch is stored once ---------------------------------------


class RetryWatcher(logging.Handler):
    """Collects kafka-python's own reports that it timed out a request and retries a batch."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage() and "produce" in record.getMessage():
            self.retries += 1


@pytest.fixture
def retry_watcher() -> Iterator[RetryWatcher]:
    watcher = RetryWatcher()
    logger = logging.getLogger("kafka.producer.sender")
    logger.addHandler(watcher)
    previous = logger.level
    logger.setLevel(logging.WARNING)
    yield watcher
    logger.removeHandler(watcher)
    logger.setLevel(previous)


def produce_across_a_lost_response(
    cluster: LocalCluster, producers: list[StreamingProducer], watcher: RetryWatcher, idempotent: bool
) -> collections.Counter[bytes]:
    """SIGSTOP the leader with a batch in flight until kafka-python times the request out and
    schedules a retry; resume.  The stopped broker still receives the original request (the
    kernel buffers it), so it sees the batch twice: once as sent, once as retried."""
    producer = KafkaPythonStream(
        cluster.bootstrap(),
        enable_idempotence=idempotent,
        request_timeout_ms=1000,
        max_in_flight_requests_per_connection=1 if not idempotent else 5,
    )
    producers.append(producer)
    warm_up = [f"warm-{number}".encode() for number in range(100)]
    for value in warm_up:
        producer.send(value)
    producer.flush(30)
    leader = str(cluster.partition_state(TOPIC, 0)["leader"])
    retried = [f"retried-{number}".encode() for number in range(20)]
    cluster.pause(leader)
    try:
        for value in retried:
            producer.send(value)
        cluster.wait_for(lambda: watcher.retries > 0, 20, "kafka-python to time out and retry the batch")
    finally:
        cluster.resume(leader)
    producer.flush(60)
    assert not producer.failures, producer.failures[:5]
    assert set(producer.acked) == set(warm_up) | set(retried)
    wait_for_full_isr(cluster, TOPIC)
    return collections.Counter(value for _, value in read_partition(cluster.bootstrap(), TOPIC))


def test_idempotent_producer_retries_are_not_duplicated(
    cluster: LocalCluster, producers: list[StreamingProducer], retry_watcher: RetryWatcher
) -> None:
    counts = produce_across_a_lost_response(cluster, producers, retry_watcher, idempotent=True)
    assert retry_watcher.retries > 0
    duplicated = {value: count for value, count in counts.items() if count > 1}
    assert not duplicated, f"values stored more than once: {duplicated}"
    assert len(counts) == 120


def test_without_idempotence_the_same_retry_is_duplicated(
    cluster: LocalCluster, producers: list[StreamingProducer], retry_watcher: RetryWatcher
) -> None:
    """The control experiment: it proves the scenario above really retries a batch the
    broker had already received."""
    counts = produce_across_a_lost_response(cluster, producers, retry_watcher, idempotent=False)
    assert retry_watcher.retries > 0
    assert any(count > 1 for value, count in counts.items() if value.startswith(b"retried-"))
