"""The ``--txn`` drain's wait: until no transaction is open on any partition of the topic.

Before the final drain reads ``read_committed``, :func:`open_transactions` waits until no
transaction is open on any partition (a dropped producer's that its thread could not settle ends
by the coordinator's timeout): the drain's end offset is then the last stable offset, and a
transaction still open would hide every later commit from it.  A partition still held back at the
deadline gets a drain that does not claim to be complete (verdict at best unknown; a hanging
transaction), rather than a complete one that makes the commits above it look lost.
"""

from __future__ import annotations

import logging
import time

from .clients import ConsumerClient, make_consumer
from .txn_clients import transaction_timeout_ms

logger = logging.getLogger(__name__)


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
