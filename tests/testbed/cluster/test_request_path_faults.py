"""``request-duplicate``, ``request-reset`` and ``request-delay`` against the bundled broker.

A local three-broker cluster with a request proxy in front of each broker (as a run's
``ProxiedBundledCluster`` has), the rules set through the nemesis's own acts
(:class:`nemesis.request_faults.RequestFaults`), librdkafka as the producer.  Each fault is shown
to do what it says *and* to be absorbed by what it tests: a duplicated or reset Produce is
appended once by an idempotent producer -- and twice by one without idempotence, which is the
anomaly the fault exists to provoke (the broker cannot tell a copy from a new batch without
sequence numbers).  The delay test checks every request of the path waited, in order, and the
produce still succeeded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from nemesis.request_faults import RequestFaults
from testbed.cluster.request_proxy.control import ProxyControl
from tests.broker_impl.test_txn_clients import read_all
from tests.testbed.cluster.proxied_cluster import ProxiedCluster, start_proxied

pytestmark = pytest.mark.timeout(300)


class ProxiedNodes:
    """The proxied cluster as the nemesis sees it: node ``n<id>`` has a request proxy."""

    def __init__(self, proxied: ProxiedCluster) -> None:
        self.proxied = proxied

    def request_proxy(self, node: str) -> ProxyControl:
        return self.proxied.proxies[node.removeprefix("n")].control


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedCluster]:
    started = start_proxied(
        Path(tmp_path_factory.mktemp("request-path")) / "cluster", 3, {"replica.lag.time.max.ms": "3000"}
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def acts(proxied: ProxiedCluster) -> Iterator[RequestFaults]:
    """The nemesis's acts on every broker's proxy; released (the heal) after the test."""
    faults = RequestFaults(ProxiedNodes(proxied))
    yield faults
    for node in proxied.proxies:
        faults.release(f"n{node}")


def produce_one_batch_each(
    proxied: ProxiedCluster, topic: str, idempotent: bool, count: int
) -> tuple[list[str], Producer]:
    """``count`` values, each its own batch (flushed before the next); the values sent, and the
    producer (kept open by the caller until it has looked: closing it closes its connections,
    and a copy's answer still on its way is then never seen by the proxy)."""
    producer = Producer(
        {
            "bootstrap.servers": proxied.cluster.client_bootstrap(),
            "enable.idempotence": idempotent,
            "acks": "all",
            "client.id": topic,
            "retry.backoff.ms": 50,
        }
    )
    values = [f"{topic}-{number}" for number in range(count)]
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
        assert producer.flush(30) == 0
    return values, producer


def actions_of(proxied: ProxiedCluster, action: str) -> list[dict[str, object]]:
    return [line for line in proxied.actions() if line["action"] == action]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
def test_every_produce_sent_twice_is_appended_once_with_idempotence_and_twice_without(
    proxied: ProxiedCluster, acts: RequestFaults, idempotent: bool
) -> None:
    topic = f"duplicated-{'idempotent' if idempotent else 'plain'}"
    proxied.cluster.create_topic(topic, 1, 3)
    swallowed_before = len(actions_of(proxied, "swallow"))
    for node in proxied.proxies:
        acts.duplicate(f"n{node}", ["Produce"])
    values, producer = produce_one_batch_each(proxied, topic, idempotent, 4)
    read = read_all(proxied.cluster, topic, 1, "read_uncommitted", len(values) * (1 if idempotent else 2))
    assert read == sorted(values * (1 if idempotent else 2))
    assert len(actions_of(proxied, "swallow")) - swallowed_before >= len(values)  # every copy answered
    del producer


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
def test_a_produce_reset_after_it_was_forwarded_is_retried_and_appended_once_only_with_idempotence(
    proxied: ProxiedCluster, acts: RequestFaults, idempotent: bool
) -> None:
    topic = f"reset-{'idempotent' if idempotent else 'plain'}"
    proxied.cluster.create_topic(topic, 1, 3)
    resets_before = len(actions_of(proxied, "answered-after-reset"))
    leader = str(proxied.cluster.partition_state(topic, 0)["leader"])
    acts.reset(f"n{leader}", ["Produce"])
    values, producer = produce_one_batch_each(proxied, topic, idempotent, 3)
    # the broker answered the reset Produce (it acted), the client never saw that answer
    assert len(actions_of(proxied, "answered-after-reset")) > resets_before
    expected = values if idempotent else [values[0], *values]
    assert read_all(proxied.cluster, topic, 1, "read_uncommitted", len(expected)) == sorted(expected)
    del producer


def test_a_delay_makes_every_request_of_the_path_wait_and_the_produce_still_succeeds(
    proxied: ProxiedCluster, acts: RequestFaults
) -> None:
    topic = "delayed"
    proxied.cluster.create_topic(topic, 1, 3)
    delayed_before = len(actions_of(proxied, "delay"))
    for node in proxied.proxies:
        acts.delay(f"n{node}", 100)
    values, producer = produce_one_batch_each(proxied, topic, True, 2)
    delayed = actions_of(proxied, "delay")[delayed_before:]
    assert {line["api_key"] for line in delayed if line["client_id"] == topic} >= {0, 3}  # Produce, Metadata
    assert any(line["api_key"] == 1 and line["client_id"] != topic for line in delayed)  # followers' Fetches
    assert read_all(proxied.cluster, topic, 1, "read_uncommitted", len(values)) == sorted(values)
    del producer


def test_a_reorder_lets_requests_on_different_connections_overtake_and_the_produce_still_succeeds(
    proxied: ProxiedCluster, acts: RequestFaults
) -> None:
    """Each request waits its own draw from 0..400 ms: the waits the proxies logged span the range,
    and a request that reached a proxy after another one, on another connection, was forwarded
    before it (a connection's requests are forwarded one after the other, each when its wait ends:
    a delay line is logged when the request's wait starts). Nothing acknowledged is lost."""
    topic = "reordered"
    proxied.cluster.create_topic(topic, 1, 3)
    delayed_before = len(actions_of(proxied, "delay"))
    for node in proxied.proxies:
        acts.reorder(f"n{node}", 400)
    values, producer = produce_one_batch_each(proxied, topic, True, 4)
    delayed = actions_of(proxied, "delay")[delayed_before:]
    waits = [int(str(line["ms"])) for line in delayed]
    assert min(waits) >= 0 and max(waits) <= 400 and max(waits) - min(waits) >= 200, waits
    assert any(line["api_key"] == 0 and line["client_id"] == topic for line in delayed)  # the Produces
    forwarded = [
        (
            str(line["broker"]),
            line["conn"],
            float(str(line["time"])),
            float(str(line["time"])) + int(str(line["ms"])) / 1000,
        )
        for line in delayed
    ]
    overtaken = [
        (first, second)
        for first in forwarded
        for second in forwarded
        if first[0] == second[0] and first[1] != second[1] and first[2] < second[2] and first[3] > second[3]
    ]
    assert overtaken, "no request overtook an earlier one on another connection"
    assert read_all(proxied.cluster, topic, 1, "read_uncommitted", len(values)) == sorted(values)
    del producer
