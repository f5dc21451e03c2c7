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
from broker_impl.group_handlers import UNSTABLE_OFFSET_COMMIT
from broker_impl.group_records import OFFSETS_TOPIC
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


def coordinator_address(cluster: LocalCluster, key: str, key_type: int = 1) -> str:
    """The address of the coordinator of transactional id (``key_type`` 1) or group (0) ``key``."""
    for _ in range(50):
        found = call(cluster.bootstrap().split(",")[0], 10, 3, key=key, key_type=key_type)
        if found.error_code == 0:
            return f"{found.host}:{found.port}"
        time.sleep(0.2)
    raise AssertionError(f"no coordinator of {key!r}")


def events_of(cluster: LocalCluster, topic: str) -> list[dict[str, Any]]:
    """Every broker's recorded events about ``topic``, broker by broker."""
    return [
        event
        for path in sorted(cluster.directory.glob("broker-*/**/broker-events.jsonl"))
        for event in read_events(path)
        if event.get("topic") == topic
    ]


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
        of_topic = events_of(cluster, topic)
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


COORDINATOR_NOT_READY = frozenset(
    {wire.COORDINATOR_LOAD_IN_PROGRESS, wire.COORDINATOR_NOT_AVAILABLE, wire.NOT_COORDINATOR}
)
"""A group coordinator moving in or loading: ask again."""


def txn_offset_commit(
    address: str, transactional_id: str, producer: dict[str, int], group: str, offset: int
) -> int:
    """One TxnOffsetCommit (v3, no member: as an assign-mode producer sends) of partition 0 of
    topic ``t``: its error code."""
    request_class = wire.APIS[28].request
    topic_class = wire.nested(request_class, "TxnOffsetCommitRequestTopic")
    entry = wire.nested(topic_class, "TxnOffsetCommitRequestPartition")(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
    )
    answer = call(address, 28, 3, transactional_id=transactional_id, group_id=group, generation_id=-1, member_id="", group_instance_id=None, topics=[topic_class(name="t", partitions=[entry])], **producer)  # fmt: skip
    return int(answer.topics[0].partitions[0].error_code)


def stable_offset(address: str, group: str) -> tuple[int, int]:
    """A read_committed consumer's OffsetFetch (v7, ``require_stable``) of partition 0 of ``t``:
    (error code, committed offset)."""
    topic_class = wire.nested(wire.APIS[9].request, "OffsetFetchRequestTopic")
    answer = call(address, 9, 7, group_id=group, topics=[topic_class(name="t", partition_indexes=[0])], require_stable=True)  # fmt: skip
    partition = answer.topics[0].partitions[0]
    return int(partition.error_code), int(partition.committed_offset)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("verification", ["true", "false"])
def test_a_late_txn_offset_commit_leaves_the_group_unstable_only_without_verification(
    tmp_path: Path, verification: str
) -> None:
    """The CI failure of the ctp test, by hand: a TxnOffsetCommit that reaches the group
    coordinator after its transaction's marker (a paused coordinator took the marker's connection
    first).  Without verification it opens a transaction on ``__consumer_offsets`` that nothing
    ends, and the group's offset is UNSTABLE_OFFSET_COMMIT for good; with it the late commit is
    refused and the committed offset stays readable."""
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(3, {"transaction.partition.verification.enable": verification})
    try:
        transactional_id, group = "late-offsets", "late-offsets-group"
        cluster.create_topic("t", 1, 3)
        cluster.wait_for_leaders("t")
        address = coordinator_address(cluster, transactional_id)
        group_address = coordinator_address(cluster, group, key_type=0)
        init = retry(lambda: call(address, 22, 3, transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), "InitProducerId")  # fmt: skip
        producer = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        retry(lambda: call(address, 25, 3, transactional_id=transactional_id, group_id=group, **producer), "AddOffsetsToTxn")  # fmt: skip
        for _ in range(100):  # the group's coordinator may still be moving in or loading
            in_time = txn_offset_commit(group_address, transactional_id, producer, group, 5)
            if in_time not in COORDINATOR_NOT_READY:
                break
            time.sleep(0.1)
            group_address = coordinator_address(cluster, group, key_type=0)
        assert in_time == 0
        retry(lambda: call(address, 26, 3, transactional_id=transactional_id, committed=True, **producer), "EndTxn")  # fmt: skip
        cluster.wait_for(lambda: stable_offset(group_address, group) == (0, 5), 10, "the commit marker")

        late = txn_offset_commit(group_address, transactional_id, producer, group, 9)  # the held request
        of_offsets = [
            e for e in events_of(cluster, OFFSETS_TOPIC) if e.get("producer_id") == init.producer_id
        ]
        opened = [e["first_offset"] for e in of_offsets if e["kind"] == "txn-open"]
        closed = [e["offset"] for e in of_offsets if e["kind"] == "txn-close"]
        if verification == "true":
            assert late == INVALID_TXN_STATE
            assert stable_offset(group_address, group) == (0, 5)
            assert (len(opened), len(closed)) == (1, 1)
        else:
            assert late == 0
            assert stable_offset(group_address, group) == (UNSTABLE_OFFSET_COMMIT, -1)
            # White-box: the late batch opened a second transaction after the marker, and no
            # marker will close it -- the coordinator's transaction is over.
            assert len(opened) == 2 and closed and opened[1] > closed[-1], (opened, closed)
    finally:
        cluster.down()
