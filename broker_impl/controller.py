"""The controller: cluster metadata, broker liveness, leader election, leader epochs.

``python -m broker_impl.controller --config FILE``

What it owns (as Kafka's controller does): the broker registry with heartbeats and a
session timeout (``broker.session.timeout.ms``); topics, replica assignments, and for
every partition its leader, **leader epoch** (bumped on every leadership change), ISR,
ELR (Eligible Leader Replicas), last known leader and partition epoch (bumped on every
change).  Every change is persisted to ``metadata.json`` with fsync before it is
announced, so a controller restart never hands out an epoch twice.  A metadata file
written before the ELR existed loads with ``elr`` empty and the current leader as the
last known leader.

Elections (KIP-966, ``eligible.leader.replicas.enable=true``, the default).  The leader
is, in this order:

1. the first replica, in assignment order, that is in the ISR and alive (unfenced);
2. else the first alive ELR member -- the ISR becomes just that leader, and it leaves
   the ELR;
3. else, if the ISR and the ELR are both empty, the last known leader if it is alive
   (Kafka's ``canElectLastKnownLeader``) -- so that a partition whose every replica
   restarted after an unclean shutdown (all lost power) comes back, each restart having
   taken its replica out of ISR and ELR; while a (fenced) ELR member remains, it is
   waited for, since it holds every committed record and the last leader may not;
4. else, with ``unclean.leader.election.enable``, any alive replica (the ISR becomes just
   the new leader and the ELR is cleared -- the documented data loss);
5. else none: the partition is offline (leader -1).

The ELR holds replicas that left the ISR while it was below ``min.insync.replicas``:
whenever an ISR change (a leader's AlterPartition, a fencing, an election) leaves fewer
than min ISR members, ELR := (old ELR + old ISR) - new ISR - a replica restarted
uncleanly, in assignment order; once the ISR has min ISR members again the ELR is empty.
Because the brokers' high watermark does not advance while ISR < min ISR (strict min
ISR, KAFKA-15583), such a replica holds everything committed and is safe to elect.

Brokers that stop heartbeating for the session timeout are *fenced*: they lose
leadership and leave every ISR -- into the ELR when that leaves the ISR below min ISR --
except that the last ISR member stays in the ISR, so that it can be re-elected cleanly
when it returns.  A broker that re-registers with a new incarnation (it restarted) loses
the leaderships it held.  What else happens depends on how it went down, which the
broker reports at registration (``clean_shutdown``, from its clean-shutdown marker):

* clean shutdown: it keeps its ISR memberships -- it lost nothing, and ISR membership is
  the leader's call, made from replication lag;
* unclean shutdown (SIGKILL, power loss; KAFKA-15586): it leaves every ISR -- even as the
  last member, the ISR may become empty -- and every ELR, because it may have lost
  records the others no longer hold.  Its leaders add it back through the normal ISR
  expansion once it has caught up.  This is what closes KIP-966's "last replica
  standing" loss: a lossy last ISR member is no longer re-elected ahead of an ELR member
  that holds every committed record.

With ``eligible.leader.replicas.enable=false`` the historical rules apply: election from
the ISR only (then unclean, then offline), no ELR (the key stays, always empty, so
describe output is uniform), and a restarted broker keeps its ISR memberships whatever
its shutdown -- as a fast bounce inside the ZooKeeper session did not reach the pre-KRaft
controller.  That is the window the KIP-101 scenarios and the "last replica standing"
loss need, and it existed in real clusters.

Replica-set changes on request -- partition reassignment (KIP-455) and preferred-leader
election -- follow Kafka's rules, kept in :mod:`broker_impl.reassignment`: the new replicas
join the ISR before the old ones leave.

Every commit is also recorded in the controller's event log (``event.log.enable``; the
events and how they are derived: :mod:`broker_impl.controller_events`, ``docs/events.md``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from . import config as configuration
from .checkpoints import write_atomically
from .controller_events import ControllerEvents
from .controller_metadata import load_metadata
from .events import CONTROLLER_EVENTS_FILE, FORMAT, SCHEMA_VERSION, START, open_event_log
from .owner_watch import watch_owner
from .reassignment import ADDING, REMOVING, Reassignments
from .rpc import RpcError, serve
from .stall import StallWatch

logger = logging.getLogger("broker_impl.controller")

TICK_SECONDS = 0.05
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
PRODUCER_ID_BLOCK = 1000


NO_LEADER = -1
RECORDED_SETTINGS = (
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "eligible.leader.replicas.enable",
    "broker.session.timeout.ms",
)
"""The settings the ``start`` event records: those that decide elections and the ISR."""


class Controller:
    """The cluster's metadata and the rules that change it (see the module docstring).

    ``settings`` is a parsed controller configuration (:data:`config.CONTROLLER_KEYS`).
    The RPC handlers are coroutines for the RPC server, but none of them awaits: each
    change is applied and committed atomically with respect to the others.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.directory = Path(settings["metadata.log.dir"])
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metadata.json"
        self.session_timeout = settings["broker.session.timeout.ms"] / 1000
        self.unclean = bool(settings["unclean.leader.election.enable"])
        self.min_isr = int(settings["min.insync.replicas"])
        self.elr_enabled = bool(settings["eligible.leader.replicas.enable"])
        self.metadata: dict[str, Any] = load_metadata(self.path, settings, self.elr_enabled)
        started = time.monotonic()
        # Liveness is not persisted: after a controller restart every known broker gets
        # one session timeout of grace to heartbeat again.
        self.last_heartbeat: dict[int, float] = {int(node): started for node in self.metadata["brokers"]}
        log = open_event_log(settings, str(self.directory), CONTROLLER_EVENTS_FILE, int(settings["node.id"]))
        log.emit(
            START,
            format=FORMAT,
            schema_version=SCHEMA_VERSION,
            role="controller",
            pid=os.getpid(),
            metadata_version=self.metadata["version"],
            settings={name: settings[name] for name in RECORDED_SETTINGS},
        )
        self.events = ControllerEvents(log, self.metadata)
        self.reassignments = Reassignments(self)
        self.reassignments.complete_ready()  # one left running by the previous process resumes

    def _commit(self, reason: str, cause: str, broker: int | None = None) -> None:
        """Persist (fsync) and publish a new metadata version; then record it in the event
        log, its partition changes attributed to ``cause`` and ``broker``."""
        self.metadata["version"] += 1
        write_atomically(self.path, json.dumps(self.metadata, indent=1, sort_keys=True))
        logger.info("metadata v%d: %s", self.metadata["version"], reason)
        self.events.committed(self.metadata, cause, broker)

    # ---- liveness -----------------------------------------------------------------------

    def _alive(self, node: int) -> bool:
        broker = self.metadata["brokers"].get(str(node))
        return broker is not None and not broker["fenced"]

    def _partitions(self) -> list[tuple[str, int, dict[str, Any]]]:
        return [
            (name, index, state)
            for name, topic in sorted(self.metadata["topics"].items())
            for index, state in enumerate(topic["partitions"])
        ]

    # ---- ISR, ELR and elections ----------------------------------------------------------

    def _elr_after(self, state: dict[str, Any], new_isr: list[int], unclean: int | None = None) -> list[int]:
        """The ELR once ``state``'s ISR becomes ``new_isr``: empty with ELR disabled or
        while ``new_isr`` has at least min ISR members; else the old ELR plus the replicas
        leaving the ISR, minus ``new_isr`` and minus ``unclean`` (a replica back from an
        unclean shutdown), in assignment order."""
        if not self.elr_enabled or len(new_isr) >= self.min_isr:
            return []
        return [
            r
            for r in state["replicas"]
            if (r in state["elr"] or r in state["isr"]) and r not in new_isr and r != unclean
        ]

    def _set_isr(self, state: dict[str, Any], new_isr: list[int], unclean: int | None = None) -> bool:
        """Change ``state``'s ISR (and with it the ELR); bump the partition epoch if
        anything changed and return whether it did.  The leader is not touched."""
        new_elr = self._elr_after(state, new_isr, unclean)
        if new_isr == state["isr"] and new_elr == state["elr"]:
            return False
        state["isr"] = list(new_isr)
        state["elr"] = new_elr
        state["partition_epoch"] += 1
        return True

    def _elect(self, state: dict[str, Any], excluded: int | None = None) -> bool:
        """Choose a leader for ``state`` by the order of the module docstring (``excluded``
        is never chosen); return whether leader, ISR or ELR changed.  A leadership change
        bumps the leader epoch; any change bumps the partition epoch."""

        def eligible(replica: int) -> bool:
            return replica != excluded and self._alive(replica)

        in_isr = [r for r in state["replicas"] if r in state["isr"] and eligible(r)]
        in_elr = [r for r in state["replicas"] if r in state["elr"] and eligible(r)]
        anyone = [r for r in state["replicas"] if eligible(r)]
        last_known = int(state["last_known_leader"])
        new_isr, new_elr = state["isr"], state["elr"]
        if in_isr:
            new_leader = in_isr[0]
        elif self.elr_enabled and in_elr:
            new_leader, new_isr = in_elr[0], [in_elr[0]]
            new_elr = self._elr_after(state, new_isr)
            logger.info("electing %d from the ELR %s (ISR was %s)", new_leader, state["elr"], state["isr"])
        elif self.elr_enabled and not state["isr"] and not state["elr"] and eligible(last_known):
            new_leader, new_isr = last_known, [last_known]
            logger.warning("ISR and ELR empty: electing the last known leader %d", new_leader)
        elif self.unclean and anyone:
            new_leader, new_isr, new_elr = anyone[0], [anyone[0]], []
            logger.warning("unclean election of %d (ISR was %s)", new_leader, state["isr"])
        else:
            new_leader = NO_LEADER
        if new_leader == state["leader"] and new_isr == state["isr"] and new_elr == state["elr"]:
            return False
        if new_leader != state["leader"]:
            state["leader_epoch"] += 1
        if new_leader != NO_LEADER:
            state["last_known_leader"] = new_leader
        state["leader"] = new_leader
        state["isr"] = list(new_isr)
        state["elr"] = list(new_elr)
        state["partition_epoch"] += 1
        return True

    def _depose(self, state: dict[str, Any]) -> None:
        """Take leadership away (leader -1, a new leader epoch); the caller elects next."""
        state["leader"] = NO_LEADER
        state["leader_epoch"] += 1
        state["partition_epoch"] += 1

    def _fence(self, node: int, reason: str) -> None:
        """Session expired: ``node`` leaves every ISR (into the ELR if that leaves the ISR
        below min ISR) unless it is the ISR's last member, and loses its leaderships."""
        self.metadata["brokers"][str(node)]["fenced"] = True
        self.events.queue("broker-fenced", broker=node, reason=reason)
        for _name, _index, state in self._partitions():
            if node in state["isr"] and len(state["isr"]) > 1:
                self._set_isr(state, [r for r in state["isr"] if r != node])
            if state["leader"] == node:
                self._elect(state, excluded=node)
        self._elect_offline()
        self._commit(f"broker {node} fenced: {reason}", "broker-fenced", node)

    def _forget_unclean_replica(self, node: int) -> None:
        """``node`` restarted after an unclean shutdown (ELR enabled): it leaves every ISR
        -- the ISR may become empty -- and every ELR, and loses its leaderships.  The
        caller registers it and then elects the leaderless partitions."""
        for name, index, state in self._partitions():
            if node in state["isr"] or node in state["elr"]:
                self._set_isr(state, [r for r in state["isr"] if r != node], unclean=node)
                logger.info("%s-%d: unclean restart of %d, ISR -> %s", name, index, node, state["isr"])
            if state["leader"] == node:
                self._depose(state)

    def _elect_offline(self) -> bool:
        changed = False
        for _name, _index, state in self._partitions():
            if state["leader"] == -1:
                changed |= self._elect(state)
        return changed

    def expire_sessions(self, now: float) -> None:
        """Fence every unfenced broker whose last heartbeat is older than the session
        timeout at ``now`` (a ``time.monotonic()`` reading)."""
        for node_text, broker in list(self.metadata["brokers"].items()):
            node = int(node_text)
            if not broker["fenced"] and now - self.last_heartbeat.get(node, 0) > self.session_timeout:
                self._fence(node, "session timed out")

    async def tick_forever(self) -> None:
        # A stall of this process is not held against the brokers (CI, 2026-12-02: all fenced at
        # once after a 3.9 s stall of the machine): see broker_impl.stall.
        watch = StallWatch(TICK_SECONDS, time.monotonic())
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now = time.monotonic()
            if stalled := watch.stalled(now):
                self.last_heartbeat = {node: seen + stalled for node, seen in self.last_heartbeat.items()}
            self.expire_sessions(now)

    # ---- RPC handlers -------------------------------------------------------------------

    async def register(self, params: dict[str, Any]) -> dict[str, Any]:
        """BrokerRegistration: ``node_id``, ``incarnation`` (new at every process start),
        ``host``, ``port`` and ``clean_shutdown`` (whether the previous process shut down
        cleanly; a broker that does not send it is taken as clean, the historical
        behaviour).  A new incarnation is a restart, handled as the module docstring
        says; the same incarnation again (the broker lost its session) changes nothing
        but liveness."""
        node = int(params["node_id"])
        incarnation = str(params["incarnation"])
        clean_shutdown = bool(params.get("clean_shutdown", True))
        known = self.metadata["brokers"].get(str(node))
        self.last_heartbeat[node] = time.monotonic()
        if known is not None and known["incarnation"] != incarnation:
            if self.elr_enabled and not clean_shutdown:
                logger.warning("broker %d restarted after an unclean shutdown", node)
                self._forget_unclean_replica(node)
            else:
                # A restart: the new process knows nothing of its old leaderships.
                for _name, _index, state in self._partitions():
                    if state["leader"] == node and not self._elect(state, excluded=node):
                        state["leader_epoch"] += 1  # it stays leader, in a new epoch
                        state["partition_epoch"] += 1
        self.metadata["brokers"][str(node)] = {
            "host": params["host"],
            "port": int(params["port"]),
            "incarnation": incarnation,
            "fenced": False,
        }
        self.events.queue(
            "broker-registered",
            broker=node,
            incarnation=incarnation,
            previous_incarnation=None if known is None else known["incarnation"],
            clean_shutdown=clean_shutdown,
            host=params["host"],
            port=int(params["port"]),
        )
        self._elect_offline()
        shutdown = "clean" if clean_shutdown else "unclean"
        self._commit(
            f"broker {node} registered ({incarnation}, after a {shutdown} shutdown)",
            "broker-registered",
            node,
        )
        return {"version": self.metadata["version"], "metadata": self.metadata}

    async def heartbeat(self, params: dict[str, Any]) -> dict[str, Any]:
        node = int(params["node_id"])
        broker = self.metadata["brokers"].get(str(node))
        if broker is None or broker["incarnation"] != str(params["incarnation"]):
            raise RpcError("not registered")
        self.last_heartbeat[node] = time.monotonic()
        if broker["fenced"]:
            broker["fenced"] = False
            self.events.queue("broker-unfenced", broker=node)
            self._elect_offline()
            self._commit(f"broker {node} unfenced", "broker-unfenced", node)
        reply: dict[str, Any] = {"version": self.metadata["version"]}
        if int(params.get("version", -1)) < self.metadata["version"]:
            reply["metadata"] = self.metadata
        return reply

    async def controlled_shutdown(self, params: dict[str, Any]) -> dict[str, Any]:
        """A broker about to stop cleanly (Kafka's controlled shutdown) is fenced now: its
        leaderships move to other ISR members and it leaves every ISR it is not the last member
        of while it still runs, instead of a session timeout after it has gone -- its clients
        and followers lose no session's worth of time.  It has stopped heartbeating (a heartbeat
        unfences).  Answers the new metadata, which it applies before it stops serving."""
        node = int(params["node_id"])
        broker = self.metadata["brokers"].get(str(node))
        if broker is None or broker["incarnation"] != str(params["incarnation"]):
            raise RpcError("not registered")
        if not broker["fenced"]:
            self._fence(node, "controlled shutdown")
        return {"version": self.metadata["version"], "metadata": self.metadata}

    async def alter_partition(self, params: dict[str, Any]) -> dict[str, Any]:
        topic = self.metadata["topics"].get(params["topic"])
        if topic is None or not 0 <= int(params["partition"]) < len(topic["partitions"]):
            raise RpcError("unknown topic or partition")
        state = topic["partitions"][int(params["partition"])]
        new_isr = [int(r) for r in params["isr"]]
        if (
            state["leader"] != int(params["leader"])
            or state["leader_epoch"] != int(params["leader_epoch"])
            or state["partition_epoch"] != int(params["partition_epoch"])
        ):
            return {"error": "stale", "state": state, "version": self.metadata["version"]}
        if state["leader"] not in new_isr or any(r not in state["replicas"] for r in new_isr):
            raise RpcError(f"invalid ISR {new_isr} for replicas {state['replicas']}")
        added = [r for r in new_isr if r not in state["isr"]]
        if any(not self._alive(r) for r in added):
            return {"error": "ineligible replica", "state": state, "version": self.metadata["version"]}
        if not self._set_isr(state, new_isr):
            state["partition_epoch"] += 1  # every accepted AlterPartition is a new partition epoch
        self.reassignments.complete_if_ready((params["topic"], int(params["partition"])), state)
        self._commit(
            f"{params['topic']}-{params['partition']} ISR -> {new_isr}, ELR {state['elr']}",
            "alter-partition",
            int(params["leader"]),
        )
        return {"state": state, "version": self.metadata["version"]}

    async def create_topic(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params["name"])
        partitions = int(params["partitions"])
        replication_factor = int(params["replication_factor"])
        if not LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
            return {"error": f"invalid topic name {name!r}"}
        if name in self.metadata["topics"]:
            return {"error": "exists"}
        live = sorted(int(node) for node, broker in self.metadata["brokers"].items() if not broker["fenced"])
        if partitions <= 0:
            return {"error": "invalid partitions"}
        if replication_factor <= 0 or replication_factor > len(live):
            return {"error": f"replication factor {replication_factor} > {len(live)} live brokers"}
        assignment = [
            [live[(index + i) % len(live)] for i in range(replication_factor)] for index in range(partitions)
        ]
        self.metadata["topics"][name] = {
            "id": str(uuid.uuid4()),
            "partitions": [
                {
                    "replicas": replicas,
                    "leader": replicas[0],
                    "leader_epoch": 0,
                    "isr": list(replicas),
                    "elr": [],
                    "last_known_leader": replicas[0],
                    "partition_epoch": 0,
                    ADDING: [],
                    REMOVING: [],
                }
                for replicas in assignment
            ],
        }
        self.events.queue(
            "topic-created",
            topic=name,
            topic_id=self.metadata["topics"][name]["id"],
            partitions=[
                {
                    "partition": index,
                    "replicas": state["replicas"],
                    "leader": state["leader"],
                    "epoch": state["leader_epoch"],
                    "isr": state["isr"],
                }
                for index, state in enumerate(self.metadata["topics"][name]["partitions"])
            ],
        )
        self._commit(f"topic {name} created: {assignment}", "topic-created")
        return {"id": self.metadata["topics"][name]["id"], "version": self.metadata["version"]}

    async def allocate_producer_ids(self, params: dict[str, Any]) -> dict[str, Any]:
        first = int(self.metadata["next_producer_id"])
        self.metadata["next_producer_id"] = first + PRODUCER_ID_BLOCK
        # Recorded so that a restart that lost this version shows (metadata-rollback): its block
        # would be handed out again, two producers sharing an id and their sequence numbers.
        self.events.queue(
            "producer-ids-allocated", broker=params.get("node_id"), first=first, count=PRODUCER_ID_BLOCK
        )
        self._commit(
            f"producer ids {first}..{first + PRODUCER_ID_BLOCK - 1} to broker {params.get('node_id')}",
            "producer-ids",
        )
        return {"first": first, "count": PRODUCER_ID_BLOCK}

    async def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.metadata


async def run(settings: dict[str, Any]) -> None:
    controller = Controller(settings)
    host, port = settings["listeners"]
    server = await serve(
        host,
        port,
        {
            "register": controller.register,
            "heartbeat": controller.heartbeat,
            "controlled_shutdown": controller.controlled_shutdown,
            "alter_partition": controller.alter_partition,
            "create_topic": controller.create_topic,
            "allocate_producer_ids": controller.allocate_producer_ids,
            "describe": controller.describe,
            "alter_reassignments": controller.reassignments.alter,
            "list_reassignments": controller.reassignments.list_ongoing,
            "elect_leaders": controller.reassignments.elect_leaders,
        },
    )
    logger.info("controller listening on %s:%d", host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    _owner_watch = watch_owner()  # kept referenced: it ends this process with its starter
    ticker = asyncio.create_task(controller.tick_forever())
    await stop.wait()
    ticker.cancel()
    server.close()
    controller.events.log.emit("shutdown", metadata_version=controller.metadata["version"])
    controller.events.log.close()


def main(argv: list[str] | None = None) -> int:
    return configuration.process_main("controller", configuration.CONTROLLER_KEYS, run, argv)


if __name__ == "__main__":
    sys.exit(main())
