"""What the harness asks the cluster itself, over the real Kafka protocol.

Topic creation and "who leads, who is in sync" use kafka-python's admin client, so
they work the same against the bundled broker and against any Kafka-compatible cluster
(``--bootstrap``).  Each call opens a short-lived client with its own timeout: the
cluster is being crashed and partitioned while we ask, and a stuck client must never
hang the harness.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from broker_impl.group_records import (
    OFFSETS_TOPIC as OFFSETS_TOPIC,  # re-exported: what the harness asks about
)
from broker_impl.group_records import partition_for
from broker_impl.txn_records import (
    TRANSACTION_STATE_TOPIC as TRANSACTION_STATE_TOPIC,  # re-exported, as OFFSETS_TOPIC
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ClusterUnavailable(Exception):
    """The cluster did not answer (in time)."""


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def _admin(bootstrap: str, timeout: float) -> object:
    from kafka.admin import KafkaAdminClient

    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), reconnect_backoff_max_ms=500
        )
    except Exception as error:
        raise ClusterUnavailable(f"{bootstrap}: {type(error).__name__}: {error}") from None


def create_topic(
    bootstrap: str, name: str, partitions: int, replication_factor: int, timeout: float = 15.0
) -> None:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = _admin(bootstrap, timeout)
    try:
        admin.create_topics([NewTopic(name, partitions, replication_factor)])  # type: ignore[attr-defined]
    except TopicAlreadyExistsError:
        pass
    except Exception as error:
        raise ClusterUnavailable(f"create topic {name}: {type(error).__name__}: {error}") from None
    finally:
        admin.close()  # type: ignore[attr-defined]


def topic_end_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, int]:
    """Each partition's end offset (ListOffsets latest, read_uncommitted): what the topic holds."""
    from kafka import KafkaConsumer, TopicPartition

    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            request_timeout_ms=int(timeout * 1000) + 1000,
        )
    except Exception as error:
        raise ClusterUnavailable(f"{bootstrap}: {type(error).__name__}: {error}") from None
    try:
        wanted = [TopicPartition(topic, partition) for partition in range(partitions)]
        ends = consumer.end_offsets(wanted, timeout_ms=int(timeout * 1000))
    except Exception as error:
        raise ClusterUnavailable(f"end offsets of {topic}: {type(error).__name__}: {error}") from None
    finally:
        consumer.close()
    return {tp.partition: int(offset) for tp, offset in ends.items()}


def describe_topic(bootstrap: str, topic: str, timeout: float = 5.0) -> list[PartitionInfo]:
    admin = _admin(bootstrap, timeout)
    try:
        described = admin.describe_topics([topic])  # type: ignore[attr-defined]
    except Exception as error:
        raise ClusterUnavailable(f"describe {topic}: {type(error).__name__}: {error}") from None
    finally:
        admin.close()  # type: ignore[attr-defined]
    if not described or described[0].get("error_code"):
        raise ClusterUnavailable(
            f"describe {topic}: error {described[0].get('error_code') if described else '?'}"
        )
    return sorted(
        (
            PartitionInfo(
                p["partition_index"],
                p["leader_id"],
                p.get("leader_epoch", -1),
                tuple(p["replica_nodes"]),
                tuple(p["isr_nodes"]),
            )
            for p in described[0]["partitions"]
        ),
        key=lambda info: info.partition,
    )


def group_offsets_partition(bootstrap: str, group: str, timeout: float = 5.0) -> int | None:
    """The partition of ``__consumer_offsets`` that holds ``group`` (its coordinator leads it),
    by Kafka's rule -- the same on every Kafka-compatible cluster that follows it; None while
    the topic does not exist yet (a cluster creates it at the first FindCoordinator)."""
    try:
        partitions = describe_topic(bootstrap, OFFSETS_TOPIC, timeout)
    except ClusterUnavailable:
        return None
    return partition_for(group, len(partitions)) if partitions else None


