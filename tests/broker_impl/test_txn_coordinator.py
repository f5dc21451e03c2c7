"""The transaction coordinator over real partitions, no network (``broker_impl.txn_coordinator``).

A stand-in broker (:class:`~broker_impl.broker_view.RequestBrokerView`) leads
``__transaction_state-0`` and a data topic ``t`` on one node, and markers go straight to the local
leaders (:func:`~broker_impl.txn_markers.write_marker`, the WriteTxnMarkers handler's path).  So
every write is a real ``acks=all`` append, and a "failover" is a new coordinator loading the same
log in a newer leader epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from broker_impl import records, txn_coordinator, wire
from broker_impl.control_records import Marker, read_marker
from broker_impl.events import EventLog
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.rules import ReplicationRules
from broker_impl.txn_coordinator import TransactionCoordinator
from broker_impl.txn_markers import write_marker
from broker_impl.txn_records import TRANSACTION_STATE_TOPIC
from broker_impl.txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    PRODUCER_FENCED,
    TxnState,
)

NEVER = 2**63 - 1
DATA = frozenset({("t", 0), ("t", 1)})
SETTINGS = {
    "transaction.max.timeout.ms": 900000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
    "transactional.id.expiration.ms": 604800000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.replication.factor": 1,
    "offsets.topic.num.partitions": 1,
    "transaction.partition.verification.enable": True,
}


class OneNodeBroker:
    """Node 1, leader of everything, ISR [1]: the HW follows every append at once."""

    cluster_id = "test"

    def __init__(self, directory: Path) -> None:
        self.settings: dict[str, Any] = dict(SETTINGS)
        self.directory = directory
        self.partitions: dict[tuple[str, int], Partition] = {}
        for key in [(TRANSACTION_STATE_TOPIC, 0), *sorted(DATA)]:
            self.partitions[key] = self.open(key, epoch=1)
        self.next_producer_id = 1000

    def open(self, key: tuple[str, int], epoch: int) -> Partition:
        replica = Partition(
            key[0], key[1], 1, self.directory / f"{key[0]}-{key[1]}", 1 << 20,
            FlushPolicy(NEVER, NEVER), 0, ReplicationRules(), EventLog.disabled(),
        )  # fmt: skip
        replica.become_leader(epoch, 0, [1], [1])
        return replica

    def metadata_topics(self) -> dict[str, Any]:
        return {
            TRANSACTION_STATE_TOPIC: {"partitions": [{"leader": 1}]},
            "t": {"partitions": [{"leader": 1}, {"leader": 1}]},
        }

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        return {1: ("127.0.0.1", 9)}

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, timeout_ms: int
    ) -> tuple[int, str | None]:
        return wire.TOPIC_ALREADY_EXISTS, None

    async def auto_create_topic(self, name: str) -> int:
        return wire.NONE

    async def allocate_producer_id(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def note_follower_fetch(self, partition: Partition) -> None:
        pass


class LocalMarkers:
    """The marker sender, minus the network; ``hold`` keeps every send waiting (a coordinator
    that dies between the prepare and its markers)."""

    def __init__(self, partitions: Mapping[tuple[str, int], Partition], hold: bool = False) -> None:
        self.partitions = partitions
        self.hold = hold

    async def send(self, marker: Marker, partitions: frozenset[tuple[str, int]]) -> None:
        if self.hold:
            await asyncio.Event().wait()
        for topic, index in sorted(partitions):
            assert await write_marker(self.partitions, marker, topic, index) == wire.NONE


async def coordinator(broker: OneNodeBroker, hold: bool = False) -> TransactionCoordinator:
    loaded = TransactionCoordinator(broker, 1)
    loaded.markers = LocalMarkers(broker.partitions, hold)  # type: ignore[assignment]
    loaded.partition_changed(broker.partitions[(TRANSACTION_STATE_TOPIC, 0)])
    for _ in range(100):
        if loaded.owner("x")[0] == wire.NONE:
            return loaded
        await asyncio.sleep(0.01)
    raise AssertionError("the coordinator did not load")


async def settle(loaded: TransactionCoordinator) -> None:
    """Wait until no marker task runs."""
    for _ in range(200):
        if not any(state.tasks for state in loaded.partitions.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("markers still being written")


def markers_in(broker: OneNodeBroker, key: tuple[str, int]) -> list[Marker]:
    log = broker.partitions[key].log
    return [
        read_marker(batch.header, log.read_batch(batch)) for batch in log.batches() if batch.header.is_control
    ]


def state_of(loaded: TransactionCoordinator, transactional_id: str) -> Any:
    return loaded.partitions[0].transactions[transactional_id]


def test_init_add_commit_writes_markers_to_every_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        loaded = await coordinator(broker)
        assert await loaded.init_producer_id("a", 60000, None) == (0, 1001, 0)
        assert await loaded.add_partitions("a", 1001, 0, DATA) == wire.NONE
        assert state_of(loaded, "a").state is TxnState.ONGOING
        assert (await loaded.end("a", 1001, 0, True))[0] == wire.NONE
        await settle(loaded)
        assert state_of(loaded, "a").state is TxnState.COMPLETE_COMMIT
        for key in sorted(DATA):
            assert markers_in(broker, key) == [Marker(1001, 0, True, 1)]
        assert (await loaded.end("a", 1001, 0, True))[0] == wire.NONE  # a retried commit

    asyncio.run(scenario())


def test_a_new_coordinator_loads_the_state_and_finishes_a_prepared_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        first = await coordinator(broker, hold=True)
        await first.init_producer_id("b", 60000, None)
        await first.add_partitions("b", 1001, 0, DATA)
        assert (await first.end("b", 1001, 0, False))[0] == wire.NONE  # prepared; its markers never go
        assert markers_in(broker, ("t", 0)) == []
        state_partition = broker.partitions[(TRANSACTION_STATE_TOPIC, 0)]
        state_partition.become_follower(2, 2, 0, [1, 2], [1, 2])
        first.partition_changed(state_partition)  # deposed: its marker task is cancelled
        state_partition.become_leader(3, 0, [1], [1])
        second = await coordinator(broker)
        await settle(second)
        assert state_of(second, "b").state is TxnState.COMPLETE_ABORT
        assert markers_in(broker, ("t", 1)) == [Marker(1001, 0, False, 3)]  # the new coordinator epoch
        assert await second.init_producer_id("b", 60000, None) == (0, 1001, 1)

    asyncio.run(scenario())


@pytest.mark.parametrize("version", [1, 2])
def test_a_newer_producer_fences_the_open_transaction(tmp_path: Path, version: int) -> None:
    """The fence moves the epoch by one, or by two under ``transaction.version=2`` (Kafka's TV2)."""

    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        broker.settings["transaction.version"] = version
        loaded = await coordinator(broker)
        await loaded.init_producer_id("c", 60000, None)
        await loaded.add_partitions("c", 1001, 0, DATA)
        assert (await loaded.init_producer_id("c", 60000, None))[0] == CONCURRENT_TRANSACTIONS
        await settle(loaded)
        assert markers_in(broker, ("t", 0)) == [Marker(1001, version, False, 1)]  # the new epoch
        assert await loaded.init_producer_id("c", 60000, None) == (0, 1001, version + 1)
        assert (await loaded.end("c", 1001, 0, True))[0] == PRODUCER_FENCED

    asyncio.run(scenario())


@pytest.mark.parametrize("version", [1, 2])
def test_an_expired_transaction_is_aborted_and_its_producer_fenced(tmp_path: Path, version: int) -> None:
    """Under ``transaction.version=2`` the fenced producer's EndTxn v5 is fenced too, commit or
    abort: the epoch moved by two, so it is not taken for the retry of an end."""

    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        broker.settings["transaction.version"] = version
        loaded = await coordinator(broker)
        await loaded.init_producer_id("d", 50, None)
        await loaded.add_partitions("d", 1001, 0, DATA)
        await loaded.abort_timed_out()
        assert state_of(loaded, "d").state is TxnState.ONGOING  # not yet
        await asyncio.sleep(0.1)
        await loaded.abort_timed_out()
        await settle(loaded)
        assert state_of(loaded, "d").state is TxnState.COMPLETE_ABORT
        assert state_of(loaded, "d").producer_epoch == version
        assert (await loaded.end("d", 1001, 0, True))[0] == PRODUCER_FENCED
        assert await loaded.add_partitions("d", 1001, 0, DATA) == PRODUCER_FENCED
        if version == 2:
            for commit in (True, False):
                assert await loaded.end("d", 1001, 0, commit, bump=True) == (PRODUCER_FENCED, -1, -1)

    asyncio.run(scenario())


def test_state_records_are_acks_all_appends_to_the_state_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        loaded = await coordinator(broker)
        await loaded.init_producer_id("e", 60000, None)
        await loaded.add_partitions("e", 1001, 0, DATA)
        log = broker.partitions[(TRANSACTION_STATE_TOPIC, 0)].log
        values = [
            record.value
            for batch in log.batches()
            for record in records.decode_records(log.read_batch(batch))
        ]
        assert len(values) == 2  # Empty, then Ongoing
        assert (await loaded.init_producer_id("e", 0, None))[0] == 50  # INVALID_TRANSACTION_TIMEOUT

    asyncio.run(scenario())


def test_an_idle_transactional_id_expires_to_a_tombstone_and_starts_over_with_a_new_producer_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``transactional.id.expiration.ms`` (the Dead state): an id between transactions and idle
    past it is removed with a tombstone a new coordinator replays too; one with a transaction open
    is never removed; the next InitProducerId gets a new producer id at epoch 0, and the old
    producer id is no longer the id's (INVALID_PRODUCER_ID_MAPPING)."""

    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        broker.settings["transactional.id.expiration.ms"] = 60000
        loaded = await coordinator(broker)
        await loaded.init_producer_id("idle", 60000, None)
        await loaded.add_partitions("idle", 1001, 0, DATA)
        await loaded.end("idle", 1001, 0, True)
        await settle(loaded)
        await loaded.init_producer_id("open", 600000, None)
        await loaded.add_partitions("open", 1002, 0, DATA)
        now = txn_coordinator._now_ms()
        monkeypatch.setattr(txn_coordinator, "_now_ms", lambda: now + 59000)
        await loaded.remove_expired()
        assert set(loaded.partitions[0].transactions) == {"idle", "open"}  # not yet
        monkeypatch.setattr(txn_coordinator, "_now_ms", lambda: now + 61000)
        await loaded.remove_expired()
        assert set(loaded.partitions[0].transactions) == {"open"}
        log = broker.partitions[(TRANSACTION_STATE_TOPIC, 0)].log
        last = records.decode_records(log.read_batch(log.batches()[-1]))[-1]
        assert last.value is None  # the tombstone
        assert await loaded.add_partitions("idle", 1001, 1, DATA) == INVALID_PRODUCER_ID_MAPPING

        state_partition = broker.partitions[(TRANSACTION_STATE_TOPIC, 0)]
        state_partition.become_follower(2, 2, 0, [1, 2], [1, 2])
        loaded.partition_changed(state_partition)
        state_partition.become_leader(3, 0, [1], [1])
        successor = await coordinator(broker)
        assert set(successor.partitions[0].transactions) == {"open"}
        assert await successor.init_producer_id("idle", 60000, None) == (0, 1003, 0)

    asyncio.run(scenario())
