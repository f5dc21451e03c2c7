"""The queue workload's transactional mode (``--txn``): producers run Kafka transactions.

Ops it records: ``f = "txn"``, in the shape the shared contract gives (``docs/history.md``, the
section on ``txn`` ops; :mod:`testbed.record.history` parses it):

* producer thread ``i`` holds a transactional producer (``transactional.id``
  ``tidemark-<topic>-<i>``) and a consumer of its own (``assign``: every partition, in the spec's
  isolation level).  Each op draws 1..``txn_max_ops`` micro-ops (:func:`draw_micro_ops`: a send
  of a fresh unique value to a random partition, or a poll), records the invoke, begins a
  transaction, runs them in order, then commits -- or, with probability ``abort_p``, aborts.  The
  completion repeats the micro-ops completed (a send's ``offset`` when it was acknowledged, a
  poll's ``records``) and ends with one end micro-op, ``{"f": "commit" | "abort", "time"}``: the
  recorder's clock when ``commit``/``abort`` was called.  ``ok``: the commit returned.  ``fail``:
  it certainly did not commit -- aborted by choice (error ``abort``), or because a micro-op
  failed (its error; the micro-ops after it never ran: sends without an offset, polls that read
  nothing), or because the
  commit was refused and the abort that followed it succeeded.  ``info``: a commit that raised
  anything else, or a commit refused whose abort failed too.
* a draw of polls only begins no Kafka transaction: it is a read-only op (poll micro-ops, ``ok``,
  no end micro-op), recorded when it read something, like a consumer thread's reads.
* consumer threads (in :mod:`workloads.queue`) record read-only ``txn`` ops -- one poll micro-op
  each, non-empty reads only -- instead of ``poll`` ops: transaction markers and skipped aborted
  records leave offset gaps that the ``poll`` ops' order checks would call skips.

Why the consumer starts at offset 0: the topic is empty when the workload starts, so the
beginning is also the end, and each process's reads cover the log from its start without a gap
the checker would have to explain; a consumer replaced after an error resumes where the thread's
previous one stopped (as the queue workload's consumers do).

Why one ``transactional.id`` per producer *thread*, not per process: a producer replaced after
a fatal error or an unknown commit (the thread continues as a fresh process id, Jepsen's rule)
is made with the same id, and its ``init_transactions`` fences the old one and ends its open
transaction at once (a commit already requested is completed first).  With an id per process an
abandoned transaction would hold the last stable offset -- and so every ``read_committed``
reader, the final drain included -- until ``transaction.timeout.ms``.  For the same reason a
thread that ends with its producer dropped makes one more, to settle the id before the drain.

Before the final drain reads ``read_committed``, :func:`open_transactions` waits until no
transaction is open on any partition (a dropped producer's that its thread could not settle ends
by the coordinator's timeout): the drain's end offset is then the last stable offset, and a
transaction still open would hide every later commit from it.  A partition still held back at the
deadline gets a drain that does not claim to be complete (verdict at best unknown; a hanging
transaction), rather than a complete one that makes the commits above it look lost.

``rate`` counts ops (transactions and read-only draws), not micro-ops, over all producers.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from testbed.record.txn_rows import MAX_MICRO_OPS as MAX_MICRO_OPS

from .clients import ConsumerClient, Received, make_consumer
from .txn_clients import TxnAbortable, TxnFatal, TxnProducerClient, make_txn_producer, transaction_timeout_ms

logger = logging.getLogger(__name__)

SEND_P = 0.6
"""Probability that a drawn micro-op is a send (else a poll): most transactions write something."""
POLL_TIMEOUT = 0.02
"""Seconds a poll micro-op waits for records: short, it holds the transaction open."""
RETRY_WAIT = 0.5
"""Seconds between attempts to make a producer while none can be made (the cluster is down)."""
SETTLE_ATTEMPTS = 3
"""Producers a thread makes, at most, to settle its transactional id when it ends."""
DEFAULT_ABORT_P = 0.2
DEFAULT_MAX_OPS = 4
"""Micro-ops per transaction at most, by default (the history format takes up to
:data:`MAX_MICRO_OPS`, ``testbed.record.txn_rows``'s)."""


def transactional_id(topic: str, index: int) -> str:
    """The ``transactional.id`` of producer thread ``index`` on ``topic`` (the module docstring says
    why one per thread); a scenario's ``transactions`` partition is thread 0's coordinator's."""
    return f"tidemark-{topic}-{index}"


def txn_problems(
    txn: object, abort_p: object, txn_max_ops: object, consume_via: str, idempotent: bool, acks: str
) -> list[str]:
    """What is wrong with the queue spec's transaction settings (``QueueSpec.__post_init__``)."""
    problems = []
    if not isinstance(txn, bool):
        problems.append(f"txn (--txn) must be true or false, not {txn!r}")
    if isinstance(abort_p, bool) or not isinstance(abort_p, (int, float)) or not 0 <= abort_p <= 1:
        problems.append(f"abort_p (--abort-p) must be in [0, 1], not {abort_p!r}")
    if (
        isinstance(txn_max_ops, bool)
        or not isinstance(txn_max_ops, int)
        or not 1 <= txn_max_ops <= MAX_MICRO_OPS
    ):
        problems.append(
            f"txn_max_ops (--txn-max-ops) must be an integer in 1..{MAX_MICRO_OPS}, not {txn_max_ops!r}"
        )
    if not txn:
        if (abort_p, txn_max_ops) != (DEFAULT_ABORT_P, DEFAULT_MAX_OPS) and not problems:
            problems.append("abort_p (--abort-p) and txn_max_ops (--txn-max-ops) need txn (--txn)")
        return problems
    if consume_via != "assign":
        problems.append(
            "txn (--txn) needs --consume-via assign: group consumers record poll ops, whose order "
            "checks would call the offset gaps of transaction markers skips"
        )
    if not idempotent:
        problems.append("txn (--txn) needs idempotent producers: transactions imply idempotence")
    if acks != "all":
        problems.append(
            f"txn (--txn) needs --acks all (transactional producers write with acks=all), not {acks!r}"
        )
    return problems


@dataclasses.dataclass(frozen=True)
class TxnSettings:
    """What a transactional producer thread needs of the workload's spec and cluster."""

    client: str
    bootstrap: str
    topic: str
    partitions: int
    isolation: str
    request_timeout: float
    abort_p: float
    max_ops: int


class Pacer:
    """One thread's share of a total rate (ops per second over ``threads`` threads; 0: unpaced).

    ``wait`` returns False when ``stop`` was set first.  A thread that fell behind catches up
    by at most one second's worth, so a long stall does not turn into a burst."""

    def __init__(self, rate: float, threads: int) -> None:
        self._interval = threads / rate if rate > 0 else 0.0
        self._next = time.monotonic()

    def wait(self, stop: threading.Event) -> bool:
        if self._interval:
            delay = self._next - time.monotonic()
            if delay > 0 and stop.wait(delay):  # pacing: time itself is the point here
                return False
            self._next = max(self._next + self._interval, time.monotonic() - 1.0)
        return not stop.is_set()


def draw_micro_ops(
    rng: random.Random, max_ops: int, partitions: int, next_value: Callable[[], int]
) -> list[dict[str, Any]]:
    """1..``max_ops`` micro-ops: a send (probability :data:`SEND_P`) of a fresh value from
    ``next_value`` to a random partition ``p`` with key ``k<p>``, or a poll."""
    micro_ops: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, max_ops)):
        if rng.random() < SEND_P:
            partition = rng.randrange(partitions)
            micro_ops.append(
                {"f": "send", "partition": partition, "key": f"k{partition}", "value": next_value()}
            )
        else:
            micro_ops.append({"f": "poll"})
    return micro_ops