def transaction_state_partition(bootstrap: str, transactional_id: str, timeout: float = 5.0) -> int | None:
    """The partition of ``__transaction_state`` that holds ``transactional_id`` (its transaction
    coordinator leads it), by Kafka's rule; None while the topic does not exist yet (a cluster
    creates it at the first FindCoordinator of a transactional id)."""
    try:
        partitions = describe_topic(bootstrap, TRANSACTION_STATE_TOPIC, timeout)
    except ClusterUnavailable:
        return None
    return partition_for(transactional_id, len(partitions)) if partitions else None


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, poll: float = 0.1) -> T:
    """Poll ``condition`` until it returns a truthy value; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last_problem = ""
    while True:
        try:
            value = condition()
            if value:
                return value
        except ClusterUnavailable as error:
            last_problem = f" (last: {error})"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{last_problem}")
        time.sleep(poll)


def all_partitions_led(bootstrap: str, topic: str, partitions: int) -> list[PartitionInfo] | None:
    infos = describe_topic(bootstrap, topic)
    if len(infos) == partitions and all(info.leader >= 0 for info in infos):
        return infos
    return None


def fully_replicated(bootstrap: str, topic: str, partitions: int) -> list[PartitionInfo] | None:
    """Every partition led and its ISR equal to its replica set: the recovered state."""
    infos = all_partitions_led(bootstrap, topic, partitions)
    if infos and all(set(info.isr) == set(info.replicas) for info in infos):
        return infos
    return None


def broker_answers(address: str) -> bool:
    """Whether the broker at ``address`` (``host:port``) accepts a Kafka connection and answers
    ApiVersions now (within 2 s): the "is this node's broker up" of every target that starts its own."""
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=2000)
    except Exception:
        return False
    admin.close()
    return True


def node_named(node_ids: dict[str, int], broker_id: int) -> str | None:
    """The node name whose Kafka broker id is ``broker_id``."""
    return next((name for name, node_id in node_ids.items() if node_id == broker_id), None)


def leader_node(bootstrap: str, node_ids: dict[str, int], topic: str, partition: int) -> str | None:
    """The node leading ``topic``/``partition`` now, or None when unknown or unreachable."""
    try:
        infos = describe_topic(bootstrap, topic)
    except ClusterUnavailable:
        return None
    return next((node_named(node_ids, i.leader) for i in infos if i.partition == partition), None)


METADATA_VERSION = 9
"""Metadata v9: the first with leader epochs and flexible fields, answered by Kafka >= 2.4."""


@dataclasses.dataclass(frozen=True)
class BrokerView:
    """One broker's own metadata of a topic: its partitions and the brokers it knows, each by the
    address it advertises (``host:port``, what a Kafka client connects to)."""

    partitions: tuple[PartitionInfo, ...]
    addresses: Mapping[int, str]


def metadata_at(address: str, topic: str, timeout: float = 5.0) -> BrokerView:
    """What the one broker at ``address`` (``host:port``) believes about ``topic``.

    Unlike :func:`describe_topic`, whose admin client asks whichever broker it likes, this
    asks exactly one broker on one connection, so the answer is that broker's own metadata
    cache -- which is what tells a broker that lags behind the controller (a zombie with
    stale leadership) from the rest.  Raises :class:`ClusterUnavailable` when the broker
    cannot be reached or does not know the topic.
    """
    from broker_impl import wire

    host, _, port = address.rpartition(":")
    api = wire.APIS[3]
    topic_class = wire.nested(api.request, "MetadataRequestTopic")
    request = api.request(
        version=METADATA_VERSION,
        topics=[topic_class(name=topic)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )

    async def ask() -> Any:
        connection = wire.KafkaConnection(host, int(port), client_id="tidemark-describe", timeout=timeout)
        try:
            return await connection.call(request, api.response, METADATA_VERSION)
        finally:
            connection.close()

    try:
        response = asyncio.run(ask())
    except (ConnectionError, TimeoutError, OSError) as error:
        raise ClusterUnavailable(f"describe {topic} at {address}: {type(error).__name__}: {error}") from None
    found = [entry for entry in response.topics if entry.name == topic]
    if not found or found[0].error_code:
        code = found[0].error_code if found else "no such topic"
        raise ClusterUnavailable(f"describe {topic} at {address}: error {code}")
    partitions = sorted(
        (
            PartitionInfo(
                p.partition_index,
                p.leader_id,
                p.leader_epoch,
                tuple(p.replica_nodes),
                tuple(p.isr_nodes),
            )
            for p in found[0].partitions
        ),
        key=lambda info: info.partition,
    )
    addresses = {broker.node_id: f"{broker.host}:{broker.port}" for broker in response.brokers}
    return BrokerView(tuple(partitions), addresses)


def describe_topic_at(address: str, topic: str, timeout: float = 5.0) -> list[PartitionInfo]:
    """The partitions of :func:`metadata_at`'s answer."""
    return list(metadata_at(address, topic, timeout).partitions)


