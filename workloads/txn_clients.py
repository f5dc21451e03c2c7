"""Transactional producers of both client libraries behind one interface (the queue workload's ``--txn``).

:class:`TxnProducerClient` is what :mod:`workloads.txn` needs of a Kafka transactional producer:
``begin``, synchronous ``send`` (the offset once the broker acknowledged it), ``commit``, ``abort``,
``close``.  A producer is made with its ``transactional.id``; making it runs
``init_transactions``, which fences any earlier producer of the same id and ends that one's open
transaction (aborted; a commit already requested is completed first) -- the workload relies on
this to end what a replaced producer left open (see :mod:`workloads.txn`).

Every call but ``close`` either returns or raises one of two exceptions, and the workload's
verdict on the transaction follows from which one and from where it came:

* :class:`TxnAbortable` -- the current transaction cannot commit, the producer is still usable:
  abort it.  From ``commit``: the commit was refused (librdkafka's ``txn_requires_abort``;
  kafka-python's abortable-error state, raised before its EndTxn request is queued); an abort
  that then succeeds settles it as not committed, one that fails leaves it unknown (a coordinator
  that had committed it refuses the abort).
* :class:`TxnFatal` -- the producer can do nothing more, or its state is unknown: fenced, a fatal
  error, or a call that did not end within its timeout.  From ``commit`` the outcome is unknown.
  The caller closes it and makes a new one.

A failed ``send`` is always one of the two: a send that may not have reached the log, or may have,
is a reason to abort in a transaction (no send is ever committed without its transaction).
"""

from __future__ import annotations

import threading
from typing import Any, Final, Protocol

from .clients import CLIENTS, ConfluentProducer, KafkaPythonProducer, NoDeliveryReport
from .txn_kip890 import enable_kip890

SEND_OFFSETS_GRACE: Final = 5.0
"""Seconds a confluent-kafka ``send_offsets_to_transaction`` may overrun its timeout before the
producer counts as stuck (:meth:`ConfluentTxnProducer.send_offsets`)."""
KIP890_CLIENT = "kafka-python-kip890"
"""kafka-python with :mod:`workloads.txn_kip890`: EndTxn v5 (KIP-890 part 2) and EndTxn retries."""


REUSES_SEQUENCES: Final = frozenset({"confluent-kafka"})
"""Clients whose producer, after aborting a transaction while one of its sends was unresolved --
possibly written, still held by the client for a retry -- may number a later message of the same
epoch with that send's sequence; the broker, as Kafka's would, answers it as a retry of the batch
it holds, at that batch's offset: an acknowledgement of nothing.  librdkafka 2.16 does (its abort
purges the queued retry and skips its sequence without an epoch bump:
``tests/testbed/cluster/test_librdkafka_sequence_reuse.py``); kafka-python numbers a batch when it
sends it.  Two defences, both pinned by that test: :class:`ConfluentTxnProducer` waits for a
send's delivery report until librdkafka times the message out itself (a possibly written message
that times out bumps the epoch), and when even that wait ends without a report
(:class:`TxnSendUnresolved`), :mod:`workloads.txn` replaces the producer after the abort: a new
one's ``init_transactions`` bumps the epoch, and sequences start again at 0."""


class TxnAbortable(Exception):
    """The transaction cannot commit; abort it (the producer is still usable)."""


class TxnSendUnresolved(TxnAbortable):
    """A send the client reported no outcome for within the wait: it still holds the message.
    Abort; a producer of :data:`REUSES_SEQUENCES` is then replaced."""


class TxnFatal(Exception):
    """The producer is unusable or in an unknown state; make a new one."""


class TxnProducerClient(Protocol):
    def begin(self) -> None: ...

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        """Send one message in the open transaction and wait for its acknowledgement; its offset."""
        ...

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any, timeout: float) -> None:
        """``send_offsets_to_transaction``: the consumer group's next offsets of ``topic``
        (partition -> offset), committed with the open transaction (consume-transform-produce)."""
        ...

    def commit(self, timeout: float) -> None: ...

    def abort(self, timeout: float) -> None: ...

    def close(self) -> None: ...


