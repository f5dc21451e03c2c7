"""KIP-890 part 1: a partition leader verifies a transactional produce with its coordinator.

Before appending the first transactional batch of a producer id that has no open transaction
at the partition, the leader asks that transaction's coordinator -- with AddPartitionsToTxn v4
``verify_only``, as Kafka's AddPartitionsToTxnManager does -- whether the transaction is Ongoing,
of that producer id and epoch, and holds the partition
(:func:`broker_impl.txn_state.verify_partition`).  A batch that fails is refused with the
coordinator's answer (INVALID_TXN_STATE for a transaction that ended, PRODUCER_FENCED, ...), so a
produce delayed past its transaction's end cannot open a transaction nothing will end.

Whether to verify at all is :class:`~broker_impl.txn_rules.TransactionRules`'
``partition_verification`` (``transaction.partition.verification.enable``), asked only here.
"""

from __future__ import annotations

import logging

from . import wire
from .broker_view import BrokerView
from .partition import Partition
from .records import BatchHeader
from .txn_markers import PeerConnections
from .txn_records import TRANSACTION_STATE_TOPIC, transaction_partition
from .txn_rules import TransactionRules

logger = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 4


class TxnVerifier:
    def __init__(self, broker: BrokerView, node_id: int, rules: TransactionRules) -> None:
        self.broker = broker
        self.rules = rules
        self.peers = PeerConnections(broker, f"txn-verifier-{node_id}")

    def needed(self, partition: Partition, header: BatchHeader) -> bool:
        """Whether ``header``'s batch must be verified before ``partition`` appends it: the rule
        is on, the batch is transactional data, and its producer has no transaction open here."""
        return (
            self.rules.partition_verification
            and header.is_transactional
            and not header.is_control
            and header.producer_id >= 0
            and header.producer_id not in partition.log.transactions.open
        )

    async def verify(self, transactional_id: str | None, header: BatchHeader, topic: str, index: int) -> int:
        """The coordinator's verdict on ``header``'s transaction holding (``topic``, ``index``)."""
        if not transactional_id:
            return wire.INVALID_REQUEST  # a transactional batch needs its transactional id
        state_topic = self.broker.metadata_topics().get(TRANSACTION_STATE_TOPIC)
        if state_topic is None:
            return wire.NOT_ENOUGH_REPLICAS  # no coordinator yet: retriable
        slot = transaction_partition(transactional_id, len(state_topic["partitions"]))
        coordinator = state_topic["partitions"][slot]["leader"]
        api = wire.APIS[ADD_PARTITIONS_TO_TXN]
        transaction_class = wire.nested(api.request, "AddPartitionsToTxnTransaction")
        topic_class = wire.nested(transaction_class, "AddPartitionsToTxnTopic")
        request = api.request(
            version=VERIFY_VERSION,
            transactions=[
                transaction_class(
                    transactional_id=transactional_id,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    verify_only=True,
                    topics=[topic_class(name=topic, partitions=[index])],
                )
            ],
        )
        try:
            response = await self.peers.call(coordinator, request, ADD_PARTITIONS_TO_TXN, VERIFY_VERSION)
        except (ConnectionError, TimeoutError) as error:
            logger.info("verifying %s at %s-%d failed: %s", transactional_id, topic, index, error)
            return wire.NOT_ENOUGH_REPLICAS  # retriable: the producer tries again
        if response.error_code:
            return int(response.error_code)
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for entry in topic_result.results_by_partition:
                    if entry.partition_error_code:
                        return int(entry.partition_error_code)
        return wire.NONE


PRODUCER_REFUSALS: dict[int, str] = {
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE",
    51: "CONCURRENT_TRANSACTIONS",
    90: "PRODUCER_FENCED",
}
"""The refusals of a produce for its producer's state that are recorded (``producer-refused``):
the idempotence rules' and the transaction verification's answers, by error code."""


def record_refusal(partition: Partition, header: BatchHeader, error: int) -> None:
    """Record a produce refused for its producer's state (``producer-refused``): fencing of an old
    epoch and refused late transactional produces are the white-box side of KAFKA-14402 and of
    producer fencing, which a client only sees as an error it may retry."""
    name = PRODUCER_REFUSALS.get(error)
    if name is None or not partition.events.enabled:
        return
    partition.events.emit(
        "producer-refused",
        topic=partition.topic,
        partition=partition.index,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        error=name,
        error_code=error,
    )
