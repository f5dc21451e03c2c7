"""The queue workload's ``assign`` consumers (``--consume-via assign``): each thread reads a fixed
share of the partitions, outside any consumer group.

Ops it records (``docs/history.md``): ``poll`` -- ``ok`` with the records one consumer process
received, in order (under ``txn`` a read-only ``txn`` op, so that the offset gaps of transaction
markers are no poll skips); ``info`` when the poll failed -- a broker fault, or the consumer's
process killed by ``consumer-crash`` under ``--client-processes``
(:mod:`workloads.hosted_consumers`).  After an ``info`` the process retires (it never invokes
again) and a fresh process opens a new consumer at the positions read so far, as Jepsen's
interpreter reopens a crashed worker's client.  A consumer that cannot be had -- no broker
answers, or its process died before its first poll -- invoked nothing: the same process tries
again at the next tick.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from .client_host import ClientHost
from .clients import ConsumerClient, make_consumer
from .hosted_consumers import hosted_consumer
from .queue_drain import QueueDrain
from .txn import record_read

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.5
"""A poll's timeout, and how long a consumer that cannot be opened waits before it tries again."""


@dataclasses.dataclass(frozen=True)
class AssignedConsumers:
    """What the ``assign`` consumers read, with which client, and where their ops go -- the same
    as the drain's (``reads``: its ``fresh_id`` hands out new process ids) -- whether their reads
    are ``txn`` ops, and their processes under ``--client-processes`` (``host``)."""

    reads: QueueDrain
    txn: bool
    host: ClientHost | None

    def consume(self, partitions: list[int], process: int, stop: threading.Event) -> None:
        """Read ``partitions`` from offset 0 as ``process`` (and its successors) until ``stop``."""
        positions = dict.fromkeys(partitions, 0)
        consumer: ConsumerClient | None = None
        try:
            while not stop.is_set():
                if consumer is None:
                    consumer = self._assigned(process, positions)
                    if consumer is None:
                        stop.wait(POLL_SECONDS)
                        continue
                try:
                    received = consumer.poll(POLL_SECONDS)
                except Exception as error:
                    f, invoke = ("txn", [{"f": "poll"}]) if self.txn else ("poll", None)
                    invocation = self.reads.recorder.invoke(process, f, invoke)
                    self.reads.recorder.complete(
                        invocation, "info", None, error=f"{type(error).__name__}: {error}"
                    )
                    process = self.reads.fresh_id()
                    consumer.close()
                    consumer = None
                    continue
                if not received:
                    continue
                if self.txn:  # a read-only txn op: offset gaps of markers are no poll skips
                    record_read(self.reads.recorder, process, [received])
                else:
                    invocation = self.reads.recorder.invoke(process, "poll", None)
                    self.reads.recorder.complete(invocation, "ok", [r.to_json() for r in received])
                for record in received:
                    positions[record.partition] = max(positions[record.partition], record.offset + 1)
        finally:
            if consumer is not None:
                consumer.close()

    def _assigned(self, process: int, positions: dict[int, int]) -> ConsumerClient | None:
        """Process ``process``'s consumer, assigned at ``positions``; None when it cannot be had now."""
        try:
            consumer = self.open(process)
        except Exception as error:
            logger.info("consumer not opened yet: %s: %s", type(error).__name__, error)
            return None
        try:
            consumer.assign(self.reads.topic, positions)
        except Exception as error:
            logger.info("consumer not assigned yet: %s: %s", type(error).__name__, error)
            consumer.close()
            return None
        return consumer

    def open(self, process: int) -> ConsumerClient:
        """Process ``process``'s consumer: in a process of its own under ``--client-processes``."""
        reads = self.reads
        if self.host is None:
            return make_consumer(reads.client, reads.bootstrap, reads.isolation)
        return hosted_consumer(
            self.host, process, reads.client, reads.bootstrap, reads.isolation, reads.request_timeout
        )
