"""Partition reassignment (KIP-455) and preferred-leader election: the controller's rules for
changing a partition's replica set and moving its leadership on request, kept in one place.

**Reassignment** (AlterPartitionReassignments / ListPartitionReassignments).  A partition with
replicas ``R`` is given a target ``T``.  As in Kafka's controller
(``PartitionReassignmentReplicas``), the replica set becomes ``T`` followed by the members of
``R`` not in ``T``; ``adding_replicas`` is ``T - R`` and ``removing_replicas`` is ``R - T``.
The brokers learn it from the next metadata version: the adding ones create the replica and
fetch from the leader, which adds them to the ISR by the ordinary AlterPartition once they
caught up.  The reassignment **completes only when every replica of ``T`` is in the ISR**
(Kafka: ``maybeCompleteReassignment``): then replicas := ``T``, ISR := ISR ∩ ``T`` (and the
ELR loses the removed replicas), adding and removing are emptied, and, if the leader is being
removed, a new leader is elected from ``T`` by the controller's usual rule order.  The brokers
that are no longer replicas stop and delete theirs (:mod:`broker_impl.replica_dirs`).  So the
new replicas hold everything committed before an old one leaves: a removed replica can never
take committed records with it.  A target that only reorders ``R`` takes effect at once.

A new target for a partition already being reassigned first reverts the running one, as Kafka's
KRaft controller does.  A cancel (``replicas`` null) reverts: replicas := replicas minus the
adding ones, ISR := ISR minus the adding ones, and a new leader is elected if the leader was one
of them.  Errors are Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (an
empty target, a duplicate, a broker that never registered), NO_REASSIGNMENT_IN_PROGRESS (a
cancel of nothing).

**Leader epoch.**  Every change of the replica set also bumps the leader epoch (the leader stays
the same unless it is removed), as the ZooKeeper-era controller did at each reassignment step: the
brokers take a new replica set on a new leader epoch, so the leader starts tracking the adding
replicas and the followers restart their fetchers with the new set.

**Preferred-leader election** (ElectLeaders, type PREFERRED): the first replica of the
assignment becomes leader if it is alive and in the ISR (new leader epoch); ELECTION_NOT_NEEDED
if it leads already, PREFERRED_LEADER_NOT_AVAILABLE otherwise.  Unclean elections on request are
not offered (INVALID_REQUEST): ``unclean.leader.election.enable`` is the only way to them here.

Everything is persisted with the controller's commit (fsync of ``metadata.json``) before it is
announced, ``adding_replicas`` and ``removing_replicas`` in the partition's state, so a controller
restarted mid-reassignment resumes it (:meth:`Reassignments.complete_ready` runs at start-up).
The events (``reassignment-started``, ``-completed``, ``-cancelled``, ``preferred-election``)
are queued here and written with the commit (``docs/events.md`` section 4).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from . import wire
from .controller_events import ControllerEvents

ADDING = "adding_replicas"
REMOVING = "removing_replicas"
PREFERRED = 0
"""ElectLeaders' election type for a preferred-leader election (1 is unclean)."""


class ControllerCore(Protocol):
    """What these rules use of :class:`broker_impl.controller.Controller`."""

    metadata: dict[str, Any]
    events: ControllerEvents

    def _alive(self, node: int) -> bool: ...

    def _elect(self, state: dict[str, Any], excluded: int | None = None) -> bool: ...

    def _elr_after(
        self, state: dict[str, Any], new_isr: list[int], unclean: int | None = None
    ) -> list[int]: ...

    def _commit(self, reason: str, cause: str, broker: int | None = None) -> None: ...


def normalise(state: dict[str, Any]) -> None:
    """Give a partition state loaded from an older ``metadata.json`` empty adding/removing sets."""
    state.setdefault(ADDING, [])
    state.setdefault(REMOVING, [])


def in_progress(state: dict[str, Any]) -> bool:
    return bool(state.get(ADDING) or state.get(REMOVING))


def target_of(state: dict[str, Any]) -> list[int]:
    """The replica set ``state`` is heading for: its replicas minus those being removed."""
    return [r for r in state["replicas"] if r not in state.get(REMOVING, [])]


