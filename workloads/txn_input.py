"""What a ``--txn`` producer thread's poll micro-ops read: its *input*.

Two kinds, one interface (``ready``, ``poll``, ``close``; :mod:`workloads.txn` drives them):

* :class:`ReaderInput` -- the plain transactional workload's: a consumer of no group, assigned
  every partition from offset 0, continuing where the thread's previous consumer stopped.  Its
  reads take part in the transactional checks (G1a, precommitted-read, wr edges) but commit
  nothing.
* :class:`GroupInput` -- consume-transform-produce (``--txn-ctp``): the thread's share of the
  topic's partitions (:func:`owned_partitions`), read as the consumer group
  :func:`ctp_group` from the group's *committed* offsets, whose next offsets each transaction
  commits with ``send_offsets_to_transaction`` (:meth:`GroupInput.offsets`).  After a
  transaction that did not certainly commit (aborted, failed, unknown) the input *rewinds* to the
  group's committed offsets, as a Kafka Streams task does after an abort: what the transaction
  read must be read again by a later one, and what a transaction committed must never be read
  again.  That is exactly-once processing, and the checks ``consumed-twice`` and
  ``consumed-skipped`` (:mod:`checker.txn.offsets`) verify it from the history alone.

Why :class:`GroupInput` assigns (``--txn-ctp-via assign``, the default): partition ownership is
then static (thread ``i`` of ``n`` owns the partitions ``p % n == i``), so a zombie -- a dropped
producer whose transaction is still open -- is fenced by its successor's ``transactional.id`` (the
pre-KIP-447 rule), and the group's offsets of a partition are written by one thread's transactions
only: a record read twice or skipped is the broker's fault (or the client's), never two owners
racing.  The subscribed form, partitions moving at rebalances and zombies fenced by generation, is
:class:`workloads.txn_subscribed.SubscribedInput`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, cast

from .clients import ConsumerClient, Received, make_consumer

logger = logging.getLogger(__name__)

COMMITTED_TIMEOUT = 5.0
"""Seconds a fetch of the group's committed offsets may take before the input counts as not ready."""


def ctp_group(topic: str) -> str:
    """The consumer group of consume-transform-produce on ``topic`` (one per run's topic)."""
    return f"tidemark-{topic}-ctp"


CTP_VIA = ("assign", "subscribe")
"""How consume-transform-produce threads share the partitions (``--txn-ctp-via``)."""


def ctp_problems(txn: bool, txn_ctp: object, isolation: str, via: object = "assign") -> list[str]:
    """What is wrong with the queue spec's ``txn_ctp`` settings."""
    if not isinstance(txn_ctp, bool):
        return [f"txn_ctp (--txn-ctp) must be true or false, not {txn_ctp!r}"]
    if via not in CTP_VIA:
        return [f"txn_ctp_via (--txn-ctp-via) must be one of {', '.join(CTP_VIA)}, not {via!r}"]
    if via != "assign" and not txn_ctp:
        return ["txn_ctp_via (--txn-ctp-via) needs txn_ctp (--txn-ctp)"]
    if txn_ctp and not txn:
        return ["txn_ctp (--txn-ctp) needs txn (--txn)"]
    if txn_ctp and isolation != "read_committed":
        return [
            "txn_ctp (--txn-ctp) needs --isolation read_committed: only a read_committed consumer "
            "waits for a pending transactional offset commit (KIP-447), so only it rewinds to "
            "offsets that are settled"
        ]
    return []


def owned_partitions(index: int, threads: int, partitions: int) -> list[int]:
    """The partitions producer thread ``index`` of ``threads`` reads under ``--txn-ctp``."""
    return [p for p in range(partitions) if p % threads == index]


class _GroupConsumer(Protocol):
    """What :class:`GroupInput` needs beyond :class:`ConsumerClient` (both clients have it)."""

    def committed(self, topic: str, partitions: list[int], timeout: float) -> dict[int, int]: ...

    def group_metadata(self) -> Any: ...


