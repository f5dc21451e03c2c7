"""Late requests through the request proxy against the bundled broker, with librdkafka's producer.

A local three-broker cluster, a request proxy in front of each broker, confluent-kafka 2.16
(librdkafka 2.16.0) as the transactional client, ``transaction.partition.verification.enable``
true and false.  Each test holds one request, lets the client move on, releases the request on a
new connection (its answer goes nowhere, as when the client gave up on it) and pins what the
broker did.  What these tests found (they fail when it changes):

* **KAFKA-17754, EndTxn form -- reproduced, with and without verification.**  The EndTxn(commit)
  of transaction 1 is held; librdkafka times it out (``socket.timeout.ms``), retries it on a new
  connection and transaction 1 commits; transaction 2 begins (same producer id and epoch:
  librdkafka sends EndTxn v1 -- it asks for at most v1 -- so no epoch bump per transaction) and
  produces; the held EndTxn(commit) is released and is answered NONE: it commits transaction 2.
  The client's abort of transaction 2 then fails fatally (INVALID_TXN_STATE) and the value it
  meant to abort is read_committed.  Partition verification (KIP-890 part 1) does not help: it
  guards Produce, not EndTxn.  Nor does ``transaction.version=2`` (the default here): librdkafka
  never uses EndTxn v5, so the coordinator keeps its epoch; a client of v5 is protected
  (``test_request_proxy_kip890``).
* **KAFKA-14402 -- reproduced without verification, prevented with it.**  The first Produce of
  transaction 1 is held; librdkafka times it out (``message.timeout.ms``), the transaction fails
  ("requires epoch bump"), the client aborts (EndTxn with the old epoch: the markers carry it)
  and librdkafka bumps the epoch (InitProducerId v4, KIP-360).  The held Produce, of the old
  epoch, is then released: with verification off it is appended (NONE) after the abort marker
  and opens a transaction nothing ends -- the LSO stays below the high watermark; with
  verification on the leader asks the coordinator, which answers PRODUCER_FENCED, and the LSO
  is the high watermark.
* **Idempotence holds.**  An idempotent producer's first Produce is held and its connection
  closed (``disconnect``): librdkafka retries it on a new connection at once, same sequence.
  Released after two more batches, the late copy is answered NONE with the first copy's offset
  and not appended (the broker remembers the last five batches, as Kafka); after eight, it is
  refused OUT_OF_ORDER_SEQUENCE_NUMBER, not appended either.
* **KAFKA-17754, Produce form -- not reachable with librdkafka.**  Same hold, but transaction 2
  begins and produces before the release: its Produce carried the bumped epoch, so the late one
  is refused INVALID_PRODUCER_EPOCH whatever the verification setting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from kafka import KafkaProducer

from testbed.cluster.request_proxy.control import ProxyControl
from tests.broker_impl.test_txn_clients import list_offset, read_all
from tests.testbed.cluster.proxied_cluster import ProxiedCluster, decoded_answer, start_proxied

pytestmark = pytest.mark.timeout(300)

NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 0, 45, 47, 90


def proxied_cluster(
    tmp_path_factory: pytest.TempPathFactory, name: str, settings: dict[str, str]
) -> Iterator[ProxiedCluster]:
    """A proxied cluster of three brokers with ``settings`` on top of quick test timings, for a
    module's fixture: yields it, stops it."""
    started = start_proxied(
        Path(tmp_path_factory.mktemp(name)) / "cluster",
        3,
        {
            "group.initial.rebalance.delay.ms": "0",
            "replica.lag.time.max.ms": "3000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            **settings,
        },
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module", params=["true", "false"], ids=["verification", "no-verification"])
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxiedCluster]:
    yield from proxied_cluster(
        tmp_path_factory, "proxied", {"transaction.partition.verification.enable": request.param}
    )


def verifying(proxied: ProxiedCluster) -> bool:
    return (
        "transaction.partition.verification.enable=true"
        in (Path(proxied.cluster.state["brokers"]["1"]["dir"]) / "broker.properties").read_text()
    )


