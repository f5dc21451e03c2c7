"""The queue workload's final drain: every partition read from its start to its end offset.

Ops it records (``docs/history.md``): ``drain`` -- after every fault is healed, fresh processes
read every partition from its start to its end offset (the HW, or the last stable offset under
``read_committed``): ``ok`` ``{"partition", "records", "end_offset", "complete"}``, in chunks of
:data:`DRAIN_CHUNK` records; ``complete`` marks the last chunk that reached the end; ``info`` when
the read failed or the deadline passed first.  Its clients are threads of the harness, also under
``--client-processes``: nothing crashes them (the nemesis is stopped by then).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from testbed.record.recorder import Recorder

from .clients import make_consumer, parse_value
from .txn_drain import open_transactions

logger = logging.getLogger(__name__)

DRAIN_CHUNK = 5000


@dataclasses.dataclass(frozen=True)
class QueueDrain:
    """What the drain reads, with which client, and where its ops go (``fresh_id``: a new
    process id per partition)."""

    recorder: Recorder
    client: str
    isolation: str
    bootstrap: str
    topic: str
    request_timeout: float
    fresh_id: Callable[[], int]

    def drain(self, partitions: int, txn: bool, deadline: float) -> dict[int, bool]:
        """Read every partition from its start to its end with fresh processes.

        Returns ``{partition: complete}``.  Waits on progress, not on time: it stops
        when every partition reached its end offset, or at ``deadline`` (monotonic).  With
        ``txn`` under ``read_committed`` it first waits for open transactions to end
        (:func:`workloads.txn_drain.open_transactions`); a partition one still holds back is drained
        to its last stable offset but never complete.
        """
        numbers = list(range(partitions))
        held: list[int] = []
        if txn and self.isolation == "read_committed":
            held = open_transactions(
                self.client, self.bootstrap, self.topic, numbers, self.request_timeout, deadline
            )
            for partition in held:
                logger.warning("drain: a transaction is still open on partition %d", partition)
        return {p: self.partition(p, deadline, final=p not in held) for p in numbers}

    def partition(self, partition: int, deadline: float, final: bool = True) -> bool:
        """One partition's drain ops; ``final``: its end offset is the end of everything written."""
        process = self.fresh_id()
        invocation = self.recorder.invoke(process, "drain", {"partition": partition})
        consumer = None
        records: list[dict[str, Any]] = []
        end_offset = -1
        try:
            consumer = make_consumer(self.client, self.bootstrap, self.isolation)
            while end_offset < 0 and time.monotonic() < deadline:
                try:
                    end_offset = consumer.end_offsets(self.topic, [partition], 5.0)[partition]
                except Exception as error:
                    logger.info("drain: end offset of %d unavailable: %s", partition, error)
                    time.sleep(0.2)
            if end_offset < 0:
                raise TimeoutError("end offset unavailable before the deadline")
            consumer.assign(self.topic, {partition: 0})
            position = 0
            while position < end_offset and time.monotonic() < deadline:
                for record in consumer.poll(0.5):
                    if record.partition != partition or record.offset >= end_offset:
                        continue
                    records.append(
                        {"offset": record.offset, "key": record.key, "value": parse_value(record.value)}
                    )
                    position = record.offset + 1
                    if len(records) >= DRAIN_CHUNK:
                        self.recorder.complete(
                            invocation,
                            "ok",
                            {
                                "partition": partition,
                                "records": records,
                                "end_offset": end_offset,
                                "complete": False,
                            },
                        )
                        records = []
                        invocation = self.recorder.invoke(process, "drain", {"partition": partition})
                # past what the consumer skips without returning it: transaction markers, and
                # aborted transactions' records under read_committed
                position = max(position, consumer.position(self.topic, partition))
            done = position >= end_offset and final
            self.recorder.complete(
                invocation,
                "ok",
                {"partition": partition, "records": records, "end_offset": end_offset, "complete": done},
            )
            return done
        except Exception as error:
            self.recorder.complete(
                invocation,
                "info",
                {"partition": partition, "records": records, "end_offset": end_offset, "complete": False},
                error=f"{type(error).__name__}: {error}",
            )
            return False
        finally:
            if consumer is not None:
                consumer.close()