def freshest_partition_info(bootstrap: str, topic: str, partition: int) -> PartitionInfo | None:
    """The most recent view of one partition that any broker of ``bootstrap`` holds.

    Each broker is asked on its own (:func:`metadata_at`), all at once (a paused or booting
    broker costs one timeout per poll, not one per broker); brokers that do not answer are
    skipped.  The highest leader epoch wins -- a broker whose metadata is stale (cut off
    from the controller, say) reports an older epoch.  Among answers of that epoch the most
    common one wins (a single zombie is outvoted on an ISR change that did not bump the epoch).
    ``None`` when no broker answers, or when the winning view has no leader: the controller
    took the partition offline in a newer epoch (its last ISR replica died), and an older
    view's leader -- a zombie's -- must not stand in for it.  (Skipping leaderless answers let
    a zombie's stale leader satisfy a ``leader-is`` wait while the partition was offline.)
    Scenario waits use this so a zombie's stale belief cannot satisfy them.
    """
    found = freshest_leader(bootstrap, topic, partition)
    return found[0] if found is not None else None


def freshest_leader(bootstrap: str, topic: str, partition: int) -> tuple[PartitionInfo, str | None] | None:
    """:func:`freshest_partition_info` with the leader's advertised address (``host:port``), as the
    brokers that gave the winning view name it (``None`` if none of them lists the leader).

    A client that must reach the leader *now* bootstraps at that address alone: bootstrapped at
    every broker, its first Metadata may come from a zombie, whose stale leader may be dead."""
    found = freshest_view(bootstrap, topic, partition)
    if found is None or found[0].leader < 0:
        return None
    return found


def freshest_view(bootstrap: str, topic: str, partition: int) -> tuple[PartitionInfo, str | None] | None:
    """The winning view of :func:`freshest_leader` even when it has no leader (``leader`` -1: the
    controller took the partition offline in that epoch), with the leader's address where named;
    ``None`` only when no broker answers.  What a wait for a leader to be *deposed* reads: offline
    counts, where a wait for another leader must not."""
    addresses = [entry.strip() for entry in bootstrap.split(",") if entry.strip()]
    if not addresses:
        return None

    def ask(address: str) -> BrokerView | None:
        try:
            return metadata_at(address, topic, timeout=2.0)
        except ClusterUnavailable:
            return None

    with concurrent.futures.ThreadPoolExecutor(len(addresses)) as pool:
        views = [view for view in pool.map(ask, addresses) if view is not None]
    answers = [
        (info, view.addresses) for view in views for info in view.partitions if info.partition == partition
    ]
    if not answers:
        return None
    newest = max(info.leader_epoch for info, _ in answers)
    votes: dict[PartitionInfo, int] = {}
    for info, _ in answers:
        if info.leader_epoch == newest:
            votes[info] = votes.get(info, 0) + 1
    winner = max(votes, key=lambda info: votes[info])
    named = (known.get(winner.leader) for info, known in answers if info == winner)
    return winner, next((address for address in named if address is not None), None)
