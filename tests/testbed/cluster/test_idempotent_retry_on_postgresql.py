"""A known upstream bug, pinned: tansu 0.6.0 -- and its successor nisshi 0.8.1 on PostgreSQL, whose
engine kept the same code -- writes an idempotent producer's retried batch twice, then answers its
next batch DUPLICATE_SEQUENCE_NUMBER without writing it.

The tansu campaign found it under random pauses (7 of 18 runs lost acknowledged writes of
idempotent producers; ``nemesis/scenarios/tansu-idempotent-producer-loss.toml`` is the shrunk
run). The cause, read in tansu-storage 0.6.0's PostgreSQL engine (``pg.rs``
``idempotent_message_check``) and shown here without any timing: a produce transaction reads
the producer's next expected sequence with a plain SELECT (no row lock; PostgreSQL's default
READ COMMITTED isolation), checks the batch's base sequence against it, bumps it by the batch's
size (``sequence = sequence + N``, on conflict), and only then locks the partition's watermark
row. A retry that arrives while the first attempt's transaction is still open -- a request timed
out while PostgreSQL or the broker was slow, and the client sent it again -- reads the same
committed sequence, passes the same check, waits on the first attempt's row lock, and then adds
N a second time on top of the committed bump and writes the batch again at new offsets. The
stored sequence is now N ahead of the producer's, so the producer's next batch has a base
sequence below it, which tansu answers DUPLICATE_SEQUENCE_NUMBER for any lower base sequence
(Kafka answers it only for an exact match of one of the last five batches, with that batch's
offset). Clients treat DUPLICATE_SEQUENCE_NUMBER as "already written" -- kafka-python
acknowledges the send with offset -1 -- so that batch is acknowledged and lost.

The test makes the window deterministic instead of waiting for a timeout: a third PostgreSQL
session holds the partition's watermark row lock, so the first attempt stops after its sequence
check; the retry is sent once PostgreSQL shows that attempt waiting on a lock, and the lock is
released once it shows both waiting. Then: both attempts answered without error at different
offsets (the duplicate), the next batch answered DUPLICATE_SEQUENCE_NUMBER, and the log's end
shows it was not written. It pins *known broken* behaviour: when :data:`TANSU_PIN` or
:data:`NISSHI_PIN` moves to a release that fixes it, the first assertion fails on purpose -- flip
this test to expect one write (the retry answered as a duplicate of the first attempt's offset) and
the next batch written, and let the scenarios and campaigns produce idempotently again.

nisshi 0.8.1 (``nisshi-storage-sql`` ``pg.rs`` ``produce_in_tx`` / ``idempotent_message_check``):
the same order -- a plain ``SELECT`` of the sequence (``producer_select_for_update.sql`` still has
no ``FOR UPDATE``) under READ COMMITTED, the check, the ``sequence + N`` upsert, and only then the
watermark lock (``watermark_select_for_write.sql``) -- and ``sql.rs``'s ``idempotent_sequence_check``
still answers DUPLICATE_SEQUENCE_NUMBER for any base sequence below the stored one.  Its epoch
checks changed (KIP-360), its sequence check did not.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_impl import wire
from testbed.cluster import postgres
from testbed.cluster.crate_image import CratePin
from testbed.cluster.kafka_admin import create_topic, wait_until
from testbed.cluster.nisshi_image import NISSHI_PIN
from testbed.cluster.tansu_image import TANSU_PIN
from tests.broker_impl.batch_builder import make_batch
from tests.testbed.cluster.shared_store_processes import LocalSharedStore

pytestmark = pytest.mark.third_party

BROKEN_IN: dict[str, tuple[CratePin, str]] = {"tansu": (TANSU_PIN, "0.6.0"), "nisshi": (NISSHI_PIN, "0.8.1")}
"""Each system's pin and the version this test pins the bug of (see the module docstring before
changing either)."""
TOPIC = "idempotent"
BATCH = 5
"""Records per batch: each batch advances the producer's sequence by this much."""
NONE, DUPLICATE_SEQUENCE_NUMBER = 0, 46
ANSWER_TIMEOUT = 30.0
LOCK_TIMEOUT = 20.0

HOLD_WATERMARK = f"""
begin;
select w.high from watermark w join topition tp on w.topition = tp.id join topic t on tp.topic = t.id
 where t.name = '{TOPIC}' and tp.partition = 0 for no key update;
"""
"""The lock both systems' produce takes after its sequence check (tansu's
``watermark_select_for_update.sql``, nisshi's ``watermark_select_for_write.sql``)."""
WAITING_ON_LOCKS = "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"


@pytest.fixture(params=sorted(BROKEN_IN))
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def local(system: str, request: pytest.FixtureRequest, postgres_bin_dir: Path) -> Iterator[LocalSharedStore]:
    binary: Path = request.getfixturevalue(f"{system}_binary")
    with LocalSharedStore(binary, postgres_bin_dir, brokers=1, applies_schema=system == "tansu") as cluster:
        create_topic(cluster.bootstrap, TOPIC, 1, 1)
        yield cluster


def batch(producer: tuple[int, int], base_sequence: int) -> bytes:
    """``BATCH`` records of an idempotent producer, sequences ``base_sequence``.., as a client builds them."""
    producer_id, epoch = producer
    values = [f"{base_sequence + delta}".encode() for delta in range(BATCH)]
    return bytes(
        make_batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence)
    )


