"""The ``decommission`` fault and its heal ``recommission``: a broker's replicas moved away by
partition reassignment under load, then moved back and their preferred leaders re-elected; and
``elect-preferred``, that election alone.

Kafka decommissions a broker in two steps: its partitions are reassigned away (KIP-455's
AlterPartitionReassignments: add the new replicas, let them catch up into the ISR, switch, remove
the old ones), and only then is the empty broker shut down and unregistered (UnregisterBroker).
The first step is where replication bugs live -- a reassignment that drops a replica before its
successor caught up loses what only the dropped one held -- so that is the fault; the shutdown is
the nemesis' ``kill`` already, and unregistering an empty broker moves no data.  So the broker
stays up: the fault is orthogonal to the crash faults it is composed with.

**decommission** (one node): every partition of the cluster's non-internal topics that has the
node's broker among its replicas gets a new target, sent with a real admin client (kafka-python's
``KafkaAdminClient.alter_partition_reassignments``, which a broker forwards to the controller):
the node's broker is replaced in place by a broker outside the replica set when there is one (the
replica set keeps its size; the newcomer takes the removed broker's position, so it becomes the
preferred leader where that was the node), else it is dropped (a replication factor above one
shrinks by one).  The op completes once the controller accepted every move; the moves themselves
complete in the background, as in Kafka.

**recommission** (heal): every partition this nemesis moved off the node is given its original
replica set back (a running move is replaced, as Kafka's controller does), the heal waits --
bounded by ``settle_timeout`` -- until no reassignment of them is left, then asks for a
preferred-leader election of them (ElectLeaders, PREFERRED): the returning broker, empty, catches
up as a new replica, and becomes leader again only once it is in sync.  A move still running at the
deadline is left to finish; the election then answers PREFERRED_LEADER_NOT_AVAILABLE, which is
not an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, TopicPartition

from testbed.cluster.protocol import Cluster

Key = tuple[str, int]


def moved_away(replicas: Sequence[int], broker: int, brokers: Sequence[int]) -> list[int] | None:
    """The target that moves ``broker`` out of ``replicas``: replaced in place by the first broker
    of ``brokers`` outside the set, else dropped; None when ``broker`` is not a replica or is the
    only one (pure: the plan, unit-tested)."""
    if broker not in replicas:
        return None
    spare = [b for b in brokers if b not in replicas]
    if spare:
        return [spare[0] if r == broker else r for r in replicas]
    if len(replicas) == 1:
        return None
    return [r for r in replicas if r != broker]


def preferred_of(assignments: Mapping[Key, Sequence[int]], broker: int) -> dict[str, list[int]]:
    """The partitions whose preferred replica (the first) is ``broker``, as ``{topic: [index...]}``
    for ElectLeaders (pure: the plan, unit-tested)."""
    partitions: dict[str, list[int]] = {}
    for (topic, index), replicas in sorted(assignments.items()):
        if replicas and replicas[0] == broker:
            partitions.setdefault(topic, []).append(index)
    return partitions


class Membership:
    """Decommission and recommission through ``cluster``'s Kafka bootstrap (see the module
    docstring).  Every admin call is bounded by ``timeout``; the heal's wait by ``settle_timeout``."""

    def __init__(self, cluster: Cluster, timeout: float, settle_timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self.settle_timeout = settle_timeout
        self._original: dict[Key, list[int]] = {}
        self._lock = threading.Lock()

    def _admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(
            bootstrap_servers=self.cluster.bootstrap,
            request_timeout_ms=int(self.timeout * 1000),
            reconnect_backoff_max_ms=500,
        )

    def _broker_id(self, node: str) -> int:
        ids: Mapping[str, int] = self.cluster.node_ids
        if node not in ids:
            raise ValueError(f"{node} is not a broker of this cluster")
        return ids[node]

    def _assignments(self, admin: KafkaAdminClient) -> dict[Key, list[int]]:
        """Every partition of the non-internal topics, by key: its replicas."""
        names = [name for name in admin.list_topics() if not name.startswith("__")]
        found: dict[Key, list[int]] = {}
        for topic in admin.describe_topics(names) if names else []:
            for partition in topic["partitions"]:
                found[(topic["name"], partition["partition_index"])] = list(partition["replica_nodes"])
        return found

    @staticmethod
    def _alter(admin: KafkaAdminClient, moves: Mapping[Key, list[int]]) -> None:
        if not moves:
            return
        answer = admin.alter_partition_reassignments(
            {TopicPartition(*key): list(t) for key, t in moves.items()}
        )
        refused = {f"{tp.topic}-{tp.partition}": error.__name__ for tp, error in answer.items() if error}
        if refused:
            raise RuntimeError(f"reassignments refused: {refused}")

    def decommission(self, node: str) -> dict[str, Any]:
        """Move every replica of ``node``'s broker away; what moved, for the log."""
        broker = self._broker_id(node)
        brokers = sorted(self.cluster.node_ids.values())
        with self._lock:
            admin = self._admin()
            try:
                moves = {}
                for key, replicas in self._assignments(admin).items():
                    target = moved_away(replicas, broker, brokers)
                    if target is not None:
                        moves[key] = target
                        self._original.setdefault(key, replicas)
                self._alter(admin, moves)
            finally:
                admin.close()
        return {f"{t}-{p}": target for (t, p), target in moves.items()}

    def elect_preferred(self, node: str) -> dict[str, list[int]]:
        """Elect ``node``'s broker leader of every partition it is the preferred replica of (the
        controller refuses, per partition and without an error here, one not in the ISR or already
        leading: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE); what was asked, for the log."""
        broker = self._broker_id(node)
        with self._lock:
            admin = self._admin()
            try:
                partitions = preferred_of(self._assignments(admin), broker)
                if partitions:
                    admin.elect_leaders(0, partitions, raise_errors=False)
            finally:
                admin.close()
        return partitions

    def recommission(self, node: str) -> None:
        """Move back every partition moved off ``node``'s broker, wait (bounded) for the moves to
        complete, then elect their preferred leaders."""
        broker = self._broker_id(node)
        with self._lock:
            back = {key: replicas for key, replicas in self._original.items() if broker in replicas}
            if not back:
                return
            admin = self._admin()
            try:
                self._alter(admin, back)
                for key in back:
                    del self._original[key]
                wanted = [TopicPartition(*key) for key in back]
                deadline = time.monotonic() + self.settle_timeout
                while admin.list_partition_reassignments(wanted) and time.monotonic() < deadline:
                    time.sleep(0.1)  # polling a condition, bounded by the deadline
                partitions: dict[str, list[int]] = {}
                for topic, index in back:
                    partitions.setdefault(topic, []).append(index)
                admin.elect_leaders(0, partitions, raise_errors=False)
            finally:
                admin.close()
