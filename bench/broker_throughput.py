"""Benchmark: acked throughput and per-message latency of the bundled broker.

    .venv/bin/python bench/broker_throughput.py [--messages 200000] [--kafka-python-messages 50000]
        [--paced-seconds 5] [--unbatched-messages 2000] [--value-bytes 100] [--brokers 3] [--json]

Starts a local cluster (``broker_impl.localcluster``: a controller and ``--brokers``
broker processes on 127.0.0.x), creates a one-partition topic per run with replication
factor = brokers, and produces with ``acks=all``:

* ``confluent-kafka batched`` -- librdkafka, ``linger.ms=5``, as fast as it accepts;
* ``kafka-python batched`` -- kafka-python's KafkaProducer (idempotent, its default),
  ``linger_ms=5``, as fast as it accepts;
* ``... paced`` -- the same batched producers offered exactly the target rate of issue 2
  (20,000 msg/s confluent-kafka, 5,000 kafka-python) for ``--paced-seconds``: the latency
  a producer sees at the target throughput, without the queueing of a saturated one;
* ``... unbatched`` -- each client sends one message, waits for its ack, sends the next:
  the latency of one acks=all round trip through leader and followers, without batching.

Throughput is acked messages per second from the first send to the last ack.  Latency is
per message, from the send call to the delivery report: in the batched runs it includes
the time spent queued behind earlier batches, so it measures a saturated producer.  Every
acked message is counted and every failed one reported; the broker processes are always
stopped, also on Ctrl-C.  No target is asserted: the figures are printed with the targets
of issue 2 beside them (>= 20,000 msg/s confluent-kafka, >= 5,000 kafka-python,
p99 <= 50 ms without faults).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from broker_impl.localcluster import LocalCluster

TARGET_MESSAGES_PER_SECOND = {"confluent-kafka": 20_000, "kafka-python": 5_000}
TARGET_P99_MS = 50.0


@dataclasses.dataclass
class RunResult:
    name: str
    client: str
    sent: int
    acked: int
    failed: int
    seconds: float
    latencies_ms: list[float]

    @property
    def throughput(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, fraction: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.name,
            "client": self.client,
            "sent": self.sent,
            "acked": self.acked,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "acked_per_second": round(self.throughput),
            "p50_ms": round(self.percentile(0.50), 2),
            "p99_ms": round(self.percentile(0.99), 2),
            "mean_ms": round(statistics.fmean(self.latencies_ms), 2) if self.latencies_ms else None,
        }


class Pacer:
    """Offers messages at a fixed rate: ``due()`` says how many should have been sent by now."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.started = time.perf_counter()

    def wait_turn(self, index: int, idle: Callable[[float], object]) -> None:
        """Block (calling ``idle(seconds)``) until message ``index`` is due; no-op unpaced."""
        if self.rate is None:
            return
        while (delay := self.started + index / self.rate - time.perf_counter()) > 0:
            idle(min(delay, 0.001))


# ---- the two clients ------------------------------------------------------------------------------


def run_confluent(
    bootstrap: str, topic: str, count: int, value: bytes, batched: bool, rate: float | None = None
) -> RunResult:
    """librdkafka: the delivery report's ``latency()`` is exactly send call -> broker ack."""
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5 if batched else 0,
            "queue.buffering.max.messages": 500_000,
            "message.timeout.ms": 60_000,
        }
    )
    latencies: list[float] = []
    failures = 0
    last_ack = 0.0

    def delivered(error: Any, message: Any) -> None:
        nonlocal failures, last_ack
        if error is None:
            latencies.append(message.latency() * 1000)
            last_ack = time.perf_counter()
        else:
            failures += 1

    producer.produce(topic, b"warm-up")  # connections, metadata: not part of the measurement
    producer.flush(30)
    started = time.perf_counter()
    pacer = Pacer(rate)
    for index in range(count):
        pacer.wait_turn(index, producer.poll)
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        if batched:
            producer.poll(0)
        else:
            producer.flush(30)
    remaining = producer.flush(120)
    name = "confluent-kafka " + (
        "unbatched" if not batched else f"paced {rate:,.0f}/s" if rate else "batched"
    )
    return RunResult(
        name, "confluent-kafka", count, len(latencies), failures + remaining, last_ack - started, latencies
    )


