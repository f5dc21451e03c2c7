"""Transactional requests as clients (and coordinators) send them, for the wire and fuzz tests."""

from __future__ import annotations

from typing import Any

from broker_impl import wire

TXN_KEYS = frozenset({24, 25, 26, 27, 28})


def realistic_txn_request(api_key: int, version: int, topic: str, transactional_id: str = "fuzz-txn") -> Any:
    """A request of transaction API ``api_key`` at ``version`` naming partition 0 of ``topic``."""
    request_class = wire.APIS[api_key].request
    producer = {"producer_id": 2**40, "producer_epoch": 0}  # no allocated id: a marker fences nothing
    if api_key == 24:
        topic_class = wire.nested(request_class, "AddPartitionsToTxnTopic")
        return request_class(
            version=version,
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=2**40,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[topic_class(name=topic, partitions=[0])],
        )
    if api_key == 25:
        return request_class(
            version=version, transactional_id=transactional_id, group_id="fuzz-group", **producer
        )
    if api_key == 26:
        return request_class(version=version, transactional_id=transactional_id, committed=True, **producer)
    if api_key == 27:
        marker_class = wire.nested(request_class, "WritableTxnMarker")
        topic_class = wire.nested(marker_class, "WritableTxnMarkerTopic")
        marker = marker_class(
            transaction_result=False,
            coordinator_epoch=0,
            topics=[topic_class(name=topic, partition_indexes=[0])],
            **producer,
        )
        return request_class(version=version, markers=[marker])
    if api_key == 28:
        topic_class = wire.nested(request_class, "TxnOffsetCommitRequestTopic")
        partition_class = wire.nested(topic_class, "TxnOffsetCommitRequestPartition")
        entry = partition_class(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
        )
        return request_class(
            version=version,
            transactional_id=transactional_id,
            group_id="fuzz-group",
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[topic_class(name=topic, partitions=[entry])],
            **producer,
        )
    raise AssertionError(f"no realistic request for API {api_key}")
