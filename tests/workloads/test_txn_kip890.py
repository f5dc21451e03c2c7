"""The KIP-890 part 2 extension of kafka-python (``workloads.txn_kip890``), without a broker.

A real kafka-python :class:`TransactionManager` is driven to a commit; the EndTxn handler is given
answers and failures as the sender would.  The cluster side (TV1 / TV2 against a held EndTxn) is
``tests/testbed/cluster/test_request_proxy_kip890.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kafka import errors as kafka_errors
from kafka.producer.transaction_manager import (
    EndTxnHandler,
    ProducerIdAndEpoch,
    TransactionManager,
    TransactionState,
)
from kafka.protocol.producer import EndTxnResponse
from kafka.structs import TopicPartition

from workloads.txn_kip890 import (
    END_TXN_MAX_VERSION,
    Kip890EndTxnHandler,
    Kip890TransactionManager,
    enable_kip890,
)

PARTITION = TopicPartition("t", 0)


def committing(manager: TransactionManager) -> Any:
    """``manager`` at (7, 0) with a sequence at ``PARTITION``, its commit begun: the EndTxn handler."""
    manager.initialize_transactions()
    manager.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    manager._transition_to(TransactionState.READY)
    manager.begin_transaction()
    manager._transaction_started = True
    manager.set_sequence_number(PARTITION, 3)
    manager.begin_commit()
    handlers = [entry[2] for entry in manager._pending_requests if isinstance(entry[2], EndTxnHandler)]
    assert len(handlers) == 1
    return handlers[0]


def kip890_manager() -> Any:
    producer = SimpleNamespace(_transaction_manager=TransactionManager(transactional_id="tx"))
    enable_kip890(producer)
    return producer._transaction_manager


def test_only_the_given_producer_changes() -> None:
    manager = kip890_manager()
    assert isinstance(manager, Kip890TransactionManager)
    assert type(TransactionManager(transactional_id="other")) is TransactionManager
    handler = committing(manager)
    assert isinstance(handler, Kip890EndTxnHandler)
    assert handler.request.max_version == END_TXN_MAX_VERSION
    with pytest.raises(ValueError, match="transactional_id"):
        enable_kip890(SimpleNamespace(_transaction_manager=TransactionManager()))


def test_a_v5_answer_sets_the_next_epoch_and_restarts_the_sequences() -> None:
    manager = kip890_manager()
    handler = committing(manager)
    assert manager.sequence_number(PARTITION) == 3
    with manager._lock:
        handler.handle_response(
            EndTxnResponse(version=5, throttle_time_ms=0, error_code=0, producer_id=7, producer_epoch=1)
        )
    assert handler.result.succeeded
    assert (manager.producer_id_and_epoch.producer_id, manager.producer_id_and_epoch.epoch) == (7, 1)
    assert manager.sequence_number(PARTITION) == 0
    assert manager._current_state is TransactionState.READY


def test_an_answer_below_v5_keeps_the_epoch() -> None:
    manager = kip890_manager()
    handler = committing(manager)
    with manager._lock:
        handler.handle_response(EndTxnResponse(version=3, throttle_time_ms=0, error_code=0))
    assert handler.result.succeeded
    assert (manager.producer_id_and_epoch.epoch, manager.sequence_number(PARTITION)) == (0, 3)


def test_a_timed_out_end_txn_is_retried_where_stock_kafka_python_goes_fatal() -> None:
    manager = kip890_manager()
    handler = committing(manager)
    manager._pending_requests.clear()
    correlation = manager.next_in_flight_request_correlation_id()
    handler.on_complete(correlation, kafka_errors.RequestTimedOutError("Request timed out after 3000 ms"))
    assert not handler.result.is_done and handler.is_retry
    assert handler in [entry[2] for entry in manager._pending_requests]  # the same request, again
    assert handler.request.producer_epoch == 0
    stock = TransactionManager(transactional_id="stock")
    stock_handler = committing(stock)
    correlation = stock.next_in_flight_request_correlation_id()
    stock_handler.on_complete(correlation, kafka_errors.RequestTimedOutError("timed out"))
    assert stock_handler.result.failed and stock.has_fatal_error()
