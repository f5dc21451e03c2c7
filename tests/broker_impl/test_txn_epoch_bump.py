"""KIP-890 part 2 at the coordinator (``transaction.version``, KAFKA-17754), both forms.

Pure rules (:func:`broker_impl.txn_state.plan_end` with and without ``bump``), the switch
(:class:`broker_impl.txn_rules.TransactionRules`, ``--set``'s parser, ApiVersions), and the
coordinator over real partitions (the stand-in broker of ``test_txn_coordinator``): the epoch a
transaction end leaves, the answer to a retried EndTxn, the refusal of a late one, the markers'
epoch, epoch exhaustion and the records a new coordinator reloads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker_impl import config, wire
from broker_impl.control_records import Marker
from broker_impl.records import BatchHeader
from broker_impl.txn_records import decode, encode_key, encode_value
from broker_impl.txn_rules import TransactionRules
from broker_impl.txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    MAX_EPOCH,
    PRODUCER_FENCED,
    TxnMetadata,
    TxnState,
    after_end,
    complete,
    plan_add_partitions,
    plan_end,
    plan_timeout,
)
from tests.broker_impl.test_txn_coordinator import (
    DATA,
    OneNodeBroker,
    coordinator,
    markers_in,
    settle,
    state_of,
)
from tests.broker_impl.test_txn_state import PARTITIONS, T0, ongoing

S = TxnState


def ended(current: TxnMetadata, commit: bool = True, bump: bool = True, fresh: int = -1) -> TxnMetadata:
    """``current``'s EndTxn of its own epoch, prepared and completed."""
    plan = plan_end(current, current.producer_id, current.producer_epoch, commit, T0 + 5, bump, fresh)
    assert plan.error == 0 and plan.write is not None and plan.markers
    return complete(plan.write, T0 + 6)


def test_with_bump_the_prepare_carries_the_next_epoch_and_the_completion_keeps_it() -> None:
    plan = plan_end(ongoing(), 7, 0, True, T0 + 5, bump=True)
    assert plan.write is not None and plan.markers
    assert (plan.write.state, plan.write.producer_epoch, plan.write.partitions) == (
        S.PREPARE_COMMIT,
        1,
        PARTITIONS,
    )
    assert after_end(plan.write) == (7, 1)
    done = complete(plan.write, T0 + 6)
    assert (done.state, done.producer_id, done.producer_epoch) == (S.COMPLETE_COMMIT, 7, 1)


@pytest.mark.parametrize("commit", [True, False])
def test_without_bump_the_epoch_stays(commit: bool) -> None:
    done = ended(ongoing(), commit, bump=False)
    assert (done.producer_id, done.producer_epoch) == (7, 0)


def test_a_retried_end_of_the_previous_epoch_is_answered_by_the_outcome() -> None:
    done = ended(ongoing(), commit=True)
    assert plan_end(done, 7, 0, True, T0 + 7, bump=True) == plan_end(done, 7, 0, True, T0, True)
    assert plan_end(done, 7, 0, True, T0 + 7, bump=True).error == 0
    assert plan_end(done, 7, 0, True, T0 + 7, bump=True).write is None
    assert plan_end(done, 7, 0, False, T0 + 7, bump=True).error == INVALID_TXN_STATE
    aborted = ended(ongoing(), commit=False)
    assert plan_end(aborted, 7, 0, False, T0 + 7, bump=True).error == 0
    assert plan_end(aborted, 7, 0, True, T0 + 7, bump=True).error == INVALID_TXN_STATE


def test_a_retry_while_the_markers_are_written_is_concurrent() -> None:
    plan = plan_end(ongoing(), 7, 0, True, T0 + 5, bump=True)
    assert plan.write is not None
    assert plan_end(plan.write, 7, 0, True, T0 + 6, bump=True).error == CONCURRENT_TRANSACTIONS
    assert plan_end(plan.write, 7, 1, True, T0 + 6, bump=True).error == PRODUCER_FENCED


def test_a_late_end_of_an_older_epoch_never_ends_the_next_transaction() -> None:
    """KAFKA-17754: transaction 2 is open at epoch 1; transaction 1's EndTxn (epoch 0) arrives."""
    done = ended(ongoing(), commit=True)
    second = plan_add_partitions(done, 7, 1, PARTITIONS, T0 + 8).write
    assert second is not None and second.state is S.ONGOING
    assert plan_end(second, 7, 0, True, T0 + 9, bump=True).error == PRODUCER_FENCED
    third = ended(second, commit=True)  # epoch 2 now: the same late request is fenced there too
    assert plan_end(third, 7, 0, True, T0 + 9, bump=True).error == PRODUCER_FENCED
    assert plan_end(third, 8, 2, True, T0 + 9, bump=True).error == INVALID_PRODUCER_ID_MAPPING