class Client:
    """Raw requests to one broker, each on its own connection (as a retry after a timeout is)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host, int(port)

    async def _call(self, api_key: int, build: Any) -> Any:
        api, versions = wire.APIS[api_key], wire.APIS[18]
        connection = wire.KafkaConnection(self.host, self.port, "tidemark-pin", ANSWER_TIMEOUT)
        try:
            advertised = await connection.call(versions.request(version=0), versions.response, 0)
            (theirs,) = [entry for entry in advertised.api_keys if entry.api_key == api.key]
            version = min(theirs.max_version, api.max_version)
            return await connection.call(build(api.request, version), api.response, version)
        finally:
            connection.close()

    async def init_producer_id(self) -> tuple[int, int]:
        def build(request: Any, version: int) -> Any:
            return request(
                version=version,
                transactional_id=None,
                transaction_timeout_ms=60000,
                producer_id=-1,
                producer_epoch=-1,
            )

        answer = await self._call(22, build)
        assert answer.error_code == NONE, answer
        return int(answer.producer_id), int(answer.producer_epoch)

    async def produce(self, records: bytes) -> tuple[int, int]:
        """(error code, base offset) of one acks=all produce of ``records`` to partition 0."""

        def build(request: Any, version: int) -> Any:
            data = wire.nested(request, "TopicProduceData", "PartitionProduceData")(index=0, records=records)
            return request(
                version=version,
                transactional_id=None,
                acks=-1,
                timeout_ms=int(ANSWER_TIMEOUT * 1000),
                topic_data=[wire.nested(request, "TopicProduceData")(name=TOPIC, partition_data=[data])],
            )

        answer = await self._call(0, build)
        ((partition,),) = [topic.partition_responses for topic in answer.responses if topic.name == TOPIC]
        return int(partition.error_code), int(partition.base_offset)

    async def log_end(self) -> int:
        """Partition 0's high watermark (read_uncommitted ListOffsets for the latest offset)."""

        def build(request: Any, version: int) -> Any:
            partition = wire.nested(request, "ListOffsetsTopic", "ListOffsetsPartition")(
                partition_index=0, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1
            )
            return request(
                version=version,
                replica_id=-1,
                isolation_level=0,
                timeout_ms=int(ANSWER_TIMEOUT * 1000),
                topics=[wire.nested(request, "ListOffsetsTopic")(name=TOPIC, partitions=[partition])],
            )

        answer = await self._call(2, build)
        ((partition,),) = [topic.partitions for topic in answer.topics if topic.name == TOPIC]
        assert partition.error_code == NONE, partition
        return int(partition.offset)


def waiting_on_locks(local: LocalSharedStore) -> int:
    return int(local.psql(command=WAITING_ON_LOCKS).strip())


async def attempt_and_retry(local: LocalSharedStore, client: Client, records: bytes) -> list[tuple[int, int]]:
    """Send ``records`` and, while that attempt's transaction is held open after its sequence
    check, the same ``records`` again; both answers, in sending order."""
    holder = subprocess.Popen(
        postgres.psql_argv("127.0.0.1", local.pg_port),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        holder.stdin.write(HOLD_WATERMARK)
        holder.stdin.flush()
        # The SELECT's row (the partition's high watermark) is printed once the lock is held: the
        # first attempt must not get past the lock before the holder has it.
        assert holder.stdout.readline().strip() == str(BATCH), "the holder did not get the watermark row"
        loop = asyncio.get_running_loop()

        async def until_waiting(count: int, what: str) -> None:
            await loop.run_in_executor(
                None, lambda: wait_until(lambda: waiting_on_locks(local) >= count, LOCK_TIMEOUT, what)
            )

        first = asyncio.create_task(client.produce(records))
        await until_waiting(1, "the first attempt to wait on the watermark lock (after its sequence check)")
        retry = asyncio.create_task(client.produce(records))
        await until_waiting(2, "the retry to wait on the first attempt's sequence row (after its own check)")
        holder.stdin.write("commit;\n")
        holder.stdin.close()
        return [await first, await retry]
    finally:
        if holder.poll() is None:
            holder.terminate()
        holder.wait(timeout=30)


def test_a_retry_during_the_first_attempt_is_written_twice_and_the_next_batch_is_dropped(
    system: str, local: LocalSharedStore
) -> None:
    pin, broken_in = BROKEN_IN[system]
    assert pin.version == broken_in, (
        f"the {system} pin moved to {pin.version}: check whether it serialises the idempotent sequence "
        "check and flip this test (module docstring)"
    )
    client = Client(local.bootstrap)

    async def scenario() -> tuple[list[tuple[int, int]], tuple[int, int], int]:
        producer = await client.init_producer_id()
        assert await client.produce(batch(producer, 0)) == (NONE, 0)
        answers = await attempt_and_retry(local, client, batch(producer, BATCH))
        following = await client.produce(batch(producer, 2 * BATCH))
        return answers, following, await client.log_end()

    answers, following, end = asyncio.run(scenario())
    assert sorted(answers) == [(NONE, BATCH), (NONE, 2 * BATCH)], (
        f"{system} {broken_in} writes the retried batch a second time; answers {answers}: if one of them is error "
        f"{DUPLICATE_SEQUENCE_NUMBER} with offset {BATCH} the bug is fixed -- flip this test"
    )
    assert following[0] == DUPLICATE_SEQUENCE_NUMBER, following
    assert end == 3 * BATCH
    written = [int(value) for value in read_values(local.bootstrap, end)]
    assert written == [*range(BATCH), *range(BATCH, 2 * BATCH), *range(BATCH, 2 * BATCH)], (
        "the log holds the first batch and the retried one twice; the next batch was not written"
    )


def read_values(address: str, count: int) -> list[bytes]:
    """The values of partition 0's first ``count`` records (kafka-python, read_uncommitted)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, group_id=None)
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        values: list[bytes] = []

        def read_all() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
            return len(values) >= count

        wait_until(read_all, ANSWER_TIMEOUT, f"{count} records of {TOPIC}-0")
        return values[:count]
    finally:
        consumer.close()
