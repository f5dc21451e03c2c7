"""What the controller records in its event log: every change each metadata commit publishes.

The controller decides in many places (fencing, registration, elections by the rule order of
:mod:`broker_impl.controller`, AlterPartition); rather than instrument every branch, the
partition events are derived at the one place every decision passes before anyone hears of it:
the commit.  :class:`ControllerEvents` keeps a snapshot of every partition as last published and,
at each commit, compares it with what is being committed:

* leader or leader epoch changed -> ``election`` (old and new leader, epoch, ISR and ELR, the
  alive replicas, and ``how`` the new leader relates to the *published* state before it);
* else ISR or ELR changed -> ``isr-change``.

So the events describe published states only: an intermediate state inside one commit (a
deposed leader re-elected in the same handler) is never seen by a broker and is not recorded,
and ``how`` is judged from what was published, the view a checker can verify from the previous
events.  Broker lifecycle events (``broker-registered``, ``broker-fenced``, ``broker-unfenced``),
``topic-created`` and ``producer-ids-allocated`` are queued where they happen and written with the
same commit -- so that every version carries an event, and a restart that lost one shows.  Every
event is written *after* the commit's fsync and carries its ``metadata_version``: an event names
a decision that is durable and about to be published (a crash between the two loses the event,
never the reverse).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from .events import EventLog

PartitionKey = tuple[str, int]
NO_LEADER = -1


@dataclasses.dataclass(frozen=True)
class PublishedPartition:
    """The part of a partition's controller state that the events compare."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_leader: int

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> PublishedPartition:
        return cls(
            leader=int(state["leader"]),
            leader_epoch=int(state["leader_epoch"]),
            partition_epoch=int(state["partition_epoch"]),
            replicas=tuple(state["replicas"]),
            isr=tuple(state["isr"]),
            elr=tuple(state.get("elr", ())),
            last_known_leader=int(state.get("last_known_leader", state["leader"])),
        )


def snapshot(metadata: Mapping[str, Any]) -> dict[PartitionKey, PublishedPartition]:
    """Every partition of ``metadata`` (the controller's document), by (topic, partition)."""
    return {
        (name, index): PublishedPartition.of(state)
        for name, topic in metadata["topics"].items()
        for index, state in enumerate(topic["partitions"])
    }


def election_how(before: PublishedPartition, new_leader: int) -> str:
    """How ``new_leader`` relates to the published state ``before`` its election:

    ``none`` (no leader: offline), ``isr`` (it was in the ISR -- also the same leader again in a
    new epoch, after a restart), ``elr`` (in the ELR), ``last-known-leader`` (neither, but it was
    the last known leader), ``unclean`` (none of these: an out-of-sync replica).
    """
    if new_leader == NO_LEADER:
        return "none"
    if new_leader in before.isr:
        return "isr"
    if new_leader in before.elr:
        return "elr"
    if new_leader == before.last_known_leader:
        return "last-known-leader"
    return "unclean"


def partition_changes(
    before: Mapping[PartitionKey, PublishedPartition],
    after: Mapping[PartitionKey, PublishedPartition],
    alive: set[int],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(kind, fields)`` of each partition whose leadership, ISR or ELR differs (pure).
    Partitions new in ``after`` are skipped: ``topic-created`` records them."""
    for key in sorted(after):
        old, new = before.get(key), after[key]
        if old is None:
            continue
        common = {"topic": key[0], "partition": key[1]}
        if (new.leader, new.leader_epoch) != (old.leader, old.leader_epoch):
            yield (
                "election",
                {
                    **common,
                    "old_leader": old.leader,
                    "new_leader": new.leader,
                    "old_epoch": old.leader_epoch,
                    "new_epoch": new.leader_epoch,
                    "partition_epoch": new.partition_epoch,
                    "replicas": list(new.replicas),
                    "old_isr": list(old.isr),
                    "new_isr": list(new.isr),
                    "old_elr": list(old.elr),
                    "new_elr": list(new.elr),
                    "alive": [replica for replica in new.replicas if replica in alive],
                    "how": election_how(old, new.leader),
                },
            )
        elif (new.isr, new.elr) != (old.isr, old.elr):
            yield (
                "isr-change",
                {
                    **common,
                    "leader": new.leader,
                    "epoch": new.leader_epoch,
                    "partition_epoch": new.partition_epoch,
                    "old_isr": list(old.isr),
                    "new_isr": list(new.isr),
                    "old_elr": list(old.elr),
                    "new_elr": list(new.elr),
                },
            )


class ControllerEvents:
    """The controller's event log: queued lifecycle events plus the partition changes, written
    at each commit (see the module docstring)."""

    def __init__(self, log: EventLog, metadata: Mapping[str, Any]) -> None:
        self.log = log
        self._published = snapshot(metadata)
        self._queued: list[tuple[str, dict[str, Any]]] = []

    def queue(self, kind: str, **fields: Any) -> None:
        """An event to write with the next commit."""
        if self.log.enabled:
            self._queued.append((kind, fields))

    def committed(self, metadata: Mapping[str, Any], cause: str, broker: int | None) -> None:
        """``metadata`` was just made durable: write the queued events, then one event per
        partition change since the last commit, each with ``metadata_version``, and ``cause``
        (what kind of request or timer made the change) and ``broker`` (whose) for the latter."""
        if not self.log.enabled:
            return
        current = snapshot(metadata)
        version = int(metadata["version"])
        for kind, fields in self._queued:
            self.log.emit(kind, metadata_version=version, **fields)
        alive = {int(node) for node, state in metadata["brokers"].items() if not state["fenced"]}
        for kind, fields in partition_changes(self._published, current, alive):
            self.log.emit(kind, metadata_version=version, cause=cause, broker=broker, **fields)
        self._queued.clear()
        self._published = current
