"""A run refuses a topic it did not shape (auto-created, or left by an earlier run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run import runner
from testbed.cluster.kafka_admin import ClusterUnavailable, PartitionInfo


def planted(answers: list[list[PartitionInfo] | None]) -> object:
    def describe(bootstrap: str, topic: str) -> list[PartitionInfo]:
        answer = answers.pop(0)
        if answer is None:
            raise ClusterUnavailable("describe tidemark: error 3")  # a broker not told yet
        return answer

    return describe


def info(partition: int, replicas: tuple[int, ...]) -> PartitionInfo:
    return PartitionInfo(partition, replicas[0], 0, replicas, replicas)


def test_a_topic_of_the_requested_shape_passes_after_a_broker_caught_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "describe_topic", planted([None, [info(0, (1, 2, 3)), info(1, (2, 3, 1))]]))
    monkeypatch.setattr(runner, "topic_end_offsets", lambda bootstrap, topic, partitions: {0: 0, 1: 0})
    runner._check_topic_layout("b:9092", "tidemark", 2, 3)


def test_an_auto_created_topic_with_one_replica_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "describe_topic", planted([[info(0, (1,))]]))
    with pytest.raises(ClusterUnavailable, match="existed before the harness created it"):
        runner._check_topic_layout("b:9092", "tidemark", 1, 3)


def test_a_topic_of_the_right_shape_that_holds_records_is_refused(tmp_path: Path) -> None:
    """An earlier run's records would be read as this run's (false duplicates, unexpected, G1a):
    a real local cluster, one topic written to and one fresh."""
    from kafka import KafkaProducer

    from broker_impl.localcluster import LocalCluster

    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.up(1, {})
        for topic in ("used", "fresh"):
            cluster.create_topic(topic, 2, 1)
            cluster.wait_for_leaders(topic)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all")
        producer.send("used", b"left over", partition=1).get(timeout=30)
        producer.close()
        runner._check_topic_layout(cluster.bootstrap(), "fresh", 2, 1)
        with pytest.raises(
            ClusterUnavailable, match=r"already holds records \(partition -> end offset \{1: 1\}\)"
        ):
            runner._check_topic_layout(cluster.bootstrap(), "used", 2, 1)
    finally:
        cluster.down()