class ReaderInput:
    """Every partition from offset 0, by assign, no group (module docstring)."""

    def __init__(
        self, client: str, bootstrap: str, isolation: str, topic: str, partitions: list[int], name: str
    ) -> None:
        self.client, self.bootstrap, self.isolation = client, bootstrap, isolation
        self.topic, self.partitions, self.name = topic, partitions, name
        self._consumer: ConsumerClient | None = None
        self._positions = dict.fromkeys(partitions, 0)
        self.made = 0
        """Consumers made so far: a transaction whose input was replaced mid-way can tell."""

    def _make(self) -> ConsumerClient:
        return make_consumer(self.client, self.bootstrap, self.isolation)

    def _start_offsets(self, consumer: ConsumerClient) -> dict[int, int]:
        return dict(self._positions)

    def ready(self) -> bool:
        """Make the consumer if missing, at the positions to resume from; False when it could not
        be made (the cluster is down: the caller waits and asks again)."""
        if self._consumer is None:
            consumer: ConsumerClient | None = None
            try:
                consumer = self._make()
                start = self._start_offsets(consumer)
                consumer.assign(self.topic, start)
            except Exception as error:
                logger.info("%s: no consumer yet: %s: %s", self.name, type(error).__name__, error)
                if consumer is not None:
                    consumer.close()
                return False
            self._positions = start
            self._consumer = consumer
            self.made += 1
        return True

    def poll(self, timeout: float) -> list[Received]:
        """One poll.  A consumer that fails is dropped (the next ``ready`` makes one at the
        positions to resume from) and the poll counts as having read nothing."""
        if not self.partitions or not self.ready():
            return []
        assert self._consumer is not None
        try:
            received = self._consumer.poll(timeout)
        except Exception as error:
            logger.info("%s: consumer replaced: %s: %s", self.name, type(error).__name__, error)
            self.close()
            return []
        for record in received:
            if record.partition in self._positions:
                self._positions[record.partition] = max(self._positions[record.partition], record.offset + 1)
        return received

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class GroupInput(ReaderInput):
    """The thread's partitions as consumer group :func:`ctp_group`, from its committed offsets."""

    def __init__(
        self, client: str, bootstrap: str, isolation: str, topic: str, partitions: list[int], name: str
    ) -> None:
        super().__init__(client, bootstrap, isolation, topic, partitions, name)
        self.group = ctp_group(topic)
        self._rewind = False

    def _make(self) -> ConsumerClient:
        return make_consumer(self.client, self.bootstrap, self.isolation, self.group)

    def _start_offsets(self, consumer: ConsumerClient) -> dict[int, int]:
        """The group's committed offsets (0 where it has none: the topic was empty at the start)."""
        committed = cast(_GroupConsumer, consumer).committed(self.topic, self.partitions, COMMITTED_TIMEOUT)
        return {p: committed.get(p, 0) for p in self.partitions}

    def offsets(self) -> dict[int, int]:
        """The next offset of every owned partition: what a transaction's ``send_offsets`` commits
        (past every record it and the committed transactions before it read, and past the
        markers and aborted records the isolation level skipped -- the consumer's position)."""
        positions = dict(self._positions)
        if self._consumer is not None:
            for partition in self.partitions:
                try:
                    position = self._consumer.position(self.topic, partition)
                except Exception:  # the tracked position stands: a record past it was never returned
                    continue
                if position >= positions[partition]:
                    positions[partition] = position
        return positions

    def group_metadata(self) -> Any:
        """The consumer's group metadata for ``send_offsets_to_transaction``; None when the consumer
        is gone (the transaction then cannot send its offsets and must abort)."""
        if self._consumer is None:
            return None
        return cast(_GroupConsumer, self._consumer).group_metadata()

    def rewind(self) -> None:
        """Back to the group's committed offsets, at the next ``ready`` -- after the caller made its
        producer, whose ``init_transactions`` ends what a dropped one left open: until then the
        group's offsets may be pending, and a ``read_committed`` consumer's fetch of them waits."""
        self._rewind = True

    def ready(self) -> bool:
        if self._rewind and self._consumer is not None:
            try:
                start = self._start_offsets(self._consumer)
                self._consumer.assign(self.topic, start)
            except Exception as error:
                logger.info("%s: consumer replaced to rewind: %s: %s", self.name, type(error).__name__, error)
                self.close()
            else:
                self._positions = start
                self.made += 1
        self._rewind = False
        return super().ready()
