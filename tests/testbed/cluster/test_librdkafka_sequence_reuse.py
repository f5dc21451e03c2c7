"""librdkafka reuses a possibly written sequence after an abort: a phantom acknowledgement.

Found by the txn workload's fault test (``test_txn_workload_cluster``, confluent-kafka, one CI run
of ~15): a committed transaction's send was acknowledged at an offset that holds another value, of
an earlier transaction the same producer aborted.  The mechanism, pinned here deterministically
with the request proxy in front of the partition's leader (confluent-kafka 2.16, librdkafka 2.16):

1. transaction 2's Produce of ``lost`` is forwarded and appended, and the client's connection is
   reset before the answer (``reset``): librdkafka marks the message possibly persisted and queues
   it for a retry; every retry is dropped (``drop``), so it stays queued;
2. the application gives up waiting for its delivery report and aborts; librdkafka purges the
   queued message and advances its epoch's base message id past it
   (``rd_kafka_toppar_purge_queues`` with ``RD_KAFKA_PURGE_F_ABORT_TXN``) without looking at the
   message's status -- and no epoch bump follows (a dropped connection is retriable, not an
   "abortable error with bump");
3. transaction 3's first message gets ``lost``'s sequence, same producer id, same epoch; the broker,
   like Kafka's ``ProducerStateManager``, takes it for a retry of the batch it holds and answers
   with that batch's offset.  The client is told ``after`` is written; it never was, and the
   commit commits nothing of it.

Kafka's Java client cannot do this (it numbers a batch when it sends it and bumps the epoch after
any failed batch); a ``transaction.version=2`` broker would bump the epoch at every EndTxn, but
librdkafka sends EndTxn v1.  The workarounds, which :mod:`workloads.txn_clients` and
:mod:`workloads.txn` apply to confluent-kafka producers: wait for the delivery report until
librdkafka times the message out itself, which bumps the epoch of a possibly written message (the
third test); and when no report came even then, a new producer of the same ``transactional.id``
after the abort (its ``init_transactions`` bumps the epoch, so sequences start again at 0) -- the
second test.  The first fails once a librdkafka release fixes this: then ``REUSES_SEQUENCES`` can
let it go.
Written up for upstream in ``docs/bugs.md`` ("Found in a client").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.testbed.cluster.proxied_cluster import ProxiedCluster
from tests.testbed.cluster.test_request_proxy_cluster import proxied_cluster, reset, transactional

pytestmark = pytest.mark.timeout(300)

ONE_MESSAGE_A_BATCH = {"linger.ms": 0, "batch.num.messages": 1}
"""A batch's sequence range is one message's: a later message can match a purged one's exactly."""
SLOW_RETRIES = {"retry.backoff.ms": 1000, "retry.backoff.max.ms": 1000}
"""The queued retry waits a second between attempts, so the abort finds it queued, not in flight."""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedCluster]:
    yield from proxied_cluster(tmp_path_factory, "sequence-reuse", {})


Delivery = tuple[KafkaError | None, int]


def send(client: Producer, topic: str, value: bytes, wait: float) -> Delivery | None:
    """Produce ``value`` to partition 0 and poll for its delivery report: (error, offset), or None
    when none came within ``wait`` seconds."""
    reports: list[Delivery] = []
    client.produce(
        topic,
        value,
        partition=0,
        on_delivery=lambda error, message: reports.append((error, message.offset())),
    )
    deadline = time.monotonic() + wait
    while not reports and time.monotonic() < deadline:
        client.poll(0.1)
    return reports[0] if reports else None


def abort(client: Producer) -> None:
    """``abort_transaction``, again while librdkafka says the abort may be retried (a purged
    message that was in flight comes back to the queue and the first attempt's flush times out)."""
    for _ in range(5):
        try:
            client.abort_transaction(10)
            return
        except KafkaException as error:
            if not error.args[0].retriable():
                raise
    raise AssertionError("abort_transaction did not complete in 5 attempts")