def transaction_timeout_ms(request_timeout: float) -> int:
    """``transaction.timeout.ms``: long enough for a transaction of a few sends that each wait up to
    twice the request timeout, short enough that a transaction nobody ends (its producer abandoned
    and never replaced) does not hold the last stable offset for the rest of the run."""
    return int(max(10.0, request_timeout * 4) * 1000)


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class _Transactional:
    """What both libraries' transactional producers share: a producer of :mod:`workloads.clients`
    made with ``transactional.id`` and initialised, its synchronous send, begin and close."""

    def __init__(self, client: KafkaPythonProducer | ConfluentProducer, init_timeout: float) -> None:
        self._client = client
        self._producer: Any = client._producer
        try:
            self._init(init_timeout)
        except Exception as error:
            client.close()
            raise TxnFatal(f"init_transactions: {_text(error)}") from None

    def _init(self, timeout: float) -> None:
        raise NotImplementedError

    def _classify(self, error: BaseException) -> Exception:
        """What an error makes of the producer (:class:`TxnAbortable` here: the abort will tell)."""
        return TxnAbortable(_text(error))

    def begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except Exception as error:
            raise TxnFatal(f"begin_transaction: {_text(error)}") from None

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        try:
            return self._client.send(topic, partition, key, value, timeout)
        except Exception as error:
            raise self._classify(error) from None

    def close(self) -> None:
        self._client.close()


