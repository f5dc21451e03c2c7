"""Benchmark: acked throughput and per-message latency of the bundled broker.

    .venv/bin/python bench/broker_throughput.py [--messages 200000] [--kafka-python-messages 50000]
        [--paced-seconds 5] [--unbatched-messages 2000] [--value-bytes 100] [--brokers 3] [--json]
    .venv/bin/python bench/broker_throughput.py --compare-event-log [--rounds 3] [--messages ...]

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

``--compare-event-log`` measures what the brokers' event log (``event.log.enable``,
``docs/events.md``) costs: only the two saturating batched runs and the confluent-kafka
unbatched one (the most events per message: every message moves the HW), on two clusters
running at once, one with the event log off and one with it on; each run goes to both in turn,
for ``--rounds`` rounds (off/on, then on/off, ...), so that a drift of the machine's speed hits
both alike.  It prints every run with its median latency, the brokers' CPU time per message
(from /proc) and the events written, then the range of the on/off ratios of throughput, median
latency and CPU per message.  On a shared machine a range, not one figure, is the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
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

Run = tuple[str, Callable[..., "RunResult"], int, bool, float | None]
"""(topic, client, messages, batched, offered rate or None for "as fast as it goes")."""

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


def broker_cpu_seconds(cluster: LocalCluster) -> float:
    """User + system CPU time the cluster's broker processes have used so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for node in cluster.state["brokers"]:
        fields = Path(f"/proc/{cluster.pid(node)}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15)
    return total


def event_lines(cluster: LocalCluster) -> int:
    """Events the cluster's brokers have written so far."""
    paths = (cluster.events_path(node) for node in cluster.state["brokers"])
    return sum(path.read_bytes().count(b"\n") for path in paths if path.exists())


@dataclasses.dataclass
class Measured:
    result: RunResult
    saturating: bool
    broker_cpu_seconds: float
    events: int

    @property
    def cpu_per_message_us(self) -> float:
        return self.broker_cpu_seconds / max(self.result.acked, 1) * 1e6


def run_once(cluster: LocalCluster, run: Run, brokers: int, value: bytes, topic_suffix: str = "") -> Measured:
    """One run on a topic of its own (one partition, replication factor = brokers)."""
    topic, client, count, batched, rate = run
    topic += topic_suffix
    cluster.create_topic(topic, 1, brokers)
    cpu, events = broker_cpu_seconds(cluster), event_lines(cluster)
    result = client(cluster.bootstrap(), topic, count, value, batched, rate)
    return Measured(
        result,
        batched and rate is None,
        broker_cpu_seconds(cluster) - cpu,
        event_lines(cluster) - events,
    )


def compare_event_log(runs: list[Run], brokers: int, value: bytes, rounds: int) -> None:
    """Two clusters at once, event log off and on; each run alternately on both, ``rounds``
    times (off/on, then on/off, ...); print every run and the on/off ratio ranges of throughput
    and of the brokers' CPU per message."""
    measured: dict[bool, list[list[Measured]]] = {False: [[] for _ in runs], True: [[] for _ in runs]}
    with tempfile.TemporaryDirectory(prefix="tidemark-broker-bench-") as directory:
        clusters = {
            enabled: LocalCluster(Path(directory) / ("on" if enabled else "off")) for enabled in (False, True)
        }
        try:
            for enabled, cluster in clusters.items():
                cluster.up(brokers, {"event.log.enable": "true" if enabled else "false"})
            print(f"two clusters of {brokers} brokers, event log off and on, runs alternating", flush=True)
            for round_number in range(1, rounds + 1):
                order = (False, True) if round_number % 2 else (True, False)
                for index, run in enumerate(runs):
                    for enabled in order:
                        done = run_once(clusters[enabled], run, brokers, value, f"-{round_number}")
                        measured[enabled][index].append(done)
                        print(
                            f"  round {round_number} event log {'on ' if enabled else 'off'}  "
                            f"{done.result.name:26s} {done.result.acked:>9,} acked = "
                            f"{done.result.throughput:>9,.0f} msg/s   p50 {done.result.percentile(0.5):7.2f} ms   "
                            f"broker CPU {done.cpu_per_message_us:7.1f} us/msg"
                            f"   {done.events:>6,} events = {done.events / max(done.result.acked, 1):.3f}/msg"
                            + (f"   {done.result.failed} FAILED" if done.result.failed else ""),
                            flush=True,
                        )
        finally:
            for cluster in clusters.values():
                cluster.down()
    print(
        f"event log on/off ratios over {rounds} rounds (on / off of the same round; throughput < 1 and "
        "latency or CPU > 1: on is slower):"
    )
    for on, off in zip(measured[True], measured[False], strict=True):
        throughput = [a.result.throughput / b.result.throughput for a, b in zip(on, off, strict=True)]
        cpu = [a.cpu_per_message_us / b.cpu_per_message_us for a, b in zip(on, off, strict=True)]
        p50 = [a.result.percentile(0.5) / b.result.percentile(0.5) for a, b in zip(on, off, strict=True)]
        print(
            f"  {on[0].result.name:26s} throughput {min(throughput):.3f} - {max(throughput):.3f} "
            f"(median {statistics.median(throughput):.3f})   p50 latency {min(p50):.3f} - {max(p50):.3f} "
            f"(median {statistics.median(p50):.3f})   broker CPU/msg {min(cpu):.3f} - {max(cpu):.3f} "
            f"(median {statistics.median(cpu):.3f})"
        )


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
    parser.add_argument(
        "--compare-event-log",
        action="store_true",
        help="only the batched runs, event log off and on alternately (see the module docstring)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of --compare-event-log (each: off and on)"
    )
    args = parser.parse_args(argv)
    if (
        min(
            args.messages,
            args.kafka_python_messages,
            args.paced_seconds,
            args.unbatched_messages,
            args.value_bytes,
            args.brokers,
            args.rounds,
        )
        < 1
    ):
        parser.error("every count must be at least 1")

    value = b"x" * args.value_bytes
    confluent_rate = TARGET_MESSAGES_PER_SECOND["confluent-kafka"]
    kafka_python_rate = TARGET_MESSAGES_PER_SECOND["kafka-python"]
    runs: list[Run] = [
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
    if args.compare_event_log:
        # The saturating runs, and the confluent-kafka unbatched one: one message per request,
        # so the most events per message (an HW move per replica per message).
        compare_event_log([runs[0], runs[1], runs[4]], args.brokers, value, args.rounds)
        return 0
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-broker-bench-") as directory:
        cluster = LocalCluster(Path(directory))
        try:
            cluster.up(args.brokers)
            print(
                f"cluster: {args.brokers} brokers, RF={args.brokers}, acks=all, {args.value_bytes}-byte values, "
                f"one partition per run",
                flush=True,
            )
            for run in runs:
                done = run_once(cluster, run, args.brokers, value)
                result = done.result
                results.append(result)
                print(
                    f"  {result.name:32s} {result.acked:>8,} acked in {result.seconds:6.2f} s = "
                    f"{result.throughput:>9,.0f} msg/s   p50 {result.percentile(0.5):7.2f} ms   "
                    f"p99 {result.percentile(0.99):7.2f} ms   [{verdict(result, done.saturating)}]",
                    flush=True,
                )
        finally:
            cluster.down()
    if args.json:
        for result in results:
            print(json.dumps(result.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
