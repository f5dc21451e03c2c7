"""Benchmark: what hosting the workload's producers in child processes (``--client-processes``)
costs, beside the same producers as threads' clients, in one invocation.

    .venv/bin/python bench/client_processes.py [--sends 2000] [--producers 4] [--rounds 3]
        [--brokers 3] [--client kafka-python|confluent-kafka]

Starts one local cluster (``broker_impl.localcluster``) and, ``--rounds`` times, alternating the
order so that a drift of the machine's speed hits both alike, runs ``--producers`` threads that
each send ``--sends`` records one at a time as the queue workload does (``send`` waits for the
acknowledgement, acks=all, idempotent):

* ``threads`` -- each thread's producer is made in this process
  (:func:`workloads.clients.make_producer`, the default);
* ``processes`` -- each thread's producer lives in a child process
  (:meth:`workloads.client_host.ClientHost.producer`), every send a request and an answer over
  its pipe.

Printed per run: acknowledged sends per second over all producers, and the median and 99th
percentile of one send's latency; then the range over rounds of the ratio processes/threads (a
range, not one figure, on a shared machine).  Every send must be acknowledged, or the run is
reported failed and not counted.  The cluster and the client processes are stopped, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_impl.localcluster import LocalCluster
from workloads.client_host import ClientHost
from workloads.clients import ProducerClient, make_producer

SETTINGS = {"replica.lag.time.max.ms": "3000"}
REQUEST_TIMEOUT = 10.0
KINDS = ("threads", "processes")


def run(
    kind: str, bootstrap: str, topic: str, producers: int, sends: int, client: str
) -> tuple[float, list[float]]:
    """Seconds from the first send to the last acknowledgement, and every send's latency."""
    host = ClientHost()
    made: list[ProducerClient] = []
    for index in range(producers):
        args = (client, bootstrap, "all", True, REQUEST_TIMEOUT)
        made.append(make_producer(*args) if kind == "threads" else host.producer(index, *args))
    latencies: list[list[float]] = [[] for _ in made]
    failures: list[str] = []

    def send_all(index: int) -> None:
        for number in range(sends):
            begun = time.perf_counter()
            try:
                made[index].send(topic, index, f"k{index}", str(number), REQUEST_TIMEOUT)
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}")
                return
            latencies[index].append(time.perf_counter() - begun)

    threads = [threading.Thread(target=send_all, args=(index,)) for index in range(producers)]
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
    finally:
        for producer in made:
            producer.close()
        host.shutdown()
    if failures:
        raise RuntimeError(f"{kind}: {len(failures)} sends failed, e.g. {failures[0]}")
    return seconds, [latency for per_producer in latencies for latency in per_producer]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sends", type=int, default=2000, help="sends per producer")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--client", choices=("kafka-python", "confluent-kafka"), default="kafka-python")
    args = parser.parse_args(argv)
    if min(args.sends, args.producers, args.rounds, args.brokers) < 1:
        parser.error("--sends, --producers, --rounds and --brokers must be >= 1")
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-client-bench-") as scratch:
        cluster = LocalCluster(Path(scratch) / "cluster")
        try:
            cluster.up(args.brokers, SETTINGS)
            print(f"{args.client}: {args.producers} producers x {args.sends} sends, {args.brokers} brokers")
            for round_number in range(args.rounds):
                order = KINDS if round_number % 2 == 0 else KINDS[::-1]
                rates: dict[str, float] = {}
                for kind in order:
                    topic = f"bench-{kind}-{round_number}"
                    cluster.create_topic(topic, args.producers, args.brokers)
                    cluster.wait_for_leaders(topic)
                    try:
                        seconds, latencies = run(
                            kind, cluster.bootstrap(), topic, args.producers, args.sends, args.client
                        )
                    except RuntimeError as error:
                        print(f"  round {round_number + 1} {kind:>9}: FAILED, not counted: {error}")
                        continue
                    rates[kind] = len(latencies) / seconds
                    cuts = statistics.quantiles(latencies, n=100)
                    print(
                        f"  round {round_number + 1} {kind:>9}: {rates[kind]:8,.0f} sends/s"
                        f"  p50 {cuts[49] * 1000:6.2f} ms  p99 {cuts[98] * 1000:6.2f} ms"
                    )
                if len(rates) == len(KINDS):
                    ratios.append(rates["processes"] / rates["threads"])
        finally:
            cluster.down()
    if ratios:
        print(
            f"processes / threads throughput: {min(ratios):.3f} .. {max(ratios):.3f} over {len(ratios)} rounds"
        )
    return 0 if ratios else 1


if __name__ == "__main__":
    sys.exit(main())