def poll_micro_op(received: list[Received]) -> dict[str, Any]:
    """A completed poll micro-op: the records it returned, in order."""
    return {"f": "poll", "records": [record.to_json() for record in received]}


def not_run(micro_ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Micro-ops that never ran, as a completion holds them: a send with no offset, a poll that
    read nothing."""
    return [{"f": "poll", "records": []} if micro_op["f"] == "poll" else micro_op for micro_op in micro_ops]


def record_read(recorder: Recorder, process: int, polls: list[list[Received]]) -> None:
    """A read-only ``txn`` op of ``polls`` (one poll micro-op each), recorded after the reads."""
    invocation = recorder.invoke(process, "txn", [{"f": "poll"} for _ in polls])
    recorder.complete(invocation, "ok", [poll_micro_op(received) for received in polls])


class TxnProducerLoop:
    """Producer thread ``index`` of ``--txn``: transactions until stopped (module docstring)."""

    def __init__(
        self,
        settings: TxnSettings,
        recorder: Recorder,
        index: int,
        fresh_id: Callable[[], int],
        next_value: Callable[[], int],
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self.process = index
        self.transactional_id = transactional_id(settings.topic, index)
        self._fresh_id = fresh_id
        self._next_value = next_value
        self._rng = rng or random.Random()
        self._producer: TxnProducerClient | None = None
        self._consumer: ConsumerClient | None = None
        self._positions = dict.fromkeys(range(settings.partitions), 0)
        self._unsettled = False
        """A producer was dropped and no producer of the same id has fenced it since."""

    def run(self, stop: threading.Event, pacer: Pacer) -> None:
        try:
            while pacer.wait(stop):
                if self.ready(stop):
                    self.transaction(
                        draw_micro_ops(
                            self._rng, self.settings.max_ops, self.settings.partitions, self._next_value
                        ),
                        stop,
                    )
        finally:
            if self._consumer is not None:
                self._consumer.close()
            self._settle()

    def _now(self) -> int:
        return time.monotonic_ns() - self.recorder.started_ns

    def ready(self, stop: threading.Event) -> bool:
        """Make the producer and the consumer where missing; False (after a short wait) when either
        could not be made."""
        if not self._consumer_ready():
            stop.wait(RETRY_WAIT)
            return False
        if self._producer is None:
            self._producer = self._new_producer("no producer yet")
            if self._producer is None:
                stop.wait(RETRY_WAIT)
                return False
        return True

    def _new_producer(self, failed: str) -> TxnProducerClient | None:
        """A producer of the thread's transactional id (it fences every earlier one, which settles
        a dropped one); None, logged as ``failed``, when none could be made."""
        try:
            producer = make_txn_producer(
                self.settings.client,
                self.settings.bootstrap,
                self.transactional_id,
                self.settings.request_timeout,
            )
        except TxnFatal as error:
            logger.info("%s: %s: %s", self.transactional_id, failed, error)
            return None
        self._unsettled = False
        return producer

    def _consumer_ready(self) -> bool:
        """Make the consumer if missing, at the positions reached; False when it could not be made."""
        if self._consumer is None:
            try:
                consumer = make_consumer(
                    self.settings.client, self.settings.bootstrap, self.settings.isolation
                )
                consumer.assign(self.settings.topic, self._positions)
            except Exception as error:
                logger.info("%s: no consumer yet: %s: %s", self.transactional_id, type(error).__name__, error)
                return False
            self._consumer = consumer
        return True

    def _drop_producer(self) -> None:
        """Close the producer (a new one of the same id is made before the next op) and continue
        as a fresh process: one process, one producer."""
        if self._producer is not None:
            self._producer.close()
        self._producer = None
        self._unsettled = True
        self.process = self._fresh_id()

    def _settle(self) -> None:
        """Close the producer; if one was dropped since the last was made, make one more of the same
        id (its ``init_transactions`` ends what the dropped one left open) and close it."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None
        for _ in range(SETTLE_ATTEMPTS if self._unsettled else 0):
            producer = self._new_producer("not settled yet")
            if producer is not None:
                producer.close()
                break
        if self._unsettled:
            logger.warning("%s: a transaction of a dropped producer may stay open", self.transactional_id)

    def transaction(self, micro_ops: list[dict[str, Any]], stop: threading.Event) -> None:
        """One op of ``micro_ops`` (the producer and consumer ready), recorded."""
        producer = self._producer
        assert producer is not None
        if all(micro_op["f"] == "poll" for micro_op in micro_ops):
            polls = [self._poll() for _ in micro_ops]
            if any(polls):
                record_read(self.recorder, self.process, polls)
            return
        invocation = self.recorder.invoke(self.process, "txn", micro_ops)
        try:
            producer.begin()
        except TxnFatal as failure:
            self.recorder.complete(invocation, "fail", not_run(micro_ops), error=str(failure))
            self._drop_producer()
            return
        completed, why = self._run_micro_ops(producer, micro_ops, stop)
        if why is None and self._rng.random() >= self.settings.abort_p:
            self._commit(producer, invocation, completed)
        else:
            self._abort(producer, invocation, completed, why or "abort", committing=False)

    def _run_micro_ops(
        self, producer: TxnProducerClient, micro_ops: list[dict[str, Any]], stop: threading.Event
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Run ``micro_ops`` in the open transaction until one fails or the run stops: the
        micro-ops as completed (those not run unchanged) and why they stopped (None: all ran)."""
        completed: list[dict[str, Any]] = []
        for position, micro_op in enumerate(micro_ops):
            if stop.is_set() and position > 0:
                return completed + not_run(micro_ops[position:]), "abort: the run is stopping"
            if micro_op["f"] == "poll":
                completed.append(poll_micro_op(self._poll()))
                continue
            try:
                offset = producer.send(
                    self.settings.topic,
                    micro_op["partition"],
                    micro_op["key"],
                    str(micro_op["value"]),
                    self.settings.request_timeout,
                )
            except (TxnAbortable, TxnFatal) as error:
                return completed + not_run(micro_ops[position:]), str(error)
            completed.append({**micro_op, "offset": offset})
        return completed, None

    def _poll(self) -> list[Received]:
        """One poll of the thread's consumer.  A consumer that fails is replaced (at the positions
        reached) and the poll counts as having read nothing: what it dropped is read again."""
        if not self._consumer_ready():
            return []
        assert self._consumer is not None
        try:
            received = self._consumer.poll(POLL_TIMEOUT)
        except Exception as error:
            logger.info("%s: consumer replaced: %s: %s", self.transactional_id, type(error).__name__, error)
            self._consumer.close()
            self._consumer = None
            return []
        for record in received:
            if record.partition in self._positions:
                self._positions[record.partition] = max(self._positions[record.partition], record.offset + 1)
        return received

    def _commit(self, producer: TxnProducerClient, invocation: Op, completed: list[dict[str, Any]]) -> None:
        called = self._now()
        try:
            producer.commit(self.settings.request_timeout * 2)
        except TxnAbortable as error:
            self._abort(producer, invocation, completed, f"commit refused: {error}", committing=True)
        except TxnFatal as error:
            self.recorder.complete(
                invocation, "info", [*completed, {"f": "commit", "time": called}], error=f"commit: {error}"
            )
            self._drop_producer()
        else:
            self.recorder.complete(invocation, "ok", [*completed, {"f": "commit", "time": called}])

    def _abort(
        self,
        producer: TxnProducerClient,
        invocation: Op,
        completed: list[dict[str, Any]],
        error: str,
        *,
        committing: bool,
    ) -> None:
        """Abort and record: ``fail`` -- unless ``committing`` (a commit was asked for and refused)
        and the abort failed too: then the commit's fate is unknown, ``info``."""
        called = self._now()
        try:
            producer.abort(self.settings.request_timeout * 2)
        except TxnFatal as failure:
            self.recorder.complete(
                invocation,
                "info" if committing else "fail",
                [*completed, {"f": "abort", "time": called}],
                error=f"{error}; abort: {failure}",
            )
            self._drop_producer()
        else:
            self.recorder.complete(
                invocation, "fail", [*completed, {"f": "abort", "time": called}], error=error
            )


