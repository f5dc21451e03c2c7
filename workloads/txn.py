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

A transaction aborted after one of its sends went unresolved (the client reported no outcome:
:class:`~workloads.txn_clients.TxnSendUnresolved`) ends its producer too when the client is one of
:data:`~workloads.txn_clients.REUSES_SEQUENCES` (librdkafka): such a producer may number its next
message as the unresolved one, which the broker then answers as that message's retry -- an
acknowledgement of nothing.  A send the client failed itself leaves the producer usable.

Before the final drain reads ``read_committed`` it waits until no transaction is open
(:func:`workloads.txn_drain.open_transactions`).

Under ``--txn-ctp`` (consume-transform-produce) a thread's polls read its share of the partitions
as a consumer group from the group's committed offsets, and every transaction ends its micro-ops
with a ``send-offsets`` one: the group's next offsets, sent with ``send_offsets_to_transaction``;
after a transaction that did not certainly commit the input rewinds to the committed offsets
(:mod:`workloads.txn_input` says why, and what the checks then verify).

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

from testbed.record.ops import Op, OpType
from testbed.record.recorder import Recorder
from testbed.record.txn_rows import MAX_MICRO_OPS as MAX_MICRO_OPS
from testbed.record.txn_rows import SEND_OFFSETS

from .client_host import ClientHost
from .clients import Received
from .txn_clients import (
    REUSES_SEQUENCES,
    TxnAbortable,
    TxnFatal,
    TxnProducerClient,
    TxnSendUnresolved,
    make_txn_producer,
)
from .txn_input import GroupInput, ReaderInput, owned_partitions
from .txn_subscribed import SubscribedInput

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


def txn_problems(txn: object, abort_p: object, txn_max_ops: object, idempotent: bool, acks: str) -> list[str]:
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
    ctp: bool = False
    """Consume-transform-produce (``--txn-ctp``): polls read the thread's partitions as a consumer
    group and each transaction sends its offsets (:mod:`workloads.txn_input`)."""
    threads: int = 1
    """Producer threads: under ``ctp`` by assign, thread ``i`` owns the partitions ``p % threads == i``."""
    ctp_via: str = "assign"
    """How ``ctp`` threads share the partitions: ``assign`` (statically, above) or ``subscribe``
    (the group's coordinator; :mod:`workloads.txn_subscribed`)."""