def transactional(proxied: ProxiedCluster, name: str, **config: Any) -> Producer:
    client = Producer(
        {
            "bootstrap.servers": proxied.cluster.client_bootstrap(),
            "transactional.id": name,
            "client.id": name,
            "transaction.timeout.ms": 60000,
            **config,
        }
    )
    client.init_transactions(30)
    return client


def released_answer(proxied: ProxiedCluster, api_key: int, version: int) -> Any:
    """The broker's answer to the one request the proxies released, decoded."""
    answered = [line for line in proxied.actions() if line["action"] == "answered"]
    assert len(answered) == 1, answered
    return decoded_answer(api_key, version, answered[0])


def reset(proxied: ProxiedCluster, topic: str) -> None:
    for proxy in proxied.proxies.values():
        proxy.control.clear()
        proxy.log.write_text("")
    proxied.cluster.create_topic(topic, 1, 3)


TRANSACTION_APIS = ["Produce", "InitProducerId", "AddPartitionsToTxn", "EndTxn"]


def observed_versions(proxied: ProxiedCluster, client_id: str) -> dict[int, set[int]]:
    """API key -> the versions the proxies saw ``client_id`` send (``observe`` rules)."""
    versions: dict[int, set[int]] = {}
    for line in proxied.actions():
        if line["action"] == "observe" and line["client_id"] == client_id:
            versions.setdefault(line["api_key"], set()).add(line["api_version"])
    return versions


def test_the_clients_speak_transactions_below_kip_890_part_2(proxied: ProxiedCluster) -> None:
    """librdkafka 2.16 sends EndTxn v1 and AddPartitionsToTxn v0, kafka-python 3.0.12 EndTxn v3:
    neither bumps the epoch per transaction (EndTxn v5), so a late request of transaction N
    carries the epoch of transaction N+1.  (The bundled broker offers EndTxn up to v5 here, at
    ``transaction.version=2``; both send their own ceilings.)"""
    reset(proxied, "versions")
    for proxy in proxied.proxies.values():
        proxy.control.observe(TRANSACTION_APIS)
    rdkafka = transactional(proxied, "versions-rdkafka")
    rdkafka.begin_transaction()
    rdkafka.produce("versions", value=b"r", partition=0)
    rdkafka.commit_transaction(30)
    python = KafkaProducer(
        bootstrap_servers=proxied.cluster.client_bootstrap(),
        transactional_id="versions-python",
        client_id="versions-python",
    )
    try:
        python.init_transactions()
        python.begin_transaction()
        python.send("versions", value=b"p", partition=0)
        python.commit_transaction()
    finally:
        python.close()
    assert observed_versions(proxied, "versions-rdkafka") == {0: {10}, 22: {4}, 24: {0}, 26: {1}}
    assert observed_versions(proxied, "versions-python") == {0: {9}, 22: {4}, 24: {3}, 26: {3}}


def test_a_late_end_txn_of_transaction_1_commits_transaction_2(proxied: ProxiedCluster) -> None:
    """KAFKA-17754 (EndTxn form): reproduced whatever the verification setting."""
    reset(proxied, "late-end-txn")
    for proxy in proxied.proxies.values():  # only the coordinator's proxy will see an EndTxn
        proxy.control.hold("EndTxn", client="late-end-txn", count=1)
    client = transactional(proxied, "late-end-txn", **{"socket.timeout.ms": 3000})
    client.begin_transaction()
    client.produce("late-end-txn", value=b"t1", partition=0)
    client.commit_transaction(30)  # its first EndTxn is held; the retry on a new connection commits
    coordinator = proxied.wait_holder(10)
    client.begin_transaction()
    client.produce("late-end-txn", value=b"t2", partition=0)
    assert client.flush(30) == 0
    assert coordinator.release()["answered"] == 1
    end_txn = released_answer(proxied, 26, 1)
    assert end_txn.error_code == NONE  # transaction 1's commit ended transaction 2
    with pytest.raises(KafkaException, match="INVALID_TXN_STATE"):
        client.abort_transaction(30)
    assert read_all(proxied.cluster, "late-end-txn", 1, "read_committed", 2) == ["t1", "t2"]


