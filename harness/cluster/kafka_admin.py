"""What the harness asks the cluster itself, over the real Kafka protocol.

Topic creation and "who leads, who is in sync" use kafka-python's admin client, so
they work the same against the bundled broker and against any Kafka-compatible cluster
(``--bootstrap``).  Each call opens a short-lived client with its own timeout: the
cluster is being crashed and partitioned while we ask, and a stuck client must never
hang the harness.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TypeVar

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
