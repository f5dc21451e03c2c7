"""Per-broker metadata (``describe_topic_at``) and the freshest view across brokers.

A broker cut off from the controller keeps answering Metadata from its stale cache: the
scenario waits must not believe it.  The vote is tested on planted answers; the per-broker
request against real broker processes on 127.0.0.x.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_impl.localcluster import LocalCluster
from testbed.cluster import kafka_admin
from testbed.cluster.kafka_admin import BrokerView, ClusterUnavailable, PartitionInfo, describe_topic_at

FRESH = PartitionInfo(0, leader=2, leader_epoch=4, replicas=(1, 2, 3), isr=(1, 2))
ZOMBIE = PartitionInfo(0, leader=1, leader_epoch=3, replicas=(1, 2, 3), isr=(1, 2, 3))
SAME_EPOCH_STALE_ISR = PartitionInfo(0, leader=2, leader_epoch=4, replicas=(1, 2, 3), isr=(1, 2, 3))


ADDRESSES = {1: "a:1", 2: "b:1", 3: "c:1"}


def plant(
    monkeypatch: pytest.MonkeyPatch,
    answers: dict[str, PartitionInfo | None],
    addresses: dict[str, dict[int, str]] | None = None,
) -> None:
    """Each broker's planted answer (None: it does not answer) and, optionally, the brokers'
    addresses as each one advertises them (default: broker id N is the N-th of a:1,b:1,c:1)."""

    def fake(address: str, topic: str, timeout: float = 5.0) -> BrokerView:
        answer = answers[address]
        if answer is None:
            raise ClusterUnavailable(f"{address}: down")
        return BrokerView((answer,), (addresses or {}).get(address, ADDRESSES))

    monkeypatch.setattr(kafka_admin, "metadata_at", fake)


def test_a_stale_epoch_loses_even_when_it_is_the_majority(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, {"a:1": ZOMBIE, "b:1": ZOMBIE, "c:1": FRESH})
    assert kafka_admin.freshest_partition_info("a:1,b:1,c:1", "t", 0) == FRESH


def test_within_one_epoch_the_majority_outvotes_a_stale_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, {"a:1": SAME_EPOCH_STALE_ISR, "b:1": FRESH, "c:1": FRESH})
    assert kafka_admin.freshest_partition_info("a:1,b:1,c:1", "t", 0) == FRESH


def test_silent_brokers_are_skipped_and_an_offline_partition_has_no_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leaderless = PartitionInfo(0, leader=-1, leader_epoch=9, replicas=(1, 2, 3), isr=(2,))
    plant(monkeypatch, {"a:1": None, "b:1": FRESH, "c:1": FRESH})
    assert kafka_admin.freshest_partition_info("a:1,b:1,c:1", "t", 0) == FRESH
    plant(monkeypatch, {"a:1": None, "b:1": leaderless})
    assert kafka_admin.freshest_partition_info("a:1,b:1", "t", 0) is None
    # Seen in kip320 under load: the last ISR replica died, the controller took the partition
    # offline in a newer epoch, and only the zombie still named a leader, in its old epoch.
    plant(monkeypatch, {"a:1": None, "b:1": leaderless, "c:1": FRESH})
    assert kafka_admin.freshest_partition_info("a:1,b:1,c:1", "t", 0) is None
    # A leaderless answer of an older epoch is just stale.
    old = PartitionInfo(0, leader=-1, leader_epoch=1, replicas=(1, 2, 3), isr=())
    plant(monkeypatch, {"a:1": old, "b:1": FRESH})
    assert kafka_admin.freshest_partition_info("a:1,b:1", "t", 0) == FRESH


def test_the_freshest_view_keeps_an_offline_partition_s_leaderless_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a ``deposed`` wait reads: the newest epoch's view, leaderless or not; None only when
    nobody answers."""
    leaderless = PartitionInfo(0, leader=-1, leader_epoch=9, replicas=(1, 2, 3), isr=(2,))
    plant(monkeypatch, {"a:1": None, "b:1": leaderless, "c:1": FRESH})
    assert kafka_admin.freshest_view("a:1,b:1,c:1", "t", 0) == (leaderless, None)
    plant(monkeypatch, {"a:1": None, "b:1": FRESH})
    assert kafka_admin.freshest_view("a:1,b:1", "t", 0) == (FRESH, "b:1")
    plant(monkeypatch, {"a:1": None, "b:1": None})
    assert kafka_admin.freshest_view("a:1,b:1", "t", 0) is None


def test_the_freshest_leader_comes_with_its_address_as_the_winning_answers_name_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The zombie a:1 names its stale leader (broker 1) and knows broker 2 by an old address; the
    # address of the fresh leader is the one the fresh answers give.
    plant(
        monkeypatch,
        {"a:1": ZOMBIE, "b:1": FRESH, "c:1": FRESH},
        {"a:1": {1: "a:1", 2: "old:9"}},
    )
    assert kafka_admin.freshest_leader("a:1,b:1,c:1", "t", 0) == (FRESH, "b:1")
    plant(monkeypatch, {"a:1": FRESH}, {"a:1": {1: "a:1"}})
    assert kafka_admin.freshest_leader("a:1", "t", 0) == (FRESH, None)
    plant(monkeypatch, {"a:1": None, "b:1": None})
    assert kafka_admin.freshest_leader("a:1,b:1", "t", 0) is None


def test_describe_topic_at_asks_one_real_broker(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    try:
        cluster.up(2)
        cluster.create_topic("t", 2, 2)
        addresses = cluster.bootstrap().split(",")

        def everyone_knows() -> bool:
            try:
                return all(len(describe_topic_at(address, "t")) == 2 for address in addresses)
            except ClusterUnavailable:
                return False

        cluster.wait_for(everyone_knows, 15, "both brokers to know topic t")
        infos = describe_topic_at(addresses[0], "t")
        assert [info.partition for info in infos] == [0, 1]
        assert sorted(kafka_admin.metadata_at(addresses[0], "t").addresses.values()) == sorted(addresses)
        leader = kafka_admin.freshest_leader(cluster.bootstrap(), "t", 1)
        assert leader is not None and leader[1] == addresses[leader[0].leader - 1]
        assert all(set(info.isr) == {1, 2} and info.leader_epoch == 0 for info in infos)
        with pytest.raises(ClusterUnavailable, match="error 3"):
            describe_topic_at(addresses[0], "no-such-topic")
    finally:
        cluster.down()
    with pytest.raises(ClusterUnavailable, match=addresses[0]):
        describe_topic_at(addresses[0], "t", timeout=1.0)