def make_input(settings: TxnSettings, index: int, name: str) -> ReaderInput:
    """Producer thread ``index``'s input: a :class:`GroupInput` under ``ctp``, else a reader of
    every partition."""
    if settings.ctp and settings.ctp_via == "subscribe":
        return SubscribedInput(
            settings.client,
            settings.bootstrap,
            settings.isolation,
            settings.topic,
            name,
            settings.request_timeout,
        )
    if settings.ctp:
        owned = owned_partitions(index, settings.threads, settings.partitions)
        return GroupInput(
            settings.client, settings.bootstrap, settings.isolation, settings.topic, owned, name
        )
    return ReaderInput(
        settings.client,
        settings.bootstrap,
        settings.isolation,
        settings.topic,
        list(range(settings.partitions)),
        name,
    )


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
        host: ClientHost | None = None,
    ) -> None:
        """``host``: where the producers run, each in a process of its own (None: in this one)."""
        self.settings = settings
        self._host = host
        self.recorder = recorder
        self.process = index
        self.transactional_id = transactional_id(settings.topic, index)
        self._fresh_id = fresh_id
        self._next_value = next_value
        self._rng = rng or random.Random()
        self._producer: TxnProducerClient | None = None
        self.input = make_input(settings, index, self.transactional_id)
        self._made_at_begin = 0
        """The input's :attr:`~workloads.txn_input.ReaderInput.made` when the transaction began."""
        self._last_outcome = ""
        """The type of the last transaction's completion (``ok``: committed)."""
        self._unsettled = False
        """A producer was dropped and no producer of the same id has fenced it since."""
        self._send_unresolved = False
        """A send of the current transaction ended without an outcome from the client."""

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
            self.input.close()
            self._settle()

    def _now(self) -> int:
        return time.monotonic_ns() - self.recorder.started_ns

    def ready(self, stop: threading.Event) -> bool:
        """Make the producer, then the input's consumer, where missing; False (after a short wait)
        when either could not be made.  The producer first: a new one fences a dropped one and ends
        its open transaction, which a group input's committed offsets may be waiting for."""
        if self._producer is None:
            self._producer = self._new_producer("no producer yet")
            if self._producer is None:
                stop.wait(RETRY_WAIT)
                return False
        if not self.input.ready():
            stop.wait(RETRY_WAIT)
            return False
        return True

    def _new_producer(self, failed: str) -> TxnProducerClient | None:
        """A producer of the thread's transactional id (it fences every earlier one, which settles
        a dropped one); None, logged as ``failed``, when none could be made."""
        args = (
            self.settings.client,
            self.settings.bootstrap,
            self.transactional_id,
            self.settings.request_timeout,
        )
        try:
            if self._host is None:
                producer: TxnProducerClient = make_txn_producer(*args)
            else:
                producer = self._host.txn_producer(self.process, *args)
        except TxnFatal as error:
            logger.info("%s: %s: %s", self.transactional_id, failed, error)
            return None
        self._unsettled = False
        return producer

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
        """One op of ``micro_ops`` (the producer and consumer ready), recorded.  Under ``ctp`` a
        send-offsets micro-op ends every transaction, a draw of polls only included; and after one
        that did not certainly commit the input rewinds to the group's committed offsets."""
        producer = self._producer
        assert producer is not None
        if isinstance(self.input, GroupInput):
            micro_ops = [*micro_ops, {"f": SEND_OFFSETS, "group": self.input.group}]
            self._made_at_begin = self.input.made
            self.transaction_op(producer, micro_ops, stop)
            if self._last_outcome != "ok":
                self.input.rewind()
            return
        if all(micro_op["f"] == "poll" for micro_op in micro_ops):
            polls = [self._poll() for _ in micro_ops]
            if any(polls):
                record_read(self.recorder, self.process, polls)
            return
        self.transaction_op(producer, micro_ops, stop)

    def transaction_op(
        self, producer: TxnProducerClient, micro_ops: list[dict[str, Any]], stop: threading.Event
    ) -> None:
        """The transaction of ``micro_ops``, recorded as one ``txn`` op (its outcome also in
        ``_last_outcome``)."""
        invocation = self.recorder.invoke(self.process, "txn", micro_ops)
        try:
            producer.begin()
        except TxnFatal as failure:
            self._complete(invocation, "fail", not_run(micro_ops), error=str(failure))
            self._drop_producer()
            return
        self._send_unresolved = False
        completed, why = self._run_micro_ops(producer, micro_ops, stop)
        if why is None and self._rng.random() >= self.settings.abort_p:
            self._commit(producer, invocation, completed)
            return
        self._abort(producer, invocation, completed, why or "abort", committing=False)
        if self._send_unresolved and self._producer is producer and self.settings.client in REUSES_SEQUENCES:
            self._drop_producer()  # its next message could be acknowledged unwritten (REUSES_SEQUENCES)

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
            if micro_op["f"] == SEND_OFFSETS:
                sent, why = self._send_offsets(producer, micro_op)
                if why is not None:
                    return completed + not_run(micro_ops[position:]), why
                completed.append(sent)
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
                self._send_unresolved = isinstance(error, TxnSendUnresolved)
                return completed + not_run(micro_ops[position:]), str(error)
            completed.append({**micro_op, "offset": offset})
        return completed, None

    def _poll(self) -> list[Received]:
        return self.input.poll(POLL_TIMEOUT)

    def _complete(
        self, invocation: Op, outcome: OpType, value: list[dict[str, Any]], error: str | None = None
    ) -> None:
        self._last_outcome = outcome
        self.recorder.complete(invocation, outcome, value, error=error)

    def _send_offsets(
        self, producer: TxnProducerClient, micro_op: dict[str, Any]
    ) -> tuple[dict[str, Any], str | None]:
        """The group input's next offsets sent into the open transaction: the completed micro-op,
        or why it could not be (then the transaction aborts).  A consumer replaced since the
        transaction began read from the committed offsets again, so its positions no longer
        follow this transaction's reads: that transaction must abort, not commit them."""
        group_input = self.input
        assert isinstance(group_input, GroupInput)
        if group_input.made != self._made_at_begin:
            return micro_op, "abort: the input's consumer or assignment changed during the transaction"
        metadata = group_input.group_metadata()
        if metadata is None:
            return micro_op, "abort: no input consumer"
        offsets = group_input.offsets()
        try:
            producer.send_offsets(self.settings.topic, offsets, metadata, self.settings.request_timeout)
        except (TxnAbortable, TxnFatal) as error:
            return micro_op, f"send_offsets: {error}"
        entries = [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]
        return {**micro_op, "offsets": entries}, None

    def _commit(self, producer: TxnProducerClient, invocation: Op, completed: list[dict[str, Any]]) -> None:
        called = self._now()
        try:
            producer.commit(self.settings.request_timeout * 2)
        except TxnAbortable as error:
            self._abort(producer, invocation, completed, f"commit refused: {error}", committing=True)
        except TxnFatal as error:
            self._complete(
                invocation, "info", [*completed, {"f": "commit", "time": called}], error=f"commit: {error}"
            )
            self._drop_producer()
        else:
            self._complete(invocation, "ok", [*completed, {"f": "commit", "time": called}])

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
            self._complete(
                invocation,
                "info" if committing else "fail",
                [*completed, {"f": "abort", "time": called}],
                error=f"{error}; abort: {failure}",
            )
            self._drop_producer()
        else:
            self._complete(invocation, "fail", [*completed, {"f": "abort", "time": called}], error=error)
