"""The transactional producers' errors as the workload reads them (``workloads.txn_clients``):
``TxnAbortable`` (abort it, the producer goes on) or ``TxnFatal`` (unknown or unusable), from each
library's own signals, without brokers (the libraries' producers are stand-ins)."""

from __future__ import annotations

from typing import Any

import pytest

from workloads.clients import ConfluentProducer, NoDeliveryReport
from workloads.txn_clients import (
    ConfluentTxnProducer,
    KafkaPythonTxnProducer,
    TxnAbortable,
    TxnFatal,
    TxnSendUnresolved,
)


class _KafkaError:
    """confluent-kafka's KafkaError as far as the wrapper reads it."""

    def __init__(self, requires_abort: bool) -> None:
        self.requires_abort = requires_abort

    def txn_requires_abort(self) -> bool:
        return self.requires_abort


class _Librdkafka:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def commit_transaction(self, timeout: float) -> None:
        raise self.error

    def abort_transaction(self, timeout: float) -> None:
        raise self.error


def confluent(error: Exception) -> ConfluentTxnProducer:
    producer = object.__new__(ConfluentTxnProducer)
    vars(producer)["_producer"] = _Librdkafka(error)
    return producer


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (Exception(_KafkaError(requires_abort=True)), TxnAbortable),
        (Exception(_KafkaError(requires_abort=False)), TxnFatal),  # fatal, or a timeout: unknown
        (Exception("no KafkaError at all"), TxnFatal),
    ],
)
def test_a_librdkafka_commit_error_is_abortable_only_when_it_says_so(error: Exception, kind: type) -> None:
    with pytest.raises(kind):
        confluent(error).commit(1.0)
    with pytest.raises(TxnFatal):  # an abort that failed leaves nothing to try
        confluent(error).abort(1.0)


def confluent_sending(client: ConfluentProducer) -> ConfluentTxnProducer:
    producer = object.__new__(ConfluentTxnProducer)
    vars(producer)["_client"] = client
    return producer


def test_a_librdkafka_send_waits_until_the_client_times_the_message_out_itself() -> None:
    """Asked to wait 0.1 s, the send waits for librdkafka's own verdict (``message.timeout.ms``
    3 s here, past the 2.1 s the send would wait otherwise; nothing listens on the port): a
    timed-out message, abortable -- not unresolved, so the producer goes on (a possibly written
    message's timeout bumps the epoch)."""
    client = ConfluentProducer("127.0.0.1:9", "all", False, 1.0, **{"message.timeout.ms": 3000})
    try:
        with pytest.raises(TxnAbortable, match="_MSG_TIMED_OUT") as raised:
            confluent_sending(client).send("t", 0, "k", "v", 0.1)
        assert not isinstance(raised.value, TxnSendUnresolved)
    finally:
        client.close()


def test_a_librdkafka_send_without_a_delivery_report_is_unresolved() -> None:
    class NoReport(ConfluentProducer):
        def __init__(self) -> None:
            self.message_timeout = 0.0

        def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
            raise NoDeliveryReport(f"no delivery report within {timeout:g} s")

    with pytest.raises(TxnSendUnresolved, match="no delivery report"):
        confluent_sending(NoReport()).send("t", 0, "k", "v", 0.1)


class _Result:
    """kafka-python's TransactionalRequestResult: ``wait`` True when done, raising its error."""

    def __init__(self, done: bool, error: Exception | None = None) -> None:
        self.done, self.error = done, error

    def wait(self, timeout_ms: float) -> bool:
        if self.error is not None:
            raise self.error
        return self.done


class _Manager:
    def __init__(self, result: _Result | Exception, fatal: bool = False) -> None:
        self.result, self.fatal = result, fatal

    def has_fatal_error(self) -> bool:
        return self.fatal

    def begin_commit(self) -> _Result:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    begin_abort = begin_commit


def kafka_python(manager: _Manager) -> KafkaPythonTxnProducer:
    producer = object.__new__(KafkaPythonTxnProducer)
    sender: Any = type("Sender", (), {"wakeup": lambda self: None})()
    vars(producer)["_producer"] = type("P", (), {"_transaction_manager": manager, "_sender": sender})()
    return producer


@pytest.mark.parametrize(
    ("manager", "commit_kind", "abort_kind"),
    [
        (_Manager(_Result(done=True)), None, None),
        (_Manager(_Result(done=False)), TxnFatal, TxnFatal),  # did not end in time: unknown
        (_Manager(_Result(done=True, error=RuntimeError("fenced")), fatal=True), TxnFatal, TxnFatal),
        (_Manager(RuntimeError("abortable state")), TxnAbortable, TxnFatal),  # refused before EndTxn
        (_Manager(RuntimeError("fatal state"), fatal=True), TxnFatal, TxnFatal),
    ],
)
def test_kafka_python_ends_a_transaction_within_its_timeout_and_classifies_its_errors(
    manager: _Manager, commit_kind: type | None, abort_kind: type | None
) -> None:
    producer = kafka_python(manager)
    for call, kind in ((producer.commit, commit_kind), (producer.abort, abort_kind)):
        if kind is None:
            call(0.1)
        else:
            with pytest.raises(kind):
                call(0.1)
