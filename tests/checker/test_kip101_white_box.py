"""KIP-101's loss on real broker processes, found by the white-box checks in the brokers' own logs.

The choreography of ``tests/broker_impl/test_kip101.py`` scenario 1 (a follower holding acked m2
with a lagging HW restarts; the leader, frozen, is fenced; the follower leads), on a local
cluster, then a run directory made the way the harness makes one: the client ops in
``history.jsonl`` (the two acknowledged sends and a final drain read by a real consumer), the
brokers stopped cleanly, each replica dumped, and each node's event log collected into
``nodes/<node>/``.  The checker must find, from the event logs alone, the follower's truncation
of the committed m2 (truncated-committed) and its election without it (incomplete-leader) with
``truncation.mode=high-watermark`` -- and nothing at all with ``leader-epoch``, where the same
choreography loses nothing.  The history's own verdict agrees: m2 is a lost write in the first
mode only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from broker_impl.dump import dump
from broker_impl.localcluster import LocalCluster
from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    INVARIANT_CHECKS,
    LOST_WRITE,
    TRUNCATED_COMMITTED,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op
from testbed.record.rundir import RunDir
from tests.broker_impl.test_kip101 import (
    FOLLOWER,
    LEADER,
    SETTINGS,
    TOPIC,
    checkpointed_high_watermark,
    replica,
    restart_and_wait_registered,
    wait_for_full_isr,
    wait_for_leader,
)
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture


class _History:
    """The client ops of the choreography, numbered as the recorder numbers them."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, process: int, type_: str, f: str, value: Any) -> None:
        self.ops.append(Op(len(self.ops), len(self.ops) * 1000, process, type_, f, value))  # type: ignore[arg-type]


def _send(cluster: LocalCluster, history: _History, value: int) -> int:
    """One acks=all send, recorded as the workload records it; returns its offset."""
    key = f"k{value}"
    sent: dict[str, Any] = {"partition": 0, "key": key, "value": value}
    history.add(value, "invoke", "send", sent)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap(), acks="all", retries=5, request_timeout_ms=10000
    )
    try:
        offset = int(
            producer.send(TOPIC, key=key.encode(), value=str(value).encode(), partition=0).get(30).offset
        )
    finally:
        producer.close(timeout=5)
    history.add(value, "ok", "send", {**sent, "offset": offset})
    return offset


def _drain(cluster: LocalCluster, history: _History) -> None:
    """The final read of partition 0 up to its end, by a fresh consumer, as one complete chunk."""
    history.add(99, "invoke", "drain", {"partition": 0})
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False)
    try:
        part = TopicPartition(TOPIC, 0)
        consumer.assign([part])
        consumer.seek_to_beginning(part)
        end = consumer.end_offsets([part])[part]
        records: list[dict[str, Any]] = []
        while consumer.position(part) < end:
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [{"offset": r.offset, "key": r.key.decode(), "value": int(r.value)} for r in batch]
    finally:
        consumer.close()
    history.add(99, "ok", "drain", {"partition": 0, "records": records, "end_offset": end, "complete": True})


def _collect(cluster: LocalCluster, history: _History, run_dir: Path, mode: str) -> None:
    """Stop the brokers cleanly, then store what the harness stores (see the module docstring)."""
    for node in cluster.state["brokers"]:
        cluster.stop(node, controlled=False)  # as the harness ends a run
    cluster.down()
    directory = RunDir(run_dir)
    run_dir.mkdir(parents=True)
    with HistoryWriter(directory.history_jsonl) as writer:
        for op in history.ops:
            writer.append(op)
    nodes = [f"n{node}" for node in cluster.state["brokers"]]
    for node in cluster.state["brokers"]:
        target = directory.node_dir(f"n{node}")
        target.mkdir(parents=True)
        with directory.dump(f"n{node}").open("w", encoding="utf-8") as output:
            dump(Path(cluster.state["brokers"][node]["data"]), output)
        shutil.copy(cluster.events_path(node), directory.broker_events(f"n{node}"))
    (directory.node_dir("controller")).mkdir()
    shutil.copy(
        cluster.events_path("controller"),
        directory.node_dir("controller") / cluster.events_path("controller").name,
    )
    config = {
        key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in SETTINGS.items()
    }
    spec = {
        "schema_version": 1,
        "topic": TOPIC,
        "workload": {"name": "queue", "partitions": 1, "acks": "all"},
        "broker_config": {**config, "truncation.mode": mode, "event.log.enable": "true", "acks": "all"},
        "nemesis": {"faults": ["kill", "pause"]},
        "scenario": "kip101-loss",
        "nodes": nodes,
        "replica_evidence": "dumps",
    }
    directory.spec_file.write_text(json.dumps(spec), encoding="utf-8")


