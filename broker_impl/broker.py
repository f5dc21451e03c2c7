"""A broker process: Kafka listener, partition replicas, controller link, background duties.

``python -m broker_impl.broker --config FILE``

Start-up: open (recover) every partition directory under ``log.dirs``, load HWs from the
HW checkpoint, take the clean-shutdown marker (below), register with the controller under
a fresh incarnation id, then follow the controller's metadata: become leader or follower
of each assigned partition whenever its leader epoch moves.  Background duties, each as
in Kafka: heartbeats, ISR shrink/expand proposals to the controller (:mod:`broker_impl.isr_proposals`), the HW checkpoint
every ``replica.high.watermark.checkpoint.interval.ms``, and ``flush.ms`` flushes.

SIGTERM is a controlled shutdown (:mod:`broker_impl.controlled_shutdown`: the controller moves this
broker's leaderships away first, with ``controlled.shutdown.enable``), then a clean one; SIGINT the
clean one alone. A clean shutdown: flush every log, write the HW checkpoint, and only then write the
clean-shutdown marker :data:`CLEAN_SHUTDOWN_FILE` in ``log.dirs`` (as Kafka's
``.kafka_cleanshutdown``), durably -- fsync of the file and of the directory. SIGKILL is a crash and
power loss loses whatever was not fsynced; both leave exactly what the operating system had -- which
is the point -- and no marker. At start-up the broker notes whether the marker is there and removes
it, durably, *before* it registers; so a process that dies at any later moment leaves none, and the
next start reports an unclean shutdown. A data directory without any partition (a first start)
counts as clean. The registration carries ``clean_shutdown``: with Eligible Leader Replicas the
controller takes a broker back from an unclean shutdown out of every ISR and ELR, since it may have
lost records it had acknowledged (KIP-966, KAFKA-15586); its leaders add it back once caught up.

The event log (:mod:`broker_impl.events`, ``event.log.enable``) gets this process's ``start``
first -- before any partition is opened, so that it follows any line a crash tore -- and its
``shutdown`` last, at a clean shutdown, after the flushes and the HW checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from . import config as configuration
from . import wire
from .admin_handlers import AdminHandlers
from .checkpoints import HighWatermarkCheckpoint, fsync_directory, write_atomically
from .controlled_shutdown import StopSignals, controlled_shutdown
from .events import BROKER_EVENTS_FILE, FORMAT, SCHEMA_VERSION, START, open_event_log
from .group_coordinator import GroupCoordinator
from .group_handlers import GroupHandlers
from .group_records import OFFSETS_TOPIC
from .handlers import Handlers
from .isr_proposals import IsrProposals
from .listener import Connections
from .log import FlushPolicy
from .log_dir_failure import install as install_log_dir_failure
from .owner_watch import watch_owner
from .partition import Partition
from .replica_dirs import delete_replica, partition_directories, unassigned
from .replica_fetcher import ReplicaFetcher
from .rpc import RpcClient, RpcError
from .rules import ReplicationRules
from .txn_coordinator import TransactionCoordinator
from .txn_handlers import TxnHandlers
from .txn_offsets import TxnOffsets

logger = logging.getLogger("broker_impl.broker")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
"""The clean-shutdown marker in ``log.dirs``: present only between a clean shutdown and
the next start-up (Kafka's name)."""
RECORDED_SETTINGS = (
    "truncation.mode",
    "leader.epoch.lookup",
    "isr.join.offset",
    "leader.epoch.fencing.enable",
    "min.insync.replicas",
    "min.insync.replicas.strict",
    "replica.lag.time.max.ms",
    "flush.messages",
    "flush.ms",
)
"""The settings the ``start`` event records: those that decide replication and durability."""


class Broker:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.node_id: int = settings["node.id"]
        self.listen = settings["listeners"]
        self.advertised: tuple[str, int] = settings["advertised.listeners"] or self.listen
        self.cluster_id: str = settings["cluster.id"]
        self.incarnation = uuid.uuid4().hex
        self.log_dir = Path(settings["log.dirs"])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.flush_policy = FlushPolicy(settings["flush.messages"], settings["flush.ms"])
        self.rules = ReplicationRules.from_settings(settings)
        self.hw_checkpoint = HighWatermarkCheckpoint(self.log_dir)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.metadata: dict[str, Any] = {"version": -1, "brokers": {}, "topics": {}}
        controller_host, controller_port = settings["controller.quorum.bootstrap.servers"]
        self.controller = RpcClient(controller_host, controller_port, timeout=5.0)
        self.connections = Connections()  # the open client connections, closed at shutdown
        self._producer_ids: list[int] = []
        self.isr_proposals = IsrProposals(
            self.node_id,
            self.partitions,
            lambda: self.controller,
            self.heartbeat_once,
            settings["replica.lag.time.max.ms"] / 1000,
        )
        self.coordinator = GroupCoordinator(self)
        self.txn_coordinator = TransactionCoordinator(self, self.node_id)
        self.events = open_event_log(settings, str(self.log_dir), BROKER_EVENTS_FILE, self.node_id)
        self.clean_shutdown = self._take_clean_shutdown_marker()  # the last process' (for registration)
        self.events.emit(
            START,
            format=FORMAT,
            schema_version=SCHEMA_VERSION,
            role="broker",
            incarnation=self.incarnation,
            pid=os.getpid(),
            clean_shutdown=self.clean_shutdown,
            wall_ms=int(time.time() * 1000),  # the process' own clock, libfaketime's under clock faults
            settings={name: settings[name] for name in RECORDED_SETTINGS},
        )
        self._open_existing_partitions()

    # ---- clean-shutdown marker ------------------------------------------------------------

    def _take_clean_shutdown_marker(self) -> bool:
        """Whether the previous shutdown was clean: the marker exists, or the directory
        holds no partition at all (a first start).  The marker is removed durably (unlink,
        fsync the directory) before this returns, so that a crash of this process, even a
        power loss, is never taken for a clean shutdown."""
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        try:
            marker.unlink()
        except FileNotFoundError:
            clean = not partition_directories(self.log_dir)
        else:
            fsync_directory(self.log_dir)
            clean = True
        logger.info("previous shutdown: %s", "clean" if clean else "unclean")
        return clean

    def _write_clean_shutdown_marker(self) -> None:
        write_atomically(self.log_dir / CLEAN_SHUTDOWN_FILE, "")

    # ---- partitions ---------------------------------------------------------------------

    def _open_existing_partitions(self) -> None:
        checkpointed = self.hw_checkpoint.read()
        for key in partition_directories(self.log_dir):
            self.partitions[key] = self._new_partition(key, checkpointed.get(key, 0))

    def _new_partition(self, key: tuple[str, int], high_watermark: int) -> Partition:
        return Partition(
            key[0],
            key[1],
            self.node_id,
            self.log_dir / f"{key[0]}-{key[1]}",
            self.settings["log.segment.bytes"],
            self.flush_policy,
            high_watermark,
            self.rules,
            self.events,
        )

    def metadata_topics(self) -> dict[str, Any]:
        topics: dict[str, Any] = self.metadata["topics"]
        return topics

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        return {
            int(node): (broker["host"], broker["port"])
            for node, broker in self.metadata["brokers"].items()
            if not broker["fenced"]
        }

    def apply_metadata(self, metadata: dict[str, Any]) -> None:
        """Follow a newer metadata version: create the replicas newly assigned here, follow
        the others' leadership, drop those no longer assigned (reassigned away).  A partition
        that cannot be applied (its directory cannot be made, say) is logged and skipped,
        never allowed to stop the broker from following the rest."""
        if metadata["version"] <= self.metadata["version"]:
            return
        self.metadata = metadata
        for name, topic in metadata["topics"].items():
            for index, state in enumerate(topic["partitions"]):
                if self.node_id in state["replicas"]:
                    try:
                        self._apply_partition_state((name, index), state)
                    except (OSError, ValueError) as error:
                        logger.error(
                            "%s-%d: cannot follow metadata v%d: %s", name, index, metadata["version"], error
                        )
        for key in unassigned(list(self.partitions), metadata["topics"], self.node_id):
            try:
                self._drop_replica(key, metadata["topics"][key[0]]["partitions"][key[1]])
            except OSError as error:
                logger.error("%s-%d: cannot delete the replica: %s", key[0], key[1], error)

    def _apply_partition_state(self, key: tuple[str, int], state: dict[str, Any]) -> None:
        partition = self.partitions.get(key)
        if partition is None:
            partition = self.partitions[key] = self._new_partition(key, 0)
        epoch = state["leader_epoch"]
        if epoch < partition.leader_epoch:
            return
        if epoch == partition.leader_epoch:
            partition.update_isr(state["partition_epoch"], state["isr"])
            return
        self._stop_fetcher(key)
        if state["leader"] == self.node_id:
            partition.become_leader(epoch, state["partition_epoch"], state["replicas"], state["isr"])
            self.coordinator.partition_changed(partition)
            self.txn_coordinator.partition_changed(partition)
            return
        partition.become_follower(
            state["leader"], epoch, state["partition_epoch"], state["replicas"], state["isr"]
        )
        self.coordinator.partition_changed(partition)
        self.txn_coordinator.partition_changed(partition)
        if self.settings["truncation.mode"] == "high-watermark":
            # pre-0.11: cut at our own HW, unconditionally
            partition.truncate_to(partition.high_watermark, reason="high-watermark")
        leader = self.metadata["brokers"].get(str(state["leader"]))
        if state["leader"] >= 0 and leader is not None:
            fetcher = ReplicaFetcher(partition, self.node_id, (leader["host"], leader["port"]), self.settings)
            self.fetchers[key] = asyncio.create_task(fetcher.run(), name=f"fetcher-{key[0]}-{key[1]}")

    def _drop_replica(self, key: tuple[str, int], state: dict[str, Any]) -> None:
        """No longer a replica: stop fetching, step down (a follower of the new leader, so
        produce requests waiting here fail), close the log and delete it (Kafka's StopReplica
        with delete, :mod:`broker_impl.replica_dirs`)."""
        self._stop_fetcher(key)
        partition = self.partitions.pop(key)
        epochs = (state["leader_epoch"], state["partition_epoch"], state["replicas"], state["isr"])
        partition.become_follower(state["leader"], *epochs)
        self.coordinator.partition_changed(partition)
        self.txn_coordinator.partition_changed(partition)
        partition.log.close()
        delete_replica(self.log_dir, key)

    def _stop_fetcher(self, key: tuple[str, int]) -> None:
        task = self.fetchers.pop(key, None)
        if task is not None:
            task.cancel()

    def note_follower_fetch(self, partition: Partition) -> None:
        self.isr_proposals.fetched(partition)

    # ---- controller link ----------------------------------------------------------------

    async def _register(self) -> None:
        while True:
            try:
                reply = await self.controller.call(
                    "register",
                    {
                        "node_id": self.node_id,
                        "incarnation": self.incarnation,
                        "host": self.advertised[0],
                        "port": self.advertised[1],
                        "clean_shutdown": self.clean_shutdown,
                    },
                )
                self.apply_metadata(reply["metadata"])
                logger.info("registered with the controller as incarnation %s", self.incarnation)
                return
            except (ConnectionError, RpcError) as error:
                logger.info("registration failed: %s", error)
                await asyncio.sleep(0.2)

    async def heartbeat_forever(self) -> None:
        await self._register()
        interval = self.settings["broker.heartbeat.interval.ms"] / 1000
        while True:
            await self.heartbeat_once()
            await asyncio.sleep(interval)

    async def heartbeat_once(self) -> None:
        try:
            reply = await self.controller.call(
                "heartbeat",
                {
                    "node_id": self.node_id,
                    "incarnation": self.incarnation,
                    "version": self.metadata["version"],
                },
            )
        except RpcError:
            await self._register()
            return
        except ConnectionError as error:
            logger.info("heartbeat failed: %s", error)
            return
        if "metadata" in reply:
            self.apply_metadata(reply["metadata"])

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, timeout_ms: int
    ) -> tuple[int, str | None]:
        if partitions == -1:
            partitions = self.settings["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.settings["default.replication.factor"]
        try:
            reply = await self.controller.call(
                "create_topic",
                {"name": name, "partitions": partitions, "replication_factor": replication_factor},
            )
        except (ConnectionError, RpcError) as error:
            return wire.REQUEST_TIMED_OUT, str(error)
        problem = reply.get("error")
        if problem == "exists":
            return wire.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        if problem and problem.startswith("invalid topic name"):
            return wire.INVALID_TOPIC_EXCEPTION, str(problem)
        if problem:
            code = wire.INVALID_PARTITIONS if "partitions" in problem else wire.INVALID_REPLICATION_FACTOR
            return code, str(problem)
        deadline = time.monotonic() + max(timeout_ms, 1000) / 1000
        while self.metadata["version"] < reply["version"] and time.monotonic() < deadline:
            await self.heartbeat_once()
            if self.metadata["version"] < reply["version"]:
                await asyncio.sleep(0.02)
        return wire.NONE, None

    async def auto_create_topic(self, name: str) -> int:
        if name == OFFSETS_TOPIC:
            error = await self.coordinator.create_offsets_topic()
        else:
            error, _ = await self.create_topic(name, -1, -1, 5000)
        return wire.LEADER_NOT_AVAILABLE if error in (wire.NONE, wire.TOPIC_ALREADY_EXISTS) else error

    async def allocate_producer_id(self) -> int:
        if not self._producer_ids:
            try:
                block = await self.controller.call("allocate_producer_ids", {"node_id": self.node_id})
            except (ConnectionError, RpcError):
                return -1
            self._producer_ids = list(range(block["first"] + block["count"] - 1, block["first"] - 1, -1))
        return self._producer_ids.pop()

    # ---- background duties ----------------------------------------------------------------

    async def checkpoint_high_watermarks_forever(self) -> None:
        interval = self.settings["replica.high.watermark.checkpoint.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        self.hw_checkpoint.write(
            (key, partition.high_watermark) for key, partition in self.partitions.items()
        )

    async def flush_forever(self) -> None:
        interval = self.settings["log.flush.scheduler.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for partition in self.partitions.values():
                partition.log.flush_if_due(now)

    def shutdown_cleanly(self) -> None:
        """Flush every log and write the HW checkpoint, then -- only if both succeeded --
        the clean-shutdown marker.  Nothing may write to a log after this returns."""
        for partition in self.partitions.values():
            partition.log.flush()
        self.checkpoint_high_watermarks()
        self.events.emit(
            "shutdown",
            partitions=[
                {
                    "topic": partition.topic,
                    "partition": partition.index,
                    "role": partition.role,
                    "epoch": partition.leader_epoch,
                    "leo": partition.log_end_offset,
                    "hw": partition.high_watermark,
                }
                for partition in self.partitions.values()
            ],
        )
        self.events.close()
        self._write_clean_shutdown_marker()

    # ---- client connections -------------------------------------------------------------

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection, answered by the handlers of every API the broker serves."""
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""
        plain, transactions = Handlers(self, self.txn_coordinator.verifier), self.txn_coordinator
        offsets = TxnOffsets(self.coordinator, transactions.verifier)
        handlers = {
            **plain.table(),
            **GroupHandlers(self.coordinator, client_host, {1: transactions.locate}).table(),
            **TxnHandlers(transactions, self.partitions, plain.init_producer_id, offsets).table(),
            **AdminHandlers(self.controller.call).table(),
        }
        await self.connections.serve(handlers, reader, writer)


async def run(settings: dict[str, Any]) -> None:
    broker = Broker(settings)
    install_log_dir_failure(broker.events, broker.log_dir)  # a storage error from here on halts
    host, port = broker.listen
    server = await asyncio.start_server(broker.serve_connection, host, port, reuse_address=True)
    logger.info(
        "broker %d listening on %s:%d (truncation.mode=%s)",
        broker.node_id,
        host,
        port,
        settings["truncation.mode"],
    )
    stop = StopSignals(asyncio.get_running_loop())
    _owner_watch = watch_owner()  # kept referenced: it ends this process with its starter
    tasks = [
        asyncio.create_task(coroutine)
        for coroutine in (
            broker.heartbeat_forever(),
            broker.isr_proposals.maintain_forever(),
            broker.checkpoint_high_watermarks_forever(),
            broker.flush_forever(),
            broker.coordinator.tick_forever(),
            broker.txn_coordinator.tick_forever(),
        )
    ]
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if task is not stopped and task.exception() is not None:
            logger.error("background duty failed", exc_info=task.exception())
    await controlled_shutdown(broker, tasks[0], controlled=stop.controlled)  # tasks[0] heartbeats
    server.close()
    broker.connections.abort_all()
    for task in [*tasks, *broker.fetchers.values()]:
        task.cancel()
    with contextlib.suppress(Exception):
        broker.shutdown_cleanly()
    logger.info("broker %d stopped", broker.node_id)


def main(argv: list[str] | None = None) -> int:
    return configuration.process_main("broker", configuration.BROKER_KEYS, run, argv)


if __name__ == "__main__":
    sys.exit(main())
