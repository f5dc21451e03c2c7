"""A broker's own writes to a partition it leads, with ``acks=all``: coordinator records, markers.

The transaction coordinator's ``__transaction_state`` records and the transaction markers are
appended exactly as a producer's ``acks=all`` batch is -- the same log, epoch stamping, flush
policy and ack waiter -- so every fault and bug switch that acts on user data acts on them too.
(The group coordinator has the same logic inline; it can move here.)
"""

from __future__ import annotations

import asyncio
import logging

from . import records, wire
from .partition import Partition

logger = logging.getLogger(__name__)


async def append_and_wait(
    partition: Partition, batch: bytearray, timeout: float, leader_epoch: int | None = None
) -> tuple[int, int]:
    """Append ``batch`` to ``partition`` as its leader (in ``leader_epoch``, when given) and wait
    until the HW passes it: (error, base offset).  NOT_LEADER_OR_FOLLOWER when not (or no longer)
    the leader, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) below ``min.insync.replicas``,
    REQUEST_TIMED_OUT after ``timeout`` seconds, KAFKA_STORAGE_ERROR when the write fails outside a
    broker process (inside one a storage error halts it first: :mod:`broker_impl.log_dir_failure`)."""
    if partition.role != "leader" or (leader_epoch is not None and partition.leader_epoch != leader_epoch):
        return wire.NOT_LEADER_OR_FOLLOWER, -1
    min_insync = partition.rules.min_insync_replicas
    if len(partition.isr) < min_insync:
        return wire.NOT_ENOUGH_REPLICAS, -1
    try:
        first, last = partition.append_as_leader(batch, records.parse_header(batch))
    except OSError as error:
        logger.error("%s: append failed: %s", partition.name, error)
        return wire.KAFKA_STORAGE_ERROR, -1
    partition.data_appended.notify()
    partition.maybe_increment_high_watermark()
    waiter = partition.add_ack_waiter(last + 1)
    try:
        outcome = await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
    except TimeoutError:
        partition.remove_ack_waiter(waiter)
        return wire.REQUEST_TIMED_OUT, -1
    if outcome != wire.NONE:
        return outcome, -1
    if len(partition.isr) < min_insync:
        return wire.NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1
    return wire.NONE, first