def kip101_run(start_cluster: ClusterFactory, run_dir: Path, mode: str) -> None:  # noqa: F811 -- the fixture's type
    """Scenario 1 of KIP-101 on a local cluster in ``mode``, stored as a run in ``run_dir``."""
    cluster = start_cluster(2, {**SETTINGS, "truncation.mode": mode})
    cluster.create_topic(TOPIC, partitions=1, replication_factor=2)
    history = _History()
    assert _send(cluster, history, 1) == 0
    cluster.wait_for(
        lambda: checkpointed_high_watermark(cluster, FOLLOWER) >= 1, 10, "follower HW checkpoint 1"
    )
    assert _send(cluster, history, 2) == 1
    cluster.pause(LEADER)
    cluster.kill(FOLLOWER)
    assert checkpointed_high_watermark(cluster, FOLLOWER) == 1, "the follower's HW must lag (fetch wait 2 s)"
    restart_and_wait_registered(cluster, FOLLOWER)
    wait_for_leader(cluster, FOLLOWER)
    cluster.kill(LEADER)
    restart_and_wait_registered(cluster, LEADER)
    wait_for_full_isr(cluster)
    cluster.wait_for(
        lambda: replica(cluster, LEADER) == replica(cluster, FOLLOWER), 20, "replicas to converge"
    )
    _drain(cluster, history)
    _collect(cluster, history, run_dir, mode)


def check(run_dir: Path) -> dict[str, Any]:
    return check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]


@pytest.mark.parametrize("mode", ["high-watermark", "leader-epoch"])
def test_kip101_loss_is_in_the_brokers_own_records(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture
    tmp_path: Path,
    mode: str,
) -> None:
    kip101_run(start_cluster, tmp_path / "run", mode)
    result = check(tmp_path / "run")
    found = {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}
    assert result["incomplete"] == [] and result["not_applicable"] == {}, "complete white-box evidence"
    if mode == "leader-epoch":
        assert found == {} and result["valid"] is True
        return
    assert found[LOST_WRITE] == 1, "the client history shows the loss"
    assert found[TRUNCATED_COMMITTED] >= 1 and found[INCOMPLETE_LEADER] == 1, found
    assert set(found) - {LOST_WRITE} <= set(INVARIANT_CHECKS) | {HW_REGRESSION}
    assert all(result["anomalies"][name]["rule"] == "truncation.mode=high-watermark" for name in found)
    (cut, *_) = result["anomalies"][TRUNCATED_COMMITTED]["examples"]
    truncate, exposed = cut["truncate"], cut["exposed_by"]
    # The follower (n2) cut m2 at offset 1, which the leader (n1) had exposed as committed (HW 2).
    assert (cut["node"], truncate["reason"], truncate["new_leo"]) == ("n2", "high-watermark", 1)
    assert (exposed["node"], exposed["kind"], exposed["new_hw"]) == (1, "hw", 2) and exposed["ts"] < truncate[
        "ts"
    ]
    (election,) = result["anomalies"][INCOMPLETE_LEADER]["examples"]
    assert (election["node"], election["leo"], election["exposed_hw"]) == ("n2", 1, 2)
