"""kafka-python's transactional producer with KIP-890 part 2: a client of EndTxn v5.

kafka-python 3.0.12 ends a transaction with EndTxn of at most v3 and keeps one producer epoch for
all of a producer's transactions; and when its EndTxn times out it goes fatal instead of retrying.
So it can neither show KAFKA-17754 (a delayed EndTxn, retried on another connection, that lands
in the producer's *next* transaction) nor be protected from it.  This module changes one
producer's transaction manager -- never kafka-python's classes, nor any other producer of the
process -- in three ways, each what the Java client does:

* EndTxn is asked for up to v5 (kafka-python's connection takes the highest version both sides
  offer: v5 from a broker at ``transaction.version=2``, v3 from one at 1);
* an EndTxn v5 answer carries the producer id and epoch to use next (the coordinator bumped the
  epoch when it ended the transaction): they are adopted, and every partition's sequence starts
  again at 0, as a new epoch requires;
* an EndTxn whose request timed out (``request_timeout_ms``; kafka-python then closes the
  connection) is retried, the same request, on a new connection to the coordinator -- as the Java
  client and librdkafka retry it.  Against ``transaction.version=1`` this is exactly KAFKA-17754's
  EndTxn form: the retry ends transaction 1, the client moves on under the same epoch, and the
  first copy, arriving late, ends transaction 2.  Against 2 the late copy carries an epoch the
  coordinator has left behind and is refused (PRODUCER_FENCED).

Use :func:`enable_kip890` on a transactional :class:`kafka.KafkaProducer` before its
``init_transactions``.  It relies on kafka-python internals (``_transaction_manager`` and its
request handlers), which is why the dependency is pinned ``>=3.0.12,<3.1``.
"""

from __future__ import annotations

from typing import Any

from kafka import errors as kafka_errors
from kafka.producer.transaction_manager import (
    EndTxnHandler,
    ProducerIdAndEpoch,
    TransactionManager,
)
from kafka.protocol.producer import EndTxnRequest

END_TXN_MAX_VERSION = 5
"""The EndTxn version of KIP-890 part 2 (its answer names the producer id and epoch to use next)."""


class Kip890EndTxnHandler(EndTxnHandler):  # type: ignore[misc]
    """EndTxn up to v5, adopting the answered producer id and epoch; a timeout is retried."""

    def __init__(self, transaction_manager: TransactionManager, committed: bool) -> None:
        super().__init__(transaction_manager, committed)
        self.request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            committed=committed,
            max_version=END_TXN_MAX_VERSION,
        )

    def on_complete(self, correlation_id: int, response_or_exc: Any) -> None:
        """A request that timed out is treated as a lost connection: the base handler then looks
        the coordinator up again and re-enqueues the same request (kafka-python has already
        closed the timed-out connection, so the retry goes out on a new one)."""
        if isinstance(response_or_exc, kafka_errors.RequestTimedOutError):
            response_or_exc = kafka_errors.KafkaConnectionError(f"EndTxn timed out: {response_or_exc}")
        super().on_complete(correlation_id, response_or_exc)

    def handle_response(self, response: Any) -> None:
        """On success at v5, take the next producer id and epoch before the transaction completes
        (sequences restart at 0 under the new epoch); below v5 the fields are absent (-1)."""
        producer_id = getattr(response, "producer_id", -1)
        producer_epoch = getattr(response, "producer_epoch", -1)
        if response.error_code == 0 and producer_id is not None and producer_id >= 0 and producer_epoch >= 0:
            manager = self.transaction_manager
            if not manager.has_producer_id_and_epoch(producer_id, producer_epoch):
                manager.set_producer_id_and_epoch(ProducerIdAndEpoch(producer_id, producer_epoch))
                manager._sequence_numbers.clear()
                manager._last_acked_offset.clear()
        super().handle_response(response)


class Kip890TransactionManager(TransactionManager):  # type: ignore[misc]
    """A transaction manager whose transactions end with :class:`Kip890EndTxnHandler`."""

    def _begin_completing_transaction(self, committed: bool) -> Any:
        if self._new_partitions_in_transaction:
            self._enqueue_request(self._add_partitions_to_transaction_handler())
        handler = Kip890EndTxnHandler(self, committed)
        self._enqueue_request(handler)
        return handler.result


def enable_kip890(producer: Any) -> None:
    """Make ``producer`` (a transactional :class:`kafka.KafkaProducer`, before
    ``init_transactions``) end its transactions the KIP-890 part 2 way.  Only this producer's
    transaction manager changes class (its state and the sender's reference to it stay)."""
    manager = getattr(producer, "_transaction_manager", None)
    if manager is None or not manager.is_transactional():
        raise ValueError("enable_kip890 needs a KafkaProducer made with transactional_id")
    if type(manager) is not TransactionManager and not isinstance(manager, Kip890TransactionManager):
        raise ValueError(f"unexpected transaction manager {type(manager).__name__}")
    manager.__class__ = Kip890TransactionManager