def run_kafka_python(
    bootstrap: str, topic: str, count: int, value: bytes, batched: bool, rate: float | None = None
) -> RunResult:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5 if batched else 0,
        max_in_flight_requests_per_connection=5,
    )
    latencies: list[float] = []
    failures: list[Exception] = []
    last_ack = [0.0]
    lock = threading.Lock()

    def acked(sent_at: float, _metadata: Any) -> None:
        now = time.perf_counter()
        with lock:
            latencies.append((now - sent_at) * 1000)
            last_ack[0] = now

    def failed(error: Exception) -> None:
        with lock:
            failures.append(error)

    try:
        producer.send(topic, b"warm-up").get(timeout=30)
        started = time.perf_counter()
        pacer = Pacer(rate)
        for index in range(count):
            pacer.wait_turn(index, time.sleep)
            future = producer.send(topic, value)
            future.add_callback(acked, time.perf_counter())
            future.add_errback(failed)
            if not batched:
                future.get(timeout=30)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=10)
    name = "kafka-python " + ("unbatched" if not batched else f"paced {rate:,.0f}/s" if rate else "batched")
    return RunResult(
        name, "kafka-python", count, len(latencies), len(failures), last_ack[0] - started, latencies
    )


# ---- driver ------------------------------------------------------------------------------------------


def verdict(result: RunResult, saturating: bool) -> str:
    """Throughput against the target for saturating runs; p99 against the target otherwise."""
    notes = []
    if saturating:
        target = TARGET_MESSAGES_PER_SECOND[result.client]
        notes.append(f"throughput {'ok' if result.throughput >= target else 'BELOW'} (>= {target:,})")
    else:
        notes.append(
            f"p99 {'ok' if result.percentile(0.99) <= TARGET_P99_MS else 'ABOVE'} (<= {TARGET_P99_MS:g} ms)"
        )
    if result.failed:
        notes.append(f"{result.failed} FAILED")
    return "; ".join(notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="confluent-kafka batched run")
    parser.add_argument("--kafka-python-messages", type=int, default=50_000, help="kafka-python batched run")
    parser.add_argument("--paced-seconds", type=int, default=5, help="length of each paced run")
    parser.add_argument("--unbatched-messages", type=int, default=2_000, help="each unbatched run")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per run")
    args = parser.parse_args(argv)
    if (
        min(
            args.messages,
            args.kafka_python_messages,
            args.paced_seconds,
            args.unbatched_messages,
            args.value_bytes,
            args.brokers,
        )
        < 1
    ):
        parser.error("every count must be at least 1")

    value = b"x" * args.value_bytes
    confluent_rate = TARGET_MESSAGES_PER_SECOND["confluent-kafka"]
    kafka_python_rate = TARGET_MESSAGES_PER_SECOND["kafka-python"]
    # (topic, client, messages, batched, offered rate or None for "as fast as it goes")
    runs: list[tuple[str, Callable[..., RunResult], int, bool, float | None]] = [
        ("confluent-batched", run_confluent, args.messages, True, None),
        ("kafka-python-batched", run_kafka_python, args.kafka_python_messages, True, None),
        ("confluent-paced", run_confluent, confluent_rate * args.paced_seconds, True, confluent_rate),
        (
            "kafka-python-paced",
            run_kafka_python,
            kafka_python_rate * args.paced_seconds,
            True,
            kafka_python_rate,
        ),
        ("confluent-unbatched", run_confluent, args.unbatched_messages, False, None),
        ("kafka-python-unbatched", run_kafka_python, args.unbatched_messages, False, None),
    ]
    results: list[tuple[RunResult, bool]] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-broker-bench-") as directory:
        cluster = LocalCluster(Path(directory))
        try:
            cluster.up(args.brokers)
            print(
                f"cluster: {args.brokers} brokers, RF={args.brokers}, acks=all, {args.value_bytes}-byte values, "
                f"one partition per run",
                flush=True,
            )
            for topic, run, count, batched, rate in runs:
                cluster.create_topic(topic, 1, args.brokers)
                result = run(cluster.bootstrap(), topic, count, value, batched, rate)
                saturating = batched and rate is None
                results.append((result, saturating))
                print(
                    f"  {result.name:32s} {result.acked:>8,} acked in {result.seconds:6.2f} s = "
                    f"{result.throughput:>9,.0f} msg/s   p50 {result.percentile(0.5):7.2f} ms   "
                    f"p99 {result.percentile(0.99):7.2f} ms   [{verdict(result, saturating)}]",
                    flush=True,
                )
        finally:
            cluster.down()
    if args.json:
        for result, _ in results:
            print(json.dumps(result.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