def test_without_bump_the_late_end_commits_the_next_transaction() -> None:
    """The historical form: the same (id, epoch), so the late EndTxn is transaction 2's."""
    done = ended(ongoing(), commit=True, bump=False)
    second = plan_add_partitions(done, 7, 0, PARTITIONS, T0 + 8).write
    assert second is not None
    plan = plan_end(second, 7, 0, True, T0 + 9, bump=False)
    assert plan.error == 0 and plan.write is not None and plan.write.state is S.PREPARE_COMMIT


def test_with_bump_an_abort_of_the_current_epoch_without_partitions_bumps_again() -> None:
    done = ended(ongoing(), commit=True)
    plan = plan_end(done, 7, 1, False, T0 + 9, bump=True)
    assert plan.write is not None and plan.markers
    assert (plan.write.state, plan.write.producer_epoch, plan.write.partitions) == (
        S.PREPARE_ABORT,
        2,
        frozenset(),
    )
    assert plan_end(done, 7, 1, True, T0 + 9, bump=True).error == INVALID_TXN_STATE


@pytest.mark.parametrize(("step", "late_abort"), [(1, 0), (2, PRODUCER_FENCED)])
def test_a_fence_moves_the_epoch_by_two_so_the_fenced_end_is_no_retry(step: int, late_abort: int) -> None:
    """A timeout fences and aborts at epoch 0+step.  With a step of one (TV1's) the fenced
    producer's EndTxn v5 abort of epoch 0 would pass for the retry of an end and be answered
    with the new epoch; with two (Kafka's TV2) it is PRODUCER_FENCED."""
    plan = plan_timeout(ongoing(), T0 + 10**9, fence_step=step)
    assert plan is not None and plan.write is not None
    done = complete(plan.write, T0 + 10**9)
    assert (done.state, done.producer_epoch) == (S.COMPLETE_ABORT, step)
    assert plan_end(done, 7, 0, False, T0 + 10**9, bump=True).error == late_abort
    assert TransactionRules(transaction_version=step).fence_step == step


def test_an_exhausted_epoch_moves_to_the_next_producer_id_at_epoch_zero() -> None:
    current = dataclasses.replace(ongoing(), producer_epoch=MAX_EPOCH)
    with pytest.raises(ValueError, match="exhausted"):
        plan_end(current, 7, MAX_EPOCH, True, T0 + 5, bump=True)
    plan = plan_end(current, 7, MAX_EPOCH, True, T0 + 5, bump=True, fresh_producer_id=99)
    assert plan.write is not None
    assert (plan.write.producer_id, plan.write.producer_epoch) == (7, MAX_EPOCH + 1)  # the markers'
    assert after_end(plan.write) == (99, 0)  # what the client is answered
    done = complete(plan.write, T0 + 6)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id, done.next_producer_id) == (
        99,
        0,
        7,
        -1,
    )
    assert plan_end(done, 7, MAX_EPOCH, True, T0 + 7, bump=True).error == 0  # the retry
    assert plan_end(done, 7, MAX_EPOCH - 1, True, T0 + 7, bump=True).error == INVALID_PRODUCER_ID_MAPPING


def test_the_exhaustion_ids_survive_the_state_record() -> None:
    current = dataclasses.replace(ongoing(), producer_epoch=MAX_EPOCH)
    prepared = plan_end(current, 7, MAX_EPOCH, True, T0 + 5, bump=True, fresh_producer_id=99).write
    assert prepared is not None
    for metadata in (prepared, complete(prepared, T0 + 6), ongoing()):
        assert decode(encode_key("tx"), encode_value(metadata)) == ("tx", metadata)
    assert encode_value(ongoing())[:2] == b"\x00\x00"  # version 0 while no id is carried
    assert encode_value(prepared)[:2] == b"\x00\x01"


def test_the_switch_parses_and_decides_per_end_txn_version() -> None:
    key = {entry.name: entry for entry in config.BROKER_KEYS}["transaction.version"]
    assert key.default == 2 and key.parse("1") == 1 and key.parse(" 2 ") == 2
    for bad in ("0", "3", "two"):
        with pytest.raises(ValueError):
            key.parse(bad)
    assert TransactionRules().bumps_epoch(5) and not TransactionRules().bumps_epoch(4)
    historical = TransactionRules(transaction_version=1)
    assert not historical.bumps_epoch(5) and historical.advertised_end_txn_version() == 3
    assert TransactionRules().advertised_end_txn_version() == 5


