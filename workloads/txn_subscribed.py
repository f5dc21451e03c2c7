"""Consume-transform-produce with a *subscribed* input (``--txn-ctp --txn-ctp-via subscribe``).

The modern form of Kafka's exactly-once processing (KIP-447): the producer threads are members of
one consumer group, the group's coordinator shares the partitions among them and moves them when a
member joins, leaves or stalls, and each transaction sends its offsets with the member's *group
metadata* (member id, generation), so that the coordinator refuses a TxnOffsetCommit of a member
whose generation is gone (a zombie that lost its partitions) -- fencing by generation instead of by
``transactional.id``.

:class:`SubscribedInput` is a :class:`~workloads.txn_input.GroupInput` whose partitions are
whatever the group assigned last: every assignment or revocation counts as a new consumer
(:attr:`~workloads.txn_input.ReaderInput.made`), so a transaction during which the assignment
changed aborts without sending offsets (what it read may belong to another member now).  The
consumer is the group workload's member (:func:`workloads.group_fleet.make_group_consumer`: the
same settings, both libraries, rebalance callbacks as steps); its client library is reached for
what only a transactional input needs -- positions, the group metadata, the committed offsets
and seeks -- by :class:`_Library`.  A rewind seeks every assigned partition to the group's
committed offset (leaving and rejoining would rebalance the whole group at every abort).
"""

from __future__ import annotations

import logging
from typing import Any

from .clients import KAFKA_PYTHON, Received, confluent_committed, kafka_python_committed
from .group_events import Assigned, GroupConsumerClient, Revoked
from .group_fleet import make_group_consumer
from .txn_input import COMMITTED_TIMEOUT, GroupInput

logger = logging.getLogger(__name__)

OFFSET_INVALID = -1001
"""librdkafka's offset of a partition whose position is not known yet."""


class _Library:
    """The client library calls a subscribed transactional input needs, on a member's ``consumer``."""

    def __init__(self, client: str, topic: str) -> None:
        self.kafka_python = client in KAFKA_PYTHON
        self.topic = topic

    def _tp(self, partition: int, offset: int | None = None) -> Any:
        if self.kafka_python:
            from kafka import TopicPartition

            return TopicPartition(self.topic, partition)
        from confluent_kafka import TopicPartition as ConfluentTopicPartition

        if offset is None:
            return ConfluentTopicPartition(self.topic, partition)
        return ConfluentTopicPartition(self.topic, partition, offset)

    def positions(self, consumer: Any, partitions: tuple[int, ...]) -> dict[int, int]:
        """The next offset of each partition whose position is known."""
        if self.kafka_python:
            found = {p: consumer.position(self._tp(p)) for p in partitions}
            return {p: int(o) for p, o in found.items() if o is not None and o >= 0}
        answers = consumer.position([self._tp(p) for p in partitions])
        return {a.partition: int(a.offset) for a in answers if a.offset >= 0}

    def committed(self, consumer: Any, partitions: tuple[int, ...]) -> dict[int, int]:
        read = kafka_python_committed if self.kafka_python else confluent_committed
        return read(consumer, self.topic, partitions, COMMITTED_TIMEOUT)

    def seek(self, consumer: Any, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            if self.kafka_python:
                consumer.seek(self._tp(partition), offset)
            else:
                consumer.seek(self._tp(partition, offset))

    def group_metadata(self, consumer: Any) -> Any:
        return consumer.group_metadata() if self.kafka_python else consumer.consumer_group_metadata()


class SubscribedInput(GroupInput):
    """The thread's share of the topic as the group assigns it (module docstring)."""

    def __init__(
        self, client: str, bootstrap: str, isolation: str, topic: str, name: str, request_timeout: float
    ) -> None:
        super().__init__(client, bootstrap, isolation, topic, [], name)
        self.request_timeout = request_timeout
        self._library = _Library(client, topic)
        self._member: GroupConsumerClient | None = None

    def _raw(self) -> Any:
        """The member's client library consumer (both adapters keep it as ``consumer``)."""
        member: Any = self._member
        return member.consumer

    @property
    def assigned(self) -> tuple[int, ...]:
        return tuple(self.partitions)

    def ready(self) -> bool:
        if self._member is None:
            try:
                self._member = make_group_consumer(
                    self.client,
                    self.bootstrap,
                    self.topic,
                    self.group,
                    "sync",
                    self.request_timeout,
                    self.isolation,
                )
            except Exception as error:
                logger.info("%s: no group member yet: %s: %s", self.name, type(error).__name__, error)
                return False
            self.partitions = []
            self.made += 1
            self._rewind = False
        if self._rewind:
            self._rewind = False
            self._seek_committed()
        return True

    def _seek_committed(self) -> None:
        """Every assigned partition back to the group's committed offset (0 where none); a member
        that cannot is closed (the next ``ready`` joins again, and the client then starts each
        assigned partition at the committed offset itself)."""
        assert self._member is not None
        consumer = self._raw()
        try:
            committed = self._library.committed(consumer, self.assigned)
            self._library.seek(consumer, {p: committed.get(p, 0) for p in self.assigned})
        except Exception as error:
            logger.info("%s: member replaced to rewind: %s: %s", self.name, type(error).__name__, error)
            self.close()
            return
        self.made += 1

    def poll(self, timeout: float) -> list[Received]:
        """One poll's records; an assignment or revocation it served changes the partitions and
        counts as a new consumer (:attr:`made`)."""
        if not self.ready():
            return []
        assert self._member is not None
        try:
            steps = self._member.poll(timeout)
        except Exception as error:
            logger.info("%s: group member replaced: %s: %s", self.name, type(error).__name__, error)
            self.close()
            return []
        records = []
        for step in steps:
            if isinstance(step, Assigned):
                self.partitions = list(step.partitions)
                self.made += 1
            elif isinstance(step, Revoked):
                self.partitions = [p for p in self.partitions if p not in step.partitions]
                self.made += 1
            elif isinstance(step, Received):
                records.append(step)
        return records

    def offsets(self) -> dict[int, int]:
        """The next offset of every assigned partition whose position the client knows."""
        if self._member is None or not self.partitions:
            return {}
        return self._library.positions(self._raw(), self.assigned)

    def group_metadata(self) -> Any:
        """The member's group metadata (member id, generation): the coordinator fences a
        TxnOffsetCommit of a generation that is gone (KIP-447)."""
        if self._member is None:
            return None
        return self._library.group_metadata(self._raw())

    def close(self) -> None:
        """Leave the group (the remaining members share the partitions)."""
        if self._member is not None:
            try:
                self._member.close()
            except Exception as error:
                logger.info("%s: closing the member: %s: %s", self.name, type(error).__name__, error)
            self._member = None
        self.partitions = []
