"""Benchmark: what transactions cost in the bundled broker -- committed transactions of N records
beside the same records sent by an idempotent acks=all producer, in one invocation.

    .venv/bin/python bench/txn_throughput.py [--transactions 1000] [--records 10] [--rounds 3]
        [--brokers 3] [--partitions 1] [--value-bytes 100]
        [--client confluent-kafka|kafka-python|kafka-python-kip890]

Starts one local cluster (``broker_impl.localcluster``: a controller and ``--brokers`` broker
processes on 127.0.0.x) and, ``--rounds`` times, alternating the order (plain first, then
transactional first, ...) so that a drift of the machine's speed hits both alike:

* ``plain`` -- an idempotent acks=all producer sends ``transactions x records`` records and
  waits for every acknowledgement (``flush`` once, at the end: batching as it likes);
* ``transactional`` -- a transactional producer (``init_transactions`` once) runs
  ``--transactions`` transactions, each ``begin``, ``--records`` sends, ``commit`` (which waits
  for the records' acks, the EndTxn round trip to the coordinator, and the coordinator's
  PrepareCommit/CompleteCommit records and markers, all acks=all).

Each run has a topic of its own (``--partitions`` partitions, replication factor = brokers).
Printed: records per second and transactions per second of every run, the broker processes' CPU
seconds per record (from /proc), and the range over rounds of the ratio transactional/plain --
a range, not one figure, on a shared machine.  Every record is checked as acknowledged; a failed
run is reported, never counted.  The processes are stopped, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_throughput import broker_cpu_seconds
from broker_impl.localcluster import LocalCluster

SETTINGS = {"group.initial.rebalance.delay.ms": "0", "replica.lag.time.max.ms": "3000"}
Runner = Callable[[str, str, int, int, bytes, str], float]
"""(bootstrap, topic, transactions, records per transaction, value, transactional id or "")
-> seconds from the first send to the last acknowledgement (or commit)."""


def run_confluent(bootstrap: str, topic: str, txns: int, records: int, value: bytes, txn_id: str) -> float:
    from confluent_kafka import Producer

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 60_000,
    }
    if txn_id:
        config["transactional.id"] = txn_id
    producer = Producer(config)
    failed: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(error)

    if txn_id:
        producer.init_transactions(60)
    started = time.perf_counter()
    for _ in range(txns):
        if txn_id:
            producer.begin_transaction()
        for _ in range(records):
            producer.produce(topic, value, on_delivery=delivered)
        if txn_id:
            producer.commit_transaction(60)
        else:
            producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"{len(failed)} record(s) failed: {failed[:3]}")
    return time.perf_counter() - started


def run_kafka_python(
    bootstrap: str, topic: str, txns: int, records: int, value: bytes, txn_id: str, kip890: bool = False
) -> float:
    from kafka import KafkaProducer

    from workloads.txn_kip890 import enable_kip890

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        transactional_id=txn_id or None,
    )
    if kip890 and txn_id:
        enable_kip890(producer)  # EndTxn v5: the epoch bumped at every end (KIP-890 part 2)
    try:
        if txn_id:
            producer.init_transactions()
        started = time.perf_counter()
        futures = []
        for _ in range(txns):
            if txn_id:
                producer.begin_transaction()
            futures += [producer.send(topic, value) for _ in range(records)]
            if txn_id:
                producer.commit_transaction()
        producer.flush(120)
        for future in futures:
            future.get(timeout=60)  # raises on a failed record
        return time.perf_counter() - started
    finally:
        producer.close(10)


def run_kafka_python_kip890(
    bootstrap: str, topic: str, txns: int, records: int, value: bytes, txn_id: str
) -> float:
    return run_kafka_python(bootstrap, topic, txns, records, value, txn_id, kip890=True)


CLIENTS: dict[str, Runner] = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "kafka-python-kip890": run_kafka_python_kip890,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10, help="records per transaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--client", choices=sorted(CLIENTS), default="confluent-kafka")
    args = parser.parse_args(argv)
    if min(args.transactions, args.records, args.rounds, args.brokers, args.partitions) < 1:
        parser.error("--transactions, --records, --rounds, --brokers and --partitions must be >= 1")
    run = CLIENTS[args.client]
    value = b"x" * args.value_bytes
    total = args.transactions * args.records
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-txn-bench-") as scratch:
        cluster = LocalCluster(Path(scratch) / "cluster")
        try:
            cluster.up(args.brokers, SETTINGS)
            print(
                f"{args.client}: {args.transactions} transactions x {args.records} records, {args.brokers} brokers"
            )
            for round_number in range(args.rounds):
                order = ["plain", "transactional"] if round_number % 2 == 0 else ["transactional", "plain"]
                rates: dict[str, float] = {}
                for kind in order:
                    topic = f"bench-{kind}-{round_number}"
                    cluster.create_topic(topic, args.partitions, args.brokers)
                    cluster.wait_for_leaders(topic)
                    cpu = broker_cpu_seconds(cluster)
                    txn_id = f"bench-{round_number}" if kind == "transactional" else ""
                    seconds = run(cluster.bootstrap(), topic, args.transactions, args.records, value, txn_id)
                    cpu_us = (broker_cpu_seconds(cluster) - cpu) / total * 1e6
                    rates[kind] = total / seconds
                    txns = f"  {args.transactions / seconds:8,.0f} txn/s" if txn_id else ""
                    print(
                        f"  round {round_number + 1} {kind:>13}: {rates[kind]:9,.0f} records/s{txns}"
                        f"  broker CPU {cpu_us:6.0f} us/record"
                    )
                ratios.append(rates["transactional"] / rates["plain"])
        finally:
            cluster.down()
    print(
        f"transactional / plain throughput: {min(ratios):.3f} .. {max(ratios):.3f} over {len(ratios)} rounds"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