def hold_first_produce_until_aborted(proxied: ProxiedCluster, topic: str) -> tuple[Producer, ProxyControl]:
    """Transaction 1's first Produce held past ``message.timeout.ms``; the client aborts it.
    The client, and the control of the proxy holding the Produce (the leader's when it was sent)."""
    reset(proxied, topic)
    for proxy in proxied.proxies.values():  # every broker's: the leader may move before the Produce
        proxy.control.hold("Produce", client=topic, count=1)
    client = transactional(proxied, topic, **{"message.timeout.ms": 4000})
    client.begin_transaction()
    client.produce(topic, value=b"t1", partition=0)
    holder = proxied.wait_holder(10)
    assert client.flush(30) == 0  # the message timed out: "requires epoch bump"
    client.abort_transaction(30)  # EndTxn(abort), then InitProducerId bumps the epoch
    return client, holder


def test_a_late_produce_after_the_abort_hangs_the_lso_without_verification(proxied: ProxiedCluster) -> None:
    """KAFKA-14402: reproduced without verification, prevented with it."""
    topic = "late-produce-alone"
    _, holder = hold_first_produce_until_aborted(proxied, topic)
    assert holder.release()["answered"] == 1
    partition = released_answer(proxied, 0, 10).responses[0].partition_responses[0]
    high_watermark = list_offset(proxied.cluster, topic, 0)
    if verifying(proxied):
        assert partition.error_code == PRODUCER_FENCED
        assert list_offset(proxied.cluster, topic, 1) == high_watermark == 1  # the abort marker only
        return
    assert (partition.error_code, partition.base_offset, high_watermark) == (NONE, 1, 2)
    deadline = time.monotonic() + 5  # ten coordinator cleanup intervals: nothing ends it
    while time.monotonic() < deadline:
        assert list_offset(proxied.cluster, topic, 1) == 1  # the LSO stays at the late record
        time.sleep(0.5)
    assert read_all(proxied.cluster, topic, 1, "read_uncommitted", 1) == ["t1"]


def test_a_late_produce_after_the_next_transaction_produced_is_fenced_by_the_bumped_epoch(
    proxied: ProxiedCluster,
) -> None:
    """KAFKA-17754 (Produce form): not reachable with librdkafka, which bumps the epoch first."""
    topic = "late-produce-next"
    client, holder = hold_first_produce_until_aborted(proxied, topic)
    client.begin_transaction()
    client.produce(topic, value=b"t2", partition=0)
    assert client.flush(30) == 0
    assert holder.release()["answered"] == 1
    partition = released_answer(proxied, 0, 10).responses[0].partition_responses[0]
    assert partition.error_code == INVALID_PRODUCER_EPOCH
    client.commit_transaction(30)
    assert read_all(proxied.cluster, topic, 1, "read_committed", 1) == ["t2"]


@pytest.mark.parametrize(
    ("later_batches", "error", "offset"), [(2, NONE, 0), (8, OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
)
def test_a_late_copy_of_an_idempotent_produce_is_never_appended(
    proxied: ProxiedCluster, later_batches: int, error: int, offset: int
) -> None:
    topic = f"late-idempotent-{later_batches}"
    reset(proxied, topic)
    for proxy in proxied.proxies.values():
        proxy.control.hold("Produce", client=topic, count=1, disconnect=True)
    client = Producer(
        {
            "bootstrap.servers": proxied.cluster.client_bootstrap(),
            "enable.idempotence": True,
            "client.id": topic,
        }
    )
    values = [f"v{number}".encode() for number in range(later_batches + 1)]
    for value in values:  # one batch each: the first is held, and retried at once elsewhere
        client.produce(topic, value, partition=0)
        assert client.flush(30) == 0
    assert proxied.wait_holder(10).release()["answered"] == 1
    partition = released_answer(proxied, 0, 10).responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (error, offset)
    assert list_offset(proxied.cluster, topic, 0) == len(values)
    assert read_all(proxied.cluster, topic, 1, "read_uncommitted", len(values)) == sorted(
        value.decode() for value in values
    )
