"""A coordinator over an internal topic: what the group and the transaction coordinators share.

Both keep their state in an internal topic (``__consumer_offsets``, ``__transaction_state``), a
key (group id, transactional id) hashed to one of its partitions, and the coordinator of a key is
the leader of that partition.  The three questions every request of either asks -- which local
partition state owns this key, where is its coordinator, and create the topic on first use -- are
answered here once, so the two coordinators cannot drift apart (Kafka's
``CoordinatorRuntime``/``TransactionStateManager`` split the same way).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from . import wire

logger = logging.getLogger(__name__)


class _Broker(Protocol):
    @property
    def settings(self) -> dict[str, Any]: ...

    def metadata_topics(self) -> dict[str, Any]: ...

    def live_brokers(self) -> dict[int, tuple[str, int]]: ...

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, timeout_ms: int
    ) -> tuple[int, str | None]: ...


class _State(Protocol):
    @property
    def loaded(self) -> bool: ...


State = TypeVar("State", bound=_State)


@dataclasses.dataclass(frozen=True)
class CoordinatorTopic:
    """One internal topic: its name, how a key maps to a partition, and the settings that size it."""

    name: str
    partition_of: Callable[[str, int], int]
    """(key, partition count) -> the key's partition (Kafka's hash of the key)."""
    partitions_setting: str
    replication_setting: str

    def owner(self, broker: _Broker, states: Mapping[int, State], key: str) -> tuple[int, State | None]:
        """The loaded local state holding ``key``: NOT_COORDINATOR when this broker does not lead
        its partition (or the topic does not exist yet), COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        topic = broker.metadata_topics().get(self.name)
        if topic is None:
            return wire.NOT_COORDINATOR, None
        state = states.get(self.partition_of(key, len(topic["partitions"])))
        if state is None:
            return wire.NOT_COORDINATOR, None
        if not state.loaded:
            return wire.COORDINATOR_LOAD_IN_PROGRESS, None
        return wire.NONE, state

    async def locate(self, broker: _Broker, key: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of ``key``'s coordinator: the leader of its partition in
        the broker's metadata.  Creates the topic on first use (FindCoordinator's side effect)."""
        topic = broker.metadata_topics().get(self.name)
        if topic is None:
            await self.create(broker)
            topic = broker.metadata_topics().get(self.name)
            if topic is None:
                return wire.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        leader = topic["partitions"][self.partition_of(key, len(topic["partitions"]))]["leader"]
        address = broker.live_brokers().get(leader)
        if address is None:
            return wire.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return wire.NONE, leader, address[0], address[1]

    async def create(self, broker: _Broker) -> int:
        """Create the topic with its configured partition count and replication factor, the
        latter capped at the live brokers (a small cluster still gets a coordinator); racing
        creators all succeed."""
        live = max(1, len(broker.live_brokers()))
        replication = min(broker.settings[self.replication_setting], live)
        error, message = await broker.create_topic(
            self.name, broker.settings[self.partitions_setting], replication, 5000
        )
        if error not in (wire.NONE, wire.TOPIC_ALREADY_EXISTS):
            logger.warning("cannot create %s: %s", self.name, message)
        return error
