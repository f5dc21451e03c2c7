"""The controller: cluster metadata, broker liveness, leader election, leader epochs.

``python -m broker_impl.controller --config FILE``

What it owns (as Kafka's controller does): the broker registry with heartbeats and a
session timeout (``broker.session.timeout.ms``); topics, replica assignments, and for
every partition its leader, **leader epoch** (bumped on every leadership change), ISR
and partition epoch (bumped on every change).  Every change is persisted to
``metadata.json`` with fsync before it is announced, so a controller restart never
hands out an epoch twice.

Elections: a partition's leader is the first replica, in assignment order, that is in
the ISR and alive; with ``unclean.leader.election.enable`` any alive replica if the ISR
has none (the ISR then becomes just the new leader -- the documented data loss).
Without a candidate the partition goes offline (leader -1) and the ISR keeps its last
member, so that member can be re-elected cleanly when it returns.

Brokers that stop heartbeating for the session timeout are *fenced*: they lose
leadership and leave every ISR (unless they are its last member).  A broker that
re-registers with a new incarnation (it restarted) loses the leaderships it held, but
keeps its ISR memberships: ISR membership is the leader's call, made from replication
lag, as when a fast bounce inside the ZooKeeper session did not reach the pre-KRaft
controller.  That is the window the KIP-101 "loss" scenario needs, and it exists in
real clusters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from . import config as configuration
from .checkpoints import write_atomically
from .rpc import RpcError, serve

logger = logging.getLogger("broker_impl.controller")

TICK_SECONDS = 0.05
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
PRODUCER_ID_BLOCK = 1000


class Controller:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.directory = Path(settings["metadata.log.dir"])
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metadata.json"
        self.session_timeout = settings["broker.session.timeout.ms"] / 1000
        self.unclean = bool(settings["unclean.leader.election.enable"])
        self.metadata: dict[str, Any] = self._load()
        started = time.monotonic()
        # Liveness is not persisted: after a controller restart every known broker gets
        # one session timeout of grace to heartbeat again.
        self.last_heartbeat: dict[int, float] = {int(node): started for node in self.metadata["brokers"]}

    def _load(self) -> dict[str, Any]:
        if self.path.exists():
            loaded: dict[str, Any] = json.loads(self.path.read_text())
            return loaded
        return {
            "version": 0,
            "cluster_id": self.settings["cluster.id"],
            "controller_id": self.settings["node.id"],
            "brokers": {},
            "topics": {},
            "next_producer_id": 1000,
        }

    def _commit(self, reason: str) -> None:
        """Persist (fsync) and publish a new metadata version."""
        self.metadata["version"] += 1
        write_atomically(self.path, json.dumps(self.metadata, indent=1, sort_keys=True))
        logger.info("metadata v%d: %s", self.metadata["version"], reason)

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

    def _elect(self, state: dict[str, Any], excluded: int | None = None) -> bool:
        """Choose a leader for ``state``; return whether leader or ISR changed."""
        candidates = [r for r in state["replicas"] if r in state["isr"] and self._alive(r) and r != excluded]
        if candidates:
            new_leader, new_isr = candidates[0], state["isr"]
        elif self.unclean:
            anyone = [r for r in state["replicas"] if self._alive(r) and r != excluded]
            if not anyone:
                new_leader, new_isr = -1, state["isr"]
            else:
                new_leader, new_isr = anyone[0], [anyone[0]]
                logger.warning("unclean election of %d (ISR was %s)", new_leader, state["isr"])
        else:
            new_leader, new_isr = -1, state["isr"]
        if new_leader == state["leader"] and new_isr == state["isr"]:
            return False
        if new_leader != state["leader"]:
            state["leader_epoch"] += 1
        state["leader"] = new_leader
        state["isr"] = list(new_isr)
        state["partition_epoch"] += 1
        return True

    def _fence(self, node: int, reason: str) -> None:
        self.metadata["brokers"][str(node)]["fenced"] = True
        for _name, _index, state in self._partitions():
            if node in state["isr"] and len(state["isr"]) > 1:
                state["isr"] = [r for r in state["isr"] if r != node]
                state["partition_epoch"] += 1
            if state["leader"] == node:
                self._elect(state, excluded=node)
        self._elect_offline()
        self._commit(f"broker {node} fenced: {reason}")

    def _elect_offline(self) -> bool:
        changed = False
        for _name, _index, state in self._partitions():
            if state["leader"] == -1:
                changed |= self._elect(state)
        return changed

    async def tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now = time.monotonic()
            for node_text, broker in list(self.metadata["brokers"].items()):
                node = int(node_text)
                if not broker["fenced"] and now - self.last_heartbeat.get(node, 0) > self.session_timeout:
                    self._fence(node, "session timed out")

    # ---- RPC handlers -------------------------------------------------------------------

    async def register(self, params: dict[str, Any]) -> dict[str, Any]:
        node = int(params["node_id"])
        incarnation = str(params["incarnation"])
        known = self.metadata["brokers"].get(str(node))
        self.last_heartbeat[node] = time.monotonic()
        if known is not None and known["incarnation"] != incarnation:
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
        self._elect_offline()
        self._commit(f"broker {node} registered ({incarnation})")
        return {"version": self.metadata["version"], "metadata": self.metadata}

    async def heartbeat(self, params: dict[str, Any]) -> dict[str, Any]:
        node = int(params["node_id"])
        broker = self.metadata["brokers"].get(str(node))
        if broker is None or broker["incarnation"] != str(params["incarnation"]):
            raise RpcError("not registered")
        self.last_heartbeat[node] = time.monotonic()
        if broker["fenced"]:
            broker["fenced"] = False
            self._elect_offline()
            self._commit(f"broker {node} unfenced")
        reply: dict[str, Any] = {"version": self.metadata["version"]}
        if int(params.get("version", -1)) < self.metadata["version"]:
            reply["metadata"] = self.metadata
        return reply

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
        state["isr"] = new_isr
        state["partition_epoch"] += 1
        self._commit(f"{params['topic']}-{params['partition']} ISR -> {new_isr}")
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
                    "partition_epoch": 0,
                }
                for replicas in assignment
            ],
        }
        self._commit(f"topic {name} created: {assignment}")
        return {"id": self.metadata["topics"][name]["id"], "version": self.metadata["version"]}

    async def allocate_producer_ids(self, params: dict[str, Any]) -> dict[str, Any]:
        first = int(self.metadata["next_producer_id"])
        self.metadata["next_producer_id"] = first + PRODUCER_ID_BLOCK
        self._commit(
            f"producer ids {first}..{first + PRODUCER_ID_BLOCK - 1} to broker {params.get('node_id')}"
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
            "alter_partition": controller.alter_partition,
            "create_topic": controller.create_topic,
            "allocate_producer_ids": controller.allocate_producer_ids,
            "describe": controller.describe,
        },
    )
    logger.info("controller listening on %s:%d", host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    ticker = asyncio.create_task(controller.tick_forever())
    await stop.wait()
    ticker.cancel()
    server.close()


def main(argv: list[str] | None = None) -> int:
    return configuration.process_main("controller", configuration.CONTROLLER_KEYS, run, argv)


if __name__ == "__main__":
    sys.exit(main())
