"""KAFKA-17754's EndTxn form with a KIP-890 part 2 client, at ``transaction.version`` 1 and 2.

As ``test_request_proxy_cluster``'s librdkafka test: a local three-broker cluster behind request
proxies; the EndTxn(commit) of transaction 1 is held past the client's request timeout; the
client (kafka-python with :mod:`workloads.txn_kip890`, the workload's ``kafka-python-kip890``)
retries it on a new connection and transaction 1 commits; transaction 2 begins and produces; the
held EndTxn is released on a new connection, and the client then *aborts* transaction 2.

* ``transaction.version=1`` (historical): the client is offered EndTxn v3 and keeps its epoch;
  the late EndTxn is answered NONE -- it committed transaction 2 --, the client's abort fails
  (INVALID_TXN_STATE, fatal) and the value it meant to abort is read_committed: the anomaly.
* ``transaction.version=2``: the client sends EndTxn v5 and takes epoch 1 from the answer; the
  late EndTxn (epoch 0) is refused PRODUCER_FENCED, the abort succeeds, a third transaction
  commits, and read_committed shows exactly what the client committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker_impl.test_txn_clients import read_all
from tests.testbed.cluster.proxied_cluster import ProxiedCluster, decoded_answer
from tests.testbed.cluster.test_request_proxy_cluster import proxied_cluster
from workloads.txn_clients import TxnFatal, make_txn_producer

pytestmark = pytest.mark.timeout(300)

NONE, PRODUCER_FENCED = 0, 90
END_TXN = 26


@pytest.fixture(scope="module", params=["1", "2"], ids=["tv1", "tv2"])
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxiedCluster]:
    yield from proxied_cluster(tmp_path_factory, "kip890", {"transaction.version": request.param})


def transaction_version(proxied: ProxiedCluster) -> int:
    properties = (Path(proxied.cluster.state["brokers"]["1"]["dir"]) / "broker.properties").read_text()
    return 1 if "transaction.version=1" in properties else 2


def released_end_txn(proxied: ProxiedCluster) -> tuple[int, Any]:
    """(EndTxn version, decoded answer) of the one request the proxies released."""
    actions = proxied.actions()
    answered = [line for line in actions if line["action"] == "answered"]
    held = [line for line in actions if line["action"] == "hold"]
    assert len(answered) == len(held) == 1, actions
    version = int(held[0]["api_version"])
    return version, decoded_answer(END_TXN, version, answered[0])


def test_a_late_end_txn_commits_transaction_2_only_without_kip_890_part_2(proxied: ProxiedCluster) -> None:
    topic = "late-end-txn-kip890"
    proxied.cluster.create_topic(topic, 1, 3)
    for proxy in proxied.proxies.values():  # only the coordinator's proxy will see an EndTxn
        proxy.control.hold("EndTxn", count=1)
    client = make_txn_producer("kafka-python-kip890", proxied.cluster.client_bootstrap(), topic, 3.0)
    try:
        client.begin()
        assert client.send(topic, 0, "k", "t1", 30) == 0
        client.commit(30)  # its first EndTxn is held; the retry on a new connection commits
        coordinator = proxied.wait_holder(10)
        client.begin()
        assert client.send(topic, 0, "k", "t2", 30) == 2  # after t1 and its commit marker
        assert coordinator.release()["answered"] == 1
        version, end_txn = released_end_txn(proxied)
        if transaction_version(proxied) == 1:
            assert (version, end_txn.error_code) == (3, NONE)  # transaction 1's commit ended 2
            with pytest.raises(TxnFatal, match="InvalidTxnState"):
                client.abort(30)
            assert read_all(proxied.cluster, topic, 1, "read_committed", 2) == ["t1", "t2"]
            return
        assert (version, end_txn.error_code) == (5, PRODUCER_FENCED)
        client.abort(30)
        client.begin()
        client.send(topic, 0, "k", "t3", 30)
        client.commit(30)
        assert read_all(proxied.cluster, topic, 1, "read_committed", 2) == ["t1", "t3"]
        assert read_all(proxied.cluster, topic, 1, "read_uncommitted", 3) == ["t1", "t2", "t3"]
    finally:
        client.close()
