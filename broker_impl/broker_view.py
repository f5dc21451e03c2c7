"""What the request handlers and the group coordinator use of the broker they serve.

:class:`~broker_impl.broker.Broker` builds a :class:`~broker_impl.group_coordinator.GroupCoordinator`
and, per connection, :class:`~broker_impl.handlers.Handlers`; both call back into the broker
(its settings, its replicas, the cluster metadata it follows, topic creation through the
controller).  They see it through these protocols rather than through the ``Broker`` class, so
the broker module sits above the modules it assembles and no import goes back up to it.  The
protocols are also the whole contract a stand-in broker in a test must meet.

:class:`~broker_impl.broker.Broker` satisfies both structurally; mypy checks that where the
broker hands itself to the coordinator and the handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .partition import Partition


class BrokerView(Protocol):
    """What the group coordinator uses: the broker's settings, its local replicas, the cluster
    metadata it last applied, and topic creation (the coordinator creates ``__consumer_offsets``)."""

    @property
    def settings(self) -> dict[str, Any]:
        """The broker's parsed settings (:data:`broker_impl.config.BROKER_KEYS`), by key."""
        ...

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]:
        """The local replicas, by (topic, partition)."""
        ...

    def metadata_topics(self) -> dict[str, Any]:
        """The topics of the metadata version last applied: name -> ``{"partitions": [state, ...]}``."""
        ...

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        """The unfenced brokers of the metadata last applied: node id -> (host, port)."""
        ...

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, timeout_ms: int
    ) -> tuple[int, str | None]:
        """Ask the controller for a topic (-1: the broker's default) and wait, at most
        ``timeout_ms``, until this broker follows the metadata holding it: (error code, message)."""
        ...


class RequestBrokerView(BrokerView, Protocol):
    """What the Kafka API handlers use besides: the cluster id Metadata answers with, automatic
    topic creation, producer ids for InitProducerId, and the note that a follower fetched (which
    may let the leader expand the ISR)."""

    @property
    def cluster_id(self) -> str: ...

    async def auto_create_topic(self, name: str) -> int:
        """Create ``name`` on a client's Metadata request: the error code to answer for it."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id not handed out before (-1 when the controller cannot be reached)."""
        ...

    def note_follower_fetch(self, partition: Partition) -> None:
        """A follower fetched from ``partition`` (a local leader replica)."""
        ...