def open_transactions(
    client: str, bootstrap: str, topic: str, partitions: list[int], request_timeout: float, deadline: float
) -> list[int]:
    """Wait until no partition of ``topic`` holds an open transaction -- its last stable offset (the
    end ``read_committed`` reads to) has reached its high watermark -- for at most as long as an
    abandoned transaction takes to time out, and for half the time left until ``deadline``
    (monotonic) at most, leaving the drain the other half; the partitions still held back (every
    one when the offsets could not be read)."""
    now = time.monotonic()
    until = min(now + (deadline - now) / 2, now + transaction_timeout_ms(request_timeout) / 1000 + 15)
    readers: list[ConsumerClient] = []
    try:
        readers = [
            make_consumer(client, bootstrap, isolation)
            for isolation in ("read_committed", "read_uncommitted")
        ]
        while True:
            held = _held(readers, topic, partitions)
            if not held or time.monotonic() >= until:
                return held
            time.sleep(0.2)  # a condition on the brokers: asked again until it holds
    except Exception as error:
        logger.info("open transactions of %s unknown: %s: %s", topic, type(error).__name__, error)
        return list(partitions)
    finally:
        for reader in readers:
            reader.close()


def _held(readers: list[ConsumerClient], topic: str, partitions: list[int]) -> list[int]:
    """The partitions whose last stable offset (``readers[0]``'s end) is below the high watermark
    (``readers[1]``'s); every one when either cannot be read."""
    try:
        stable, high = (reader.end_offsets(topic, partitions, 5.0) for reader in readers)
    except Exception as error:
        logger.info("end offsets of %s unavailable: %s: %s", topic, type(error).__name__, error)
        return list(partitions)
    return [p for p in partitions if stable[p] < high[p]]