@pytest.mark.parametrize(("level", "end_txn"), [(1, 3), (2, 5)])
def test_api_versions_offers_end_txn_v5_only_at_level_2(level: int, end_txn: int) -> None:
    request = wire.decode_request(
        wire.encode_request(
            ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 1, "t"
        )[4:]
    )
    frame = wire.encode_response(request, wire.api_versions_response(request, level))
    _, answer = wire.decode_response(ApiVersionsResponse, 3, frame[4:])
    ceilings = {entry.api_key: entry.max_version for entry in answer.api_keys}
    assert (ceilings[26], ceilings[0], ceilings[24]) == (end_txn, 10, 3)
    assert not answer.finalized_features  # level 2 would tell a Java client to skip AddPartitionsToTxn


def run(coroutine: object) -> None:
    asyncio.run(coroutine)  # type: ignore[arg-type]


def test_the_coordinator_bumps_for_v5_and_writes_markers_of_the_bumped_epoch(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        loaded = await coordinator(broker)
        assert await loaded.init_producer_id("a", 60000, None) == (0, 1001, 0)
        assert await loaded.add_partitions("a", 1001, 0, DATA) == wire.NONE
        assert await loaded.end("a", 1001, 0, True, bump=True) == (wire.NONE, 1001, 1)
        await settle(loaded)
        assert markers_in(broker, ("t", 0)) == [Marker(1001, 1, True, 1)]
        assert state_of(loaded, "a").state is S.COMPLETE_COMMIT
        assert await loaded.end("a", 1001, 0, True, bump=True) == (wire.NONE, 1001, 1)  # a retry
        assert await loaded.add_partitions("a", 1001, 1, DATA) == wire.NONE
        assert await loaded.end("a", 1001, 0, True, bump=True) == (PRODUCER_FENCED, -1, -1)  # late
        assert await loaded.end("a", 1001, 1, False, bump=False) == (wire.NONE, 1001, 1)  # v<5
        await settle(loaded)
        assert markers_in(broker, ("t", 1)) == [Marker(1001, 1, True, 1), Marker(1001, 1, False, 1)]
        after = await coordinator(broker)  # a failover reloads the bumped epoch
        assert (state_of(after, "a").producer_id, state_of(after, "a").producer_epoch) == (1001, 1)

    run(scenario())


def test_the_coordinator_takes_a_new_producer_id_at_an_exhausted_epoch(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = OneNodeBroker(tmp_path)
        loaded = await coordinator(broker)
        assert (await loaded.init_producer_id("z", 60000, None))[0] == wire.NONE
        state = loaded.partitions[0]
        state.transactions["z"] = dataclasses.replace(state_of(loaded, "z"), producer_epoch=MAX_EPOCH)
        assert await loaded.add_partitions("z", 1001, MAX_EPOCH, DATA) == wire.NONE
        assert await loaded.end("z", 1001, MAX_EPOCH, True, bump=True) == (wire.NONE, 1002, 0)
        await settle(loaded)
        assert markers_in(broker, ("t", 0)) == [Marker(1001, MAX_EPOCH + 1, True, 1)]
        assert (state_of(loaded, "z").producer_id, state_of(loaded, "z").producer_epoch) == (1002, 0)
        assert await loaded.end("z", 1001, MAX_EPOCH, True, bump=True) == (wire.NONE, 1002, 0)

    run(scenario())


def test_a_partition_leader_takes_the_next_epoch_after_its_marker(tmp_path: Path) -> None:
    """The markers carry epoch+1: the leader then refuses epoch-e batches and starts e+1 at 0."""
    broker = OneNodeBroker(tmp_path)
    table = broker.partitions[("t", 0)].log.producers

    def header(epoch: int, sequence: int) -> BatchHeader:
        return BatchHeader(
            base_offset=0, batch_length=0, partition_leader_epoch=0, magic=2, crc=0, attributes=16,
            last_offset_delta=0, base_timestamp=0, max_timestamp=0, producer_id=1001,
            producer_epoch=epoch, base_sequence=sequence, record_count=1,
        )  # fmt: skip

    table.record(header(0, 0))
    table.record(dataclasses.replace(header(1, -1), attributes=48), is_marker=True)
    assert table.check(header(0, 1)) == (47, None)  # the late Produce of the ended transaction
    assert table.check(header(1, 0)) == (0, None)