class KafkaPythonTxnProducer(_Transactional):
    """kafka-python's transactional producer.

    ``commit_transaction``/``abort_transaction`` of kafka-python wait without a timeout, so
    ``commit``/``abort`` do what they do -- ``begin_commit``/``begin_abort`` of the producer's
    transaction manager, wake the sender -- and wait on the result for at most ``timeout``.
    """

    def __init__(self, bootstrap: str, transactional_id: str, request_timeout: float) -> None:
        settings = {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": transaction_timeout_ms(request_timeout),
        }
        super().__init__(
            KafkaPythonProducer(bootstrap, "all", True, request_timeout, **settings), request_timeout
        )

    def _init(self, timeout: float) -> None:
        self._producer.init_transactions()  # waits max_block_ms: the request timeout

    def _classify(self, error: BaseException) -> Exception:
        if self._producer._transaction_manager.has_fatal_error():
            return TxnFatal(_text(error))
        return TxnAbortable(_text(error))

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any, timeout: float) -> None:
        """As ``send_offsets_to_transaction``, waiting at most ``timeout`` (kafka-python's waits
        without one); a failure is abortable unless the producer's state became fatal."""
        from kafka import OffsetAndMetadata, TopicPartition

        manager = self._producer._transaction_manager
        wanted = {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        try:
            result = manager.send_offsets_to_transaction(wanted, group_metadata)
            self._producer._sender.wakeup()
            done = result.wait(timeout_ms=timeout * 1000)
        except Exception as error:
            raise self._classify(error) from None
        if not done:
            raise TxnFatal(f"send_offsets_to_transaction did not end within {timeout:g} s")

    def commit(self, timeout: float) -> None:
        self._finish(True, timeout)

    def abort(self, timeout: float) -> None:
        try:
            self._finish(False, timeout)
        except TxnAbortable as error:  # an abort that failed leaves nothing else to try
            raise TxnFatal(str(error)) from None

    def _finish(self, commit: bool, timeout: float) -> None:
        manager = self._producer._transaction_manager
        try:  # raises before queueing EndTxn when the transaction is already failed
            result = manager.begin_commit() if commit else manager.begin_abort()
        except Exception as error:
            raise self._classify(error) from None
        self._producer._sender.wakeup()
        try:
            done = result.wait(timeout_ms=timeout * 1000)
        except Exception as error:  # EndTxn's errors are fatal in kafka-python
            raise TxnFatal(_text(error)) from None
        if not done:
            raise TxnFatal(f"{'commit' if commit else 'abort'} did not end within {timeout:g} s")


class KafkaPythonKip890TxnProducer(KafkaPythonTxnProducer):
    """kafka-python's transactional producer as a KIP-890 part 2 client
    (:func:`workloads.txn_kip890.enable_kip890`): EndTxn up to v5, the producer epoch the
    coordinator answers adopted at every transaction end, and an EndTxn that timed out retried on a
    new connection.  So a late EndTxn is KAFKA-17754 against ``transaction.version=1`` and refused
    against 2."""

    def _init(self, timeout: float) -> None:
        enable_kip890(self._producer)
        super()._init(timeout)


class ConfluentTxnProducer(_Transactional):
    """confluent-kafka's (librdkafka's) transactional producer: its errors say themselves whether
    the transaction must be aborted (``txn_requires_abort``); every other error is fatal here."""

    def __init__(self, bootstrap: str, transactional_id: str, request_timeout: float) -> None:
        settings = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms(request_timeout),
        }
        super().__init__(
            ConfluentProducer(bootstrap, "all", True, request_timeout, **settings), request_timeout * 2
        )

    def _init(self, timeout: float) -> None:
        self._producer.init_transactions(timeout)

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        """Waits for the delivery report at least until librdkafka's own ``message.timeout.ms``:
        a message it times out is reported (``_MSG_TIMED_OUT``) and, if possibly written, bumps
        the epoch, where one still held at the abort may have its sequence reused
        (:data:`REUSES_SEQUENCES`).  No report even then: :class:`TxnSendUnresolved`."""
        assert isinstance(self._client, ConfluentProducer)
        try:
            return self._client.send(topic, partition, key, value, max(timeout, self._client.message_timeout))
        except NoDeliveryReport as error:
            raise TxnSendUnresolved(_text(error)) from None
        except Exception as error:
            raise self._classify(error) from None

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any, timeout: float) -> None:
        """``send_offsets_to_transaction``, on a helper thread: librdkafka's call ignores its
        timeout while the group's coordinator is down (confluentinc/librdkafka#5456, open; seen
        here: every producer thread blocked past a killed broker's restart).  A call still running
        after ``timeout`` plus :data:`SEND_OFFSETS_GRACE` is TxnFatal: the producer is dropped and
        its successor fences it, which ends the call (the helper is a daemon thread)."""
        from confluent_kafka import TopicPartition

        positions = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        outcome: list[BaseException | None] = []

        def call() -> None:
            try:
                self._producer.send_offsets_to_transaction(positions, group_metadata, timeout)
            except BaseException as error:  # handed to the caller's thread
                outcome.append(error)
            else:
                outcome.append(None)

        helper = threading.Thread(target=call, name="send-offsets", daemon=True)
        helper.start()
        helper.join(timeout + SEND_OFFSETS_GRACE)
        if not outcome:
            raise TxnFatal(
                f"send_offsets_to_transaction did not return within {timeout:g} s (librdkafka#5456)"
            )
        if isinstance(outcome[0], Exception):
            raise self._requires_abort(outcome[0]) from None

    def _requires_abort(self, error: Exception) -> Exception:
        """TxnAbortable when librdkafka says the transaction must be aborted, else TxnFatal."""
        kafka_error: Any = error.args[0] if error.args else None
        if hasattr(kafka_error, "txn_requires_abort") and kafka_error.txn_requires_abort():
            return TxnAbortable(_text(error))
        return TxnFatal(_text(error))

    def commit(self, timeout: float) -> None:
        try:
            self._producer.commit_transaction(timeout)
        except Exception as error:
            raise self._requires_abort(error) from None

    def abort(self, timeout: float) -> None:
        try:
            self._producer.abort_transaction(timeout)
        except Exception as error:
            raise TxnFatal(_text(error)) from None


def make_txn_producer(
    client: str, bootstrap: str, transactional_id: str, request_timeout: float
) -> TxnProducerClient:
    """A transactional producer of ``client``, ``init_transactions`` done; TxnFatal when that failed."""
    if client == "kafka-python":
        return KafkaPythonTxnProducer(bootstrap, transactional_id, request_timeout)
    if client == KIP890_CLIENT:
        return KafkaPythonKip890TxnProducer(bootstrap, transactional_id, request_timeout)
    if client == "confluent-kafka":
        return ConfluentTxnProducer(bootstrap, transactional_id, request_timeout)
    raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
