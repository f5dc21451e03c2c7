"""The pure parts of the group clients: commit outcomes, librdkafka's generation, and the events
their callbacks note.

A commit is ``fail`` only when the coordinator (or the client, before sending) certainly refused
it; a timeout, a lost connection or an answer that comes after the commit may have been written
is ``info``.  Both client libraries' error shapes go through the same rule.
"""

from __future__ import annotations

import struct
import threading

import pytest
from confluent_kafka import KafkaError, TopicPartition
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka import errors as kafka_errors

from workloads.group_confluent import _error_outcome, _partitions_outcome
from workloads.group_events import (
    Assigned,
    NotedEvents,
    Revoked,
    commit_outcome,
    librdkafka_generation,
    max_poll_interval_ms,
    partitions_of,
)
from workloads.group_kafka_python import _outcome


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (22, "fail"),  # ILLEGAL_GENERATION
        (25, "fail"),  # UNKNOWN_MEMBER_ID
        (27, "fail"),  # REBALANCE_IN_PROGRESS
        (14, "fail"),  # COORDINATOR_LOAD_IN_PROGRESS: refused before anything was written
        (7, "info"),  # REQUEST_TIMED_OUT: written, the HW may still pass it
        (16, "info"),  # NOT_COORDINATOR: leadership may have moved after the append
        (15, "info"),  # COORDINATOR_NOT_AVAILABLE
        (-185, "info"),  # librdkafka _TIMED_OUT
        (-195, "info"),  # librdkafka _TRANSPORT
    ],
)
def test_commit_outcome_is_fail_only_for_certain_refusals(code: int, expected: str) -> None:
    assert commit_outcome(code, None) == expected
    assert _error_outcome(KafkaError(code))[0] == expected


def test_no_error_is_ok() -> None:
    assert commit_outcome(None, None) == "ok"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (kafka_errors.CommitFailedError("not part of an active group"), "fail"),
        (kafka_errors.RebalanceInProgressError(), "fail"),
        (kafka_errors.IllegalGenerationError(), "fail"),
        (kafka_errors.UnknownMemberIdError(), "fail"),
        (kafka_errors.KafkaTimeoutError(), "info"),
        (kafka_errors.RequestTimedOutError(), "info"),
        (kafka_errors.NotCoordinatorError(), "info"),
        (kafka_errors.KafkaConnectionError("reset"), "info"),
        (RuntimeError("anything else"), "info"),
    ],
)
def test_kafka_python_exceptions_map_onto_the_same_rule(error: BaseException, expected: str) -> None:
    outcome, text = _outcome(error)
    assert outcome == expected
    assert type(error).__name__ in text


def test_a_per_partition_answer_is_the_worst_of_its_partitions() -> None:
    class Partition:
        def __init__(self, error: KafkaError | None) -> None:
            self.error = error

    assert _partitions_outcome([Partition(None), Partition(None)]) == ("ok", None)
    outcome, text = _partitions_outcome([Partition(None), Partition(KafkaError(22))])
    assert outcome == "fail" and text is not None and "ILLEGAL_GENERATION" in text
    assert _partitions_outcome([Partition(KafkaError(22)), Partition(KafkaError(7))])[0] == "info"


def metadata(generation: int, group: bytes, member: bytes) -> bytes:
    return b"CGMDv2:" + struct.pack("=i", generation) + group + b"\0" + member + b"\0" + b"\1"


def test_librdkafka_metadata_gives_the_generation_and_member() -> None:
    assert librdkafka_generation(metadata(7, b"g", b"rdkafka-1")) == (7, "rdkafka-1")
    assert librdkafka_generation(metadata(-1, b"g", b"")) == (None, None)  # not joined yet
    assert librdkafka_generation(b"CGMDv9:....") == (None, None)  # another format: unknown
    assert librdkafka_generation(b"") == (None, None)


def test_librdkafka_metadata_of_a_real_consumer_parses() -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"group.id": "g-parse", "bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        assert librdkafka_generation(bytes(consumer.consumer_group_metadata())) == (None, None)
    finally:
        consumer.close()


def test_the_poll_interval_outlasts_a_commit_and_never_drops_below_the_session() -> None:
    assert max_poll_interval_ms(1.0) == 10000
    assert max_poll_interval_ms(10.0) == 22000


def test_both_libraries_topic_partitions_become_one_sorted_assignment() -> None:
    assert partitions_of([TopicPartition("queue", 2), TopicPartition("queue", 0)]) == (0, 2)
    kafka_python = [KafkaPythonTopicPartition("queue", 1), KafkaPythonTopicPartition("queue", 0)]
    assert partitions_of(kafka_python) == (0, 1)
    assert partitions_of([]) == ()


def test_noted_events_are_taken_once_in_order_whichever_thread_noted_them() -> None:
    events = NotedEvents()
    events.note(Revoked(()))
    noting = [threading.Thread(target=events.note, args=(Assigned((n,), n, None),)) for n in range(50)]
    for thread in noting:
        thread.start()
    for thread in noting:
        thread.join()
    taken = events.take()
    assert taken[0] == Revoked(())
    assigned = sorted(step.partitions for step in taken[1:] if isinstance(step, Assigned))
    assert len(taken) == 51 and assigned == [(n,) for n in range(50)]
    assert events.take() == []