def check_target(target: list[int], registered: set[int]) -> str | None:
    """Why ``target`` is not a valid replica set (None when it is)."""
    if not target:
        return "empty replica set"
    if len(set(target)) != len(target):
        return f"duplicate replica in {target}"
    unknown = sorted(set(target) - registered)
    if unknown:
        return f"brokers {unknown} are not registered"
    return None


class Reassignments:
    """The rules of the module docstring, applied to a controller's metadata."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        for _key, state in self._states():
            normalise(state)

    def _states(self) -> Iterator[tuple[tuple[str, int], dict[str, Any]]]:
        for name, topic in sorted(self.core.metadata["topics"].items()):
            for index, state in enumerate(topic["partitions"]):
                yield (name, index), state

    def _state(self, topic: str, index: int) -> dict[str, Any] | None:
        known = self.core.metadata["topics"].get(topic)
        if known is None or not 0 <= index < len(known["partitions"]):
            return None
        state: dict[str, Any] = known["partitions"][index]
        return state

    def _event(self, kind: str, key: tuple[str, int], **fields: Any) -> None:
        """Queue ``kind`` for ``key`` (topic, partition) to be written with the next commit."""
        self.core.events.queue(kind, topic=key[0], partition=key[1], **fields)

    # ---- changes of one partition ------------------------------------------------------------

    def _new_replica_set(self, state: dict[str, Any], replicas: list[int], isr: list[int]) -> None:
        """Publish ``replicas`` and ``isr``: the leader keeps leading in a new epoch if it is still
        a replica and in the ISR, else a leader is elected by the controller's rule order."""
        leader = int(state["leader"])
        state["replicas"] = list(replicas)
        # From the old ISR and ELR, in the new assignment: a removed replica leaves the ELR too.
        state["elr"] = self.core._elr_after(state, list(isr))
        state["isr"] = list(isr)
        if (leader in replicas and leader in isr) or not self.core._elect(state, excluded=leader):
            state["leader_epoch"] += 1
            state["partition_epoch"] += 1

    def _revert(self, key: tuple[str, int], state: dict[str, Any]) -> None:
        adding = list(state[ADDING])
        replicas = [r for r in state["replicas"] if r not in adding]
        isr = [r for r in state["isr"] if r not in adding]
        state[ADDING], state[REMOVING] = [], []
        self._new_replica_set(state, replicas, isr)
        self._event(
            "reassignment-cancelled",
            key,
            replicas=replicas,
            removed=adding,
            isr=state["isr"],
            leader=state["leader"],
            epoch=state["leader_epoch"],
        )

    def start(self, key: tuple[str, int], state: dict[str, Any], target: list[int]) -> None:
        """Begin moving ``state`` to ``target`` (validated by the caller); complete it at once if
        every target replica is in the ISR already."""
        if in_progress(state):
            self._revert(key, state)
        current = list(state["replicas"])
        adding = [r for r in target if r not in current]
        removing = [r for r in current if r not in target]
        self._event(
            "reassignment-started",
            key,
            replicas=current,
            target=list(target),
            adding=adding,
            removing=removing,
        )
        if not adding and not removing:
            if target != current:  # a reordering: the preferred leader changes, nothing moves
                self._new_replica_set(state, target, list(state["isr"]))
            return
        state[ADDING], state[REMOVING] = adding, removing
        self._new_replica_set(state, list(target) + removing, list(state["isr"]))
        self.complete_if_ready(key, state)

    def complete_if_ready(self, key: tuple[str, int], state: dict[str, Any]) -> bool:
        """Complete ``state``'s reassignment if every target replica is in the ISR (Kafka's
        rule: the new replicas caught up before the old ones leave); return whether it did."""
        if not in_progress(state):
            return False
        target = target_of(state)
        if not all(r in state["isr"] for r in target):
            return False
        removed = list(state[REMOVING])
        old_leader = int(state["leader"])
        state[ADDING], state[REMOVING] = [], []
        self._new_replica_set(state, target, [r for r in state["isr"] if r in target])
        self._event(
            "reassignment-completed",
            key,
            replicas=target,
            removed=removed,
            isr=state["isr"],
            old_leader=old_leader,
            leader=state["leader"],
            epoch=state["leader_epoch"],
        )
        return True

    def complete_ready(self) -> None:
        """Complete every reassignment whose target is in the ISR and commit if one was (at
        controller start-up: a reassignment the previous process left running resumes)."""
        completed = [key for key, state in self._states() if self.complete_if_ready(key, state)]
        if completed:
            self.core._commit(f"reassignments completed: {completed}", "reassignment")

    # ---- RPC handlers --------------------------------------------------------------------------

    async def alter(self, params: dict[str, Any]) -> dict[str, Any]:
        """AlterPartitionReassignments: ``{"topics": [{"name", "partitions": [{"partition",
        "replicas": [..] or None}]}]}`` -> the same shape with ``error`` (a Kafka error code) and
        ``message`` per partition, and the metadata ``version`` that carries the changes."""
        registered = {int(node) for node in self.core.metadata["brokers"]}
        results = []
        changed = False
        for topic in params["topics"]:
            partitions = []
            for entry in topic["partitions"]:
                index = int(entry["partition"])
                error, message = self._alter_one(str(topic["name"]), index, entry.get("replicas"), registered)
                changed |= error == wire.NONE
                partitions.append({"partition": index, "error": error, "message": message})
            results.append({"name": topic["name"], "partitions": partitions})
        if changed:
            self.core._commit("partition reassignments changed", "reassignment")
        return {"topics": results, "version": self.core.metadata["version"]}

    def _alter_one(
        self, topic: str, index: int, replicas: list[int] | None, registered: set[int]
    ) -> tuple[int, str | None]:
        state = self._state(topic, index)
        if state is None:
            return wire.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{index}"
        if replicas is None:
            if not in_progress(state):
                return wire.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {topic}-{index} to cancel"
            self._revert((topic, index), state)
            return wire.NONE, None
        target = [int(r) for r in replicas]
        problem = check_target(target, registered)
        if problem is not None:
            return wire.INVALID_REPLICA_ASSIGNMENT, problem
        self.start((topic, index), state, target)
        return wire.NONE, None

    async def list_ongoing(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListPartitionReassignments: the partitions being reassigned (of ``params["topics"]``,
        ``[{"name", "partitions": [..]}]``, or of every topic when it is None), with their
        replicas, adding and removing replicas."""
        wanted: set[tuple[str, int]] | None = None
        if params.get("topics") is not None:
            wanted = {(t["name"], int(p)) for t in params["topics"] for p in t["partitions"]}
        ongoing = [
            {
                "topic": key[0],
                "partition": key[1],
                "replicas": s["replicas"],
                ADDING: s[ADDING],
                REMOVING: s[REMOVING],
            }
            for key, s in self._states()
            if in_progress(s) and (wanted is None or key in wanted)
        ]
        return {"reassignments": ongoing}

    async def elect_leaders(self, params: dict[str, Any]) -> dict[str, Any]:
        """ElectLeaders: ``{"type": 0, "partitions": [[topic, index], ..] or None}`` -> per
        partition ``[topic, index, error, message]`` (see the module docstring)."""
        if int(params["type"]) != PREFERRED:
            return {"error": "only preferred-leader elections are offered"}
        keys = (
            [key for key, _state in self._states()]
            if params.get("partitions") is None
            else [(str(t), int(i)) for t, i in params["partitions"]]
        )
        results = []
        changed = False
        for topic, index in keys:
            error, message = self._elect_preferred(topic, index)
            changed |= error == wire.NONE
            results.append([topic, index, error, message])
        if changed:
            self.core._commit("preferred leaders elected", "preferred-election")
        return {"results": results, "version": self.core.metadata["version"]}

    def _elect_preferred(self, topic: str, index: int) -> tuple[int, str | None]:
        state = self._state(topic, index)
        if state is None:
            return wire.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{index}"
        preferred = int(state["replicas"][0])
        if state["leader"] == preferred:
            return wire.ELECTION_NOT_NEEDED, None
        if preferred not in state["isr"] or not self.core._alive(preferred):
            return (
                wire.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred leader {preferred} is not alive and in sync",
            )
        self._event(
            "preferred-election",
            (topic, index),
            old_leader=state["leader"],
            new_leader=preferred,
        )
        state["leader"] = state["last_known_leader"] = preferred
        state["leader_epoch"] += 1
        state["partition_epoch"] += 1
        return wire.NONE, None
