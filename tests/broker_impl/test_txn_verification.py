"""``transaction.partition.verification.enable`` (KIP-890 part 1, KAFKA-14402), both forms.

A transactional produce that arrives after its transaction ended -- a delayed or retried request
-- is the "hanging transaction": with verification (the safe default) the partition leader asks
the coordinator, which says the transaction is over, and the batch is refused
(INVALID_TXN_STATE); without it (the historical form) the batch is appended, opens a transaction
no marker will end, and holds the partition's LSO there while its HW moves on.

The rule itself is pure (:func:`broker_impl.txn_state.verify_partition`); the process-level test
drives the protocol by hand (FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce,
EndTxn), so the late produce can be sent exactly when wanted.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from broker_impl import wire
from broker_impl.localcluster import LocalCluster, _call
from broker_impl.txn_state import INVALID_TXN_STATE, PRODUCER_FENCED, TxnMetadata, TxnState, verify_partition
from testbed.record.events import read_events

from .batch_builder import make_batch
from .test_txn_clients import list_offset

ONGOING = TxnMetadata("tx", 7, 0, 60000, TxnState.ONGOING, frozenset({("t", 0)}), 1, 1)


def test_the_rule_admits_only_an_ongoing_transaction_holding_the_partition() -> None:
    assert verify_partition(ONGOING, 7, 0, ("t", 0)) == 0
    assert verify_partition(ONGOING, 7, 0, ("t", 1)) == INVALID_TXN_STATE  # never added
    assert verify_partition(ONGOING, 7, 1, ("t", 0)) == PRODUCER_FENCED
    ended = dataclasses.replace(ONGOING, state=TxnState.COMPLETE_COMMIT, partitions=frozenset())
    assert verify_partition(ended, 7, 0, ("t", 0)) == INVALID_TXN_STATE  # the late produce


def call(address: str, api_key: int, version: int, **fields: Any) -> Any:
    return _call(address, api_key, version, wire.APIS[api_key].request(version=version, **fields), timeout=10)


def produce(cluster: LocalCluster, topic: str, batch: bytearray, transactional_id: str | None) -> int:
    leader = cluster.partition_state(topic, 0)["leader"]
    request_class = wire.APIS[0].request
    data = wire.nested(request_class, "TopicProduceData", "PartitionProduceData")(
        index=0, records=bytes(batch)
    )
    response = call(
        cluster.state["brokers"][str(leader)]["address"],
        0,
        7,
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[wire.nested(request_class, "TopicProduceData")(name=topic, partition_data=[data])],
    )
    return int(response.responses[0].partition_responses[0].error_code)


def coordinator_address(cluster: LocalCluster, transactional_id: str) -> str:
    for _ in range(50):
        found = call(cluster.bootstrap().split(",")[0], 10, 3, key=transactional_id, key_type=1)
        if found.error_code == 0:
            return f"{found.host}:{found.port}"
        time.sleep(0.2)
    raise AssertionError("no transaction coordinator")


def retry(action: Any, what: str) -> Any:
    """``action()`` until its error code is 0 (a coordinator still loading answers 14 / 51)."""
    for _ in range(100):
        response = action()
        if response.error_code == 0:
            return response
        time.sleep(0.1)
    raise AssertionError(f"{what}: error {response.error_code}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("verification", ["true", "false"])
def test_a_late_transactional_produce_hangs_the_lso_only_without_verification(
    tmp_path: Path, verification: str
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(
        3, {"transaction.partition.verification.enable": verification, "replica.lag.time.max.ms": "3000"}
    )
    try:
        topic, transactional_id = "hang", "hang-producer"
        cluster.create_topic(topic, 1, 3)
        cluster.wait_for_leaders(topic)
        address = coordinator_address(cluster, transactional_id)
        init = retry(lambda: call(address, 22, 3, transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), "InitProducerId")  # fmt: skip
        producer = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        topic_class = wire.nested(wire.APIS[24].request, "AddPartitionsToTxnTopic")
        added = call(address, 24, 3, v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=init.producer_id, v3_and_below_producer_epoch=init.producer_epoch, v3_and_below_topics=[topic_class(name=topic, partitions=[0])])  # fmt: skip
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        def batch(value: bytes, sequence: int) -> bytearray:
            return make_batch([value], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=sequence, transactional=True)  # fmt: skip

        assert produce(cluster, topic, batch(b"in-time", 0), transactional_id) == 0
        retry(
            lambda: call(address, 26, 3, transactional_id=transactional_id, committed=True, **producer),
            "EndTxn",
        )
        cluster.wait_for(lambda: list_offset(cluster, topic, 1) == 2, 10, "the commit marker")
        late = produce(cluster, topic, batch(b"late", 1), transactional_id)  # the delayed retry
        assert produce(cluster, topic, make_batch([b"plain"]), None) == 0
        hw, lso = list_offset(cluster, topic, 0), list_offset(cluster, topic, 1)
        found = [
            e
            for path in sorted(cluster.directory.glob("broker-*/**/broker-events.jsonl"))
            for e in read_events(path)
        ]
        of_topic = [e for e in found if e.get("topic") == topic]
        refused = [(e["error"], e["producer_id"]) for e in of_topic if e["kind"] == "producer-refused"]
        opened = [e["first_offset"] for e in of_topic if e["kind"] == "txn-open"]
        lsos = [e["lso"] for e in of_topic if e["kind"] == "hw" and e["role"] == "leader"]
        if verification == "true":
            assert late == INVALID_TXN_STATE
            assert lso == hw == 3
            assert (refused, opened, lsos[-1]) == ([("INVALID_TXN_STATE", init.producer_id)], [0], 3)
        else:
            assert late == 0
            assert (hw, lso) == (4, 2)  # the late batch at 2 opened a transaction nothing ends
            assert (refused, opened, lsos[-1]) == ([], [0, 2], 2)  # white-box: the open one holds the LSO
    finally:
        cluster.down()
