"""A known upstream bug, pinned: tansu 0.6.0 cannot answer a ``read_committed`` ListOffsets on
PostgreSQL 15.

Asked for a partition's end offset with ``isolation_level=1`` (read_committed: the last stable
offset), tansu 0.6.0's PostgreSQL engine runs a query with a subquery in FROM that has no alias,
which PostgreSQL 15 rejects (``subquery in FROM must have an alias``, SQLSTATE 42601; PostgreSQL 16
accepts it).  The drain asks exactly that question for its end offset, so under read_committed it
never gets one and every run against tansu comes out unknown -- which is why the tansu scenarios
and campaign read ``read_uncommitted`` (without transactions both levels see the same records).
With ``isolation_level=0`` (read_uncommitted: the high watermark) tansu answers correctly.

This test sends both questions to a real tansu broker (the pinned binary, as local processes on
the host's PostgreSQL 15, like ``test_tansu_local.py``) and asserts the bug as it is: under
read_committed tansu logs PostgreSQL's error and closes the connection without an answer (no
offset, no error code), PostgreSQL logs the rejected statement; under read_uncommitted, before
and after, the right end offset.  It pins *known broken* behaviour: when :data:`TANSU_PIN` moves to a tansu that
fixes the query, the first assertion fails on purpose -- flip this test to expect the right
answer under both levels, and let the tansu scenarios and campaign read ``read_committed`` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_impl import wire
from testbed.cluster import postgres
from testbed.cluster.kafka_admin import create_topic, wait_until
from testbed.cluster.tansu_image import TANSU_PIN
from tests.testbed.cluster.shared_store_processes import LocalSharedStore

pytestmark = pytest.mark.third_party

BROKEN_IN = "0.6.0"
"""The tansu version this test pins the bug of (see the module docstring before changing it)."""
TOPIC = "offsets"
RECORDS = 25
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
POSTGRESQL_ERROR = "subquery in FROM must have an alias"
LATEST = -1
"""ListOffsets' timestamp that asks for the end of the log."""
ANSWER_TIMEOUT = 10.0


@pytest.fixture
def local(tansu_binary: Path, postgres_bin_dir: Path) -> Iterator[LocalSharedStore]:
    with LocalSharedStore(tansu_binary, postgres_bin_dir, brokers=1) as cluster:
        create_topic(cluster.bootstrap, TOPIC, 1, 1)
        yield cluster


def produce(address: str, count: int) -> list[int]:
    """Acknowledged offsets of ``count`` sends to partition 0 (kafka-python, acks=all)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=address, acks="all", request_timeout_ms=15000)
    try:
        futures = [producer.send(TOPIC, value=str(n).encode(), partition=0) for n in range(count)]
        return [future.get(timeout=30).offset for future in futures]
    finally:
        producer.close(timeout=10)


def list_offsets(address: str, isolation_level: int) -> Any:
    """One ListOffsets for partition 0's end at ``isolation_level``, at the highest version both
    tansu and the wire codec speak (as a client negotiates it); the partition's answer.

    Raises ConnectionError when tansu closes the connection without an answer (TimeoutError when
    none comes within :data:`ANSWER_TIMEOUT`).
    """
    host, _, port = address.rpartition(":")
    versions, offsets = wire.APIS[18], wire.APIS[2]

    async def ask() -> Any:
        connection = wire.KafkaConnection(host, int(port), client_id="tidemark-pin", timeout=ANSWER_TIMEOUT)
        try:
            advertised = await connection.call(versions.request(version=0), versions.response, 0)
            (tansu,) = [entry for entry in advertised.api_keys if entry.api_key == offsets.key]
            version = min(tansu.max_version, offsets.max_version)
            assert version >= 2, f"ListOffsets v{version} has no isolation level"
            partition = wire.nested(offsets.request, "ListOffsetsTopic", "ListOffsetsPartition")(
                partition_index=0, current_leader_epoch=-1, timestamp=LATEST, max_num_offsets=1
            )
            request = offsets.request(
                version=version,
                replica_id=-1,
                isolation_level=isolation_level,
                timeout_ms=int(ANSWER_TIMEOUT * 1000),
                topics=[wire.nested(offsets.request, "ListOffsetsTopic")(name=TOPIC, partitions=[partition])],
            )
            return await connection.call(request, offsets.response, version)
        finally:
            connection.close()

    response = asyncio.run(ask())
    ((answer,),) = [topic.partitions for topic in response.topics if topic.name == TOPIC]
    return answer


def test_read_committed_list_offsets_fails_on_postgresql_15_and_read_uncommitted_answers(
    local: LocalSharedStore,
) -> None:
    assert TANSU_PIN.version == BROKEN_IN, (
        f"TANSU_PIN moved to {TANSU_PIN.version}: check whether it fixes the read_committed ListOffsets "
        "query and flip this test (module docstring)"
    )
    assert postgres.PG_MAJOR == "15", "the bug is PostgreSQL 15's refusal; 16 accepts the query"
    acked = produce(local.bootstrap, RECORDS)
    assert acked == list(range(RECORDS))

    uncommitted = list_offsets(local.bootstrap, READ_UNCOMMITTED)
    assert (uncommitted.error_code, uncommitted.offset) == (0, RECORDS), (
        "the high watermark: one past the last"
    )

    try:
        committed = list_offsets(local.bootstrap, READ_COMMITTED)
    except ConnectionError as error:  # 0.6.0: the query fails, tansu drops the connection unanswered
        assert "0 bytes read" in str(error), error
    else:
        pytest.fail(
            f"tansu {TANSU_PIN.version} answered a read_committed ListOffsets ({committed}): if the offset is "
            f"{RECORDS} with error 0 the bug is fixed -- flip this test (module docstring)"
        )

    def logged() -> bool:
        return POSTGRESQL_ERROR in local.log_tail("postgresql", 200) and (
            POSTGRESQL_ERROR in local.log_tail("broker-0", 200) or "42601" in local.log_tail("broker-0", 200)
        )

    wait_until(logged, 10, f"PostgreSQL's {POSTGRESQL_ERROR!r} in the PostgreSQL and tansu logs")
    again = list_offsets(local.bootstrap, READ_UNCOMMITTED)
    assert (again.error_code, again.offset) == (0, RECORDS), "the failed query broke nothing else"