def records(proxied: ProxiedCluster, topic: str, isolation: str) -> dict[int, bytes]:
    """offset -> value of every record of partition 0 a reader of ``isolation`` sees."""
    reader = Consumer(
        {
            "bootstrap.servers": proxied.cluster.bootstrap(),
            "group.id": f"reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return seen
            seen[message.offset()] = message.value()
        raise AssertionError(f"no end of partition 0 of {topic} within 30 s: {seen}")
    finally:
        reader.close()


def abort_a_possibly_written_message(
    proxied: ProxiedCluster, topic: str, message_timeout_ms: int | None = None
) -> tuple[Producer, int]:
    """Transaction 1 commits ``a0`` and ``a1``; transaction 2's ``lost`` is appended while the
    client's connection is reset, its retries dropped, and the client aborts -- without a delivery
    report, or, given ``message_timeout_ms``, once librdkafka timed ``lost`` out itself
    (``_MSG_TIMED_OUT``).  The client (its transaction ended) and ``lost``'s offset."""
    reset(proxied, topic)
    timeout = {} if message_timeout_ms is None else {"message.timeout.ms": message_timeout_ms}
    client = transactional(proxied, topic, **ONE_MESSAGE_A_BATCH, **SLOW_RETRIES, **timeout)
    client.begin_transaction()
    assert [send(client, topic, value, 30) for value in (b"a0", b"a1")] == [(None, 0), (None, 1)]
    client.commit_transaction(30)

    client.begin_transaction()
    leader = proxied.leader_proxy(topic).control
    leader.reset("Produce", client=topic, count=1)  # forwarded, then the connection reset
    leader.drop("Produce", client=topic)  # every retry: the connection closed instead
    if message_timeout_ms is None:
        assert send(client, topic, b"lost", 5) is None  # possibly persisted, queued for a retry
    else:
        report = send(client, topic, b"lost", 30)
        assert report is not None and report[0] is not None, report
        assert report[0].code() == KafkaError._MSG_TIMED_OUT, report
    abort(client)
    leader.clear()
    written = {value: offset for offset, value in records(proxied, topic, "read_uncommitted").items()}
    assert written.keys() == {b"a0", b"a1", b"lost"}  # the broker appended it; the abort covers it
    return client, written[b"lost"]


def writes_the_next_transaction(proxied: ProxiedCluster, topic: str, client: Producer, lost_at: int) -> None:
    """``client``'s next transaction writes ``after`` past ``lost``'s offset, read_committed."""
    client.begin_transaction()
    error, offset = send(client, topic, b"after", 30) or (None, -1)
    client.commit_transaction(30)
    assert error is None and offset > lost_at
    committed = records(proxied, topic, "read_committed")
    assert committed == {0: b"a0", 1: b"a1", offset: b"after"}


def test_the_next_transaction_reuses_the_aborted_message_s_sequence_and_is_acknowledged_unwritten(
    proxied: ProxiedCluster,
) -> None:
    topic = "sequence-reuse"
    client, lost_at = abort_a_possibly_written_message(proxied, topic)
    client.begin_transaction()
    acknowledged = send(client, topic, b"after", 30)
    client.commit_transaction(30)
    assert acknowledged == (None, lost_at)  # the broker's answer for the batch it already holds
    committed = records(proxied, topic, "read_committed")
    assert sorted(committed.values()) == [b"a0", b"a1"]  # "after" was never written


def test_a_new_producer_of_the_same_transactional_id_after_the_abort_writes_the_next_transaction(
    proxied: ProxiedCluster,
) -> None:
    topic = "sequence-fresh"
    old, lost_at = abort_a_possibly_written_message(proxied, topic)
    del old  # librdkafka's producer is destroyed with its last reference
    client: Any = transactional(proxied, topic, **ONE_MESSAGE_A_BATCH)  # InitProducerId: a new epoch
    writes_the_next_transaction(proxied, topic, client, lost_at)


def test_a_producer_that_lets_the_message_time_out_before_the_abort_writes_the_next_transaction(
    proxied: ProxiedCluster,
) -> None:
    """The workaround :mod:`workloads.txn_clients` applies first: wait for the delivery report
    until librdkafka times the message out itself.  A possibly persisted message that times out
    makes librdkafka bump the epoch (``rd_kafka_idemp_drain_epoch_bump``), so the same producer's
    next transaction starts its sequences again and is written."""
    topic = "sequence-timed-out"
    client, lost_at = abort_a_possibly_written_message(proxied, topic, message_timeout_ms=5000)
    writes_the_next_transaction(proxied, topic, client, lost_at)
