"""The structured event log (``broker_impl.events``, ``docs/events.md``).

Three levels: the writer alone, read back with the run record's reader
(``testbed.record.events``, whose own tests are ``tests/testbed/record/test_events.py``): line
format, sequence numbers across restarts, every torn tail a crash can leave, failed writes; the emitters without processes (a partition
replica, the request handlers' fencing answers, the controller's commits); and a real local
cluster in which a leader is killed, so that the events of an ISR shrink, an election from the
ELR, a new leader's HW advance and the old leader's truncation must all appear -- written by
processes that were SIGKILLed, which is the durability the log promises.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from broker_impl import events as events_module
from broker_impl.config import BROKER_KEYS
from broker_impl.controller_events import PublishedPartition, election_how
from broker_impl.events import (
    BROKER_EVENTS_FILE,
    FORMAT,
    SCHEMA_VERSION,
    EventLog,
    open_event_log,
)
from broker_impl.handlers import Handlers
from broker_impl.localcluster import LocalCluster
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.records import iterate_batches
from broker_impl.rules import ReplicationRules
from testbed.record.events import read_event_file, read_events

from .batch_builder import make_batch
from .conftest import ClusterFactory
from .test_controller import TOPIC as CONTROLLER_TOPIC
from .test_controller import DirectController

NEVER = 2**63 - 1
Event = dict[str, Any]


def start(log: EventLog) -> None:
    log.emit("start", format=FORMAT, schema_version=SCHEMA_VERSION, role="broker")


def kinds(path: Path) -> list[str]:
    return [event["kind"] for event in read_events(path)]


def picked(event: Event, names: str) -> tuple[Any, ...]:
    """The values of the space-separated field ``names`` (a KeyError names a missing one)."""
    return tuple(event[name] for name in names.split())


# ---- the writer, read back ------------------------------------------------------------------


def test_one_line_per_event_with_the_header_fields_first(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, 7)
    before = time.time_ns()
    start(log)
    log.emit("hw", topic="t", partition=0, old_hw=1, new_hw=2, isr=[1, 2], pending_isr=None)
    log.emit("bare")
    after = time.time_ns()
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 4, "every event ends with a newline, nothing else is written"
    decoded = [json.loads(line) for line in lines[:-1]]
    assert [list(event)[:4] for event in decoded] == [["ts", "node", "seq", "kind"]] * 3
    assert [picked(event, "node seq kind") for event in decoded] == [
        (7, 0, "start"),
        (7, 1, "hw"),
        (7, 2, "bare"),
    ]
    assert all(before <= event["ts"] <= after for event in decoded), "ts is the wall clock in ns"
    assert picked(decoded[1], "topic old_hw new_hw isr pending_isr") == ("t", 1, 2, [1, 2], None)
    assert read_events(path) == decoded


def test_sequence_numbers_continue_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = EventLog(path, 1)
    start(first)
    first.emit("a")
    first.close()
    second = EventLog(path, 1)
    assert second.next_sequence == 2
    start(second)
    second.emit("b")
    assert [event["seq"] for event in read_events(path)] == [0, 1, 2, 3]
    assert kinds(path) == ["start", "a", "start", "b"]


def _file_of(tmp_path: Path, count: int) -> bytes:
    path = tmp_path / "whole.jsonl"
    log = EventLog(path, 1)
    start(log)
    for index in range(count - 1):
        log.emit("hw", topic="t", partition=0, old_hw=index, new_hw=index + 1)
    log.close()
    return path.read_bytes()


def test_every_torn_tail_reads_as_the_events_before_it(tmp_path: Path) -> None:
    """A power loss may cut the file at any byte: whatever the cut, the reader returns the
    events wholly before it (plus the cut one if only its newline was lost) and names the
    torn line, and a restarted writer continues the sequence after the last intact event."""
    whole = _file_of(tmp_path, 4)
    full_events = read_events(tmp_path / "whole.jsonl")
    line_ends = [index for index, byte in enumerate(whole) if byte == ord("\n")]
    path = tmp_path / "cut.jsonl"
    for cut in range(len(whole) + 1):
        path.write_bytes(whole[:cut])
        result = read_event_file(path)
        partial = whole[:cut].rsplit(b"\n", 1)[-1]  # what follows the last newline
        only_newline_lost = bool(partial) and cut in line_ends
        intact = sum(1 for end in line_ends if end < cut) + only_newline_lost
        assert result.events == full_events[:intact], cut
        assert len(result.torn) == (1 if partial and not only_newline_lost else 0), cut
        assert result.gaps == []
        restarted = EventLog(path, 1)
        start(restarted)
        restarted.close()
        again = read_event_file(path)
        assert [event["seq"] for event in again.events] == list(range(intact + 1)), cut
        assert again.events[-1]["kind"] == "start"
        assert len(again.torn) == len(result.torn), "the torn line stays one line, before the start"


class _Os:
    """The events module's ``os`` with some functions replaced (the real module untouched)."""

    def __init__(self, **replaced: Callable[..., Any]) -> None:
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def test_a_failed_write_loses_its_event_and_leaves_a_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, 1)
    start(log)
    calls = [0]

    def half_then_full_disk(descriptor: int, data: bytes) -> int:
        calls[0] += 1
        if calls[0] == 1:
            return os.write(descriptor, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(events_module, "os", _Os(write=half_then_full_disk))
    log.emit("lost", topic="t")  # half written, then the disk is full
    log.emit("also-lost")
    monkeypatch.undo()
    log.emit("kept")
    assert log.lost == 2
    result = read_event_file(path)
    assert [(event["seq"], event["kind"]) for event in result.events] == [(0, "start"), (3, "kept")]
    assert result.gaps == [(1, 3)]
    assert [torn.line for torn in result.torn] == [2], "the half line is confined to its own line"


def test_disabled_or_relocated_by_the_settings(tmp_path: Path) -> None:
    settings = {key.name: key.default for key in BROKER_KEYS}
    assert settings["event.log.enable"] is True and settings["event.log.dir"] == ""
    default = open_event_log(settings, str(tmp_path / "data"), BROKER_EVENTS_FILE, 3)
    assert default.path == tmp_path / "data" / BROKER_EVENTS_FILE
    relocated = open_event_log({**settings, "event.log.dir": str(tmp_path / "logs")}, "unused", "x.jsonl", 3)
    assert relocated.path == tmp_path / "logs" / "x.jsonl"
    off = open_event_log(
        {**settings, "event.log.enable": False}, str(tmp_path / "off"), BROKER_EVENTS_FILE, 3
    )
    off.emit("hw", topic="t")
    off.close()
    assert not off.enabled and not (tmp_path / "off").exists()


def test_close_fsyncs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(events_module, "os", _Os(fsync=synced.append))
    log = EventLog(tmp_path / "events.jsonl", 1)
    start(log)
    log.emit("a")
    assert synced == [], "events are not fsynced one by one"
    log.close()
    log.emit("after-close")
    assert len(synced) == 1
    assert kinds(tmp_path / "events.jsonl") == ["start", "a"]


# ---- the emitters, without processes ------------------------------------------------------------


def _replica(tmp_path: Path, node: int, log: EventLog, rules: ReplicationRules) -> Partition:
    directory = tmp_path / f"node-{node}" / "t-0"
    return Partition("t", 0, node, directory, 1 << 20, FlushPolicy(NEVER, NEVER), 0, rules, log)


def _append(replica: Partition, count: int) -> None:
    for _ in range(count):
        batch = make_batch([b"x"])
        [(_, header)] = iterate_batches(batch)
        replica.log.append_as_leader(batch, header, replica.leader_epoch)
    replica.maybe_increment_high_watermark()


def _only(found: list[Event], kind: str) -> Event:
    matching = [event for event in found if event["kind"] == kind]
    assert len(matching) == 1, (kind, matching)
    return matching[0]


class _FakeBroker:
    def __init__(self, replica: Partition) -> None:
        self.partitions = {("t", 0): replica}

    def metadata_topics(self) -> dict[str, object]:
        return {"t": {"partitions": [{}]}}


def test_a_replica_records_its_leadership_hw_isr_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "leader.jsonl"
    replica = _replica(tmp_path, 1, EventLog(path, 1), ReplicationRules(min_insync_replicas=2))
    replica.become_leader(3, 0, [1, 2, 3], [1, 2, 3])
    _append(replica, 2)
    replica.record_follower_fetch(2, 2)
    replica.record_follower_fetch(3, 2)  # the last ISR member reaches 2: the HW moves
    replica.pending_isr = [1, 2]
    replica.record_isr_proposal([1, 2], [3], [])
    replica.update_isr(1, [1, 2])
    replica.update_isr(2, [1, 2, 3])
    replica.become_follower(2, 4, 3, [1, 2, 3], [1, 2, 3])
    replica.truncate_to(
        1, reason="leader-epoch", queried_epoch=3, answer_epoch=3, answer_end_offset=1, complete=True
    )

    found = read_events(path)
    expected = "replica-opened become-leader hw isr-proposal isr-change isr-change become-follower truncate"
    assert [event["kind"] for event in found] == expected.split()
    assert all((event["topic"], event["partition"]) == ("t", 0) for event in found)
    assert picked(found[1], "epoch leo hw isr epoch_start previous_role") == (3, 0, 0, [1, 2, 3], 0, "none")
    assert picked(found[2], "role epoch old_hw new_hw leo isr pending_isr min_isr epoch_start") == (
        ("leader", 3, 0, 2, 2, [1, 2, 3], None, 2, 0)
    )
    assert found[3]["proposed"] == [1, 2] and [entry["replica"] for entry in found[3]["removed"]] == [3]
    assert picked(found[4], "old_isr new_isr reason") == ([1, 2, 3], [1, 2], "proposal")
    assert picked(found[5], "new_isr reason") == ([1, 2, 3], "controller")
    assert picked(found[6], "leader epoch previous_role previous_epoch") == (2, 4, "leader", 3)
    assert picked(found[7], "reason target old_leo new_leo old_hw new_hw answer_end_offset complete") == (
        ("leader-epoch", 1, 2, 1, 2, 1, 1, True)
    )


def test_a_follower_records_the_hw_it_learns(tmp_path: Path) -> None:
    leader = _replica(tmp_path, 1, EventLog.disabled(), ReplicationRules())
    leader.become_leader(0, 0, [1], [1])
    _append(leader, 3)
    path = tmp_path / "follower.jsonl"
    follower = _replica(tmp_path, 2, EventLog(path, 2), ReplicationRules())
    follower.become_follower(1, 0, 0, [1, 2], [1, 2])
    follower.log.append_as_follower(leader.log.read(0, 1 << 20, leader.log_end_offset))
    follower.follower_appended(5)
    follower.follower_appended(5)  # nothing moved: no event
    hw = _only(read_events(path), "hw")
    assert picked(hw, "role old_hw new_hw leo leader leader_hw") == ("follower", 0, 3, 3, 1, 5)


@pytest.mark.parametrize(
    ("request_epoch", "error"), [(2, "FENCED_LEADER_EPOCH"), (4, "UNKNOWN_LEADER_EPOCH"), (3, None)]
)
def test_fencing_answers_are_recorded_with_both_epochs(
    tmp_path: Path, request_epoch: int, error: str | None
) -> None:
    path = tmp_path / "events.jsonl"
    replica = _replica(tmp_path, 1, EventLog(path, 1), ReplicationRules())
    replica.become_leader(3, 0, [1, 2], [1, 2])
    handlers = Handlers(_FakeBroker(replica))  # type: ignore[arg-type]
    handlers._lookup("t", 0, request_epoch, api="fetch", replica=2)
    answers = [event for event in read_events(path) if event["kind"] == "fencing-answer"]
    if error is None:
        assert answers == []
        return
    assert len(answers) == 1
    assert picked(answers[0], "api error request_epoch epoch role replica") == (
        ("fetch", error, request_epoch, 3, "leader", 2)
    )


def test_a_follower_refuses_a_produce_as_not_leader(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    replica = _replica(tmp_path, 1, EventLog(path, 1), ReplicationRules())
    replica.become_follower(2, 5, 0, [1, 2], [1, 2])
    Handlers(_FakeBroker(replica))._lookup("t", 0, api="produce")  # type: ignore[arg-type]
    answer = _only(read_events(path), "fencing-answer")
    assert picked(answer, "api error error_code leader") == ("produce", "NOT_LEADER_OR_FOLLOWER", 6, 2)


def test_election_how_is_judged_against_the_published_state() -> None:
    before = PublishedPartition(1, 4, 9, replicas=(1, 2, 3, 4), isr=(1, 2), elr=(3,), last_known_leader=1)
    hows = [election_how(before, leader) for leader in (2, 1, 3, 4, -1)]
    assert hows == ["isr", "isr", "elr", "unclean", "none"]
    emptied = PublishedPartition(1, 4, 9, (1, 2), (), (), 1)
    assert election_how(emptied, 1) == "last-known-leader"


def test_controller_records_isr_changes_and_elections_after_each_commit(tmp_path: Path) -> None:
    cluster = DirectController(tmp_path, {"min.insync.replicas": 2})
    path = tmp_path / "controller-events.jsonl"
    assert cluster.alter_isr([0])["state"]["elr"] == [1, 2]
    cluster.expire(0)
    found = read_events(path)
    expected = "start broker-registered broker-registered broker-registered topic-created isr-change"
    assert [event["kind"] for event in found] == [*expected.split(), "broker-fenced", "election"]
    shrink, fenced, election = found[5:]
    assert picked(shrink, "cause broker topic old_isr new_isr old_elr new_elr") == (
        ("alter-partition", 0, CONTROLLER_TOPIC, [0, 1, 2], [0], [], [1, 2])
    )
    assert fenced["metadata_version"] == election["metadata_version"] == shrink["metadata_version"] + 1
    assert picked(election, "cause broker old_leader new_leader old_epoch new_epoch") == (
        "broker-fenced",
        0,
        0,
        1,
        0,
        1,
    )
    assert picked(election, "old_isr new_isr alive how") == ([0], [1], [1, 2], "elr")
    state = cluster.state(0)
    assert (election["new_elr"], election["partition_epoch"]) == (state["elr"], state["partition_epoch"])


def test_every_metadata_version_carries_an_event_producer_id_blocks_too(tmp_path: Path) -> None:
    """A restart that loaded a lower version than the log recorded is metadata-rollback; a version
    without an event could be lost unseen -- a producer-id block, handed out twice after it."""
    cluster = DirectController(tmp_path, {"min.insync.replicas": 2})
    first = cluster.call("allocate_producer_ids", {"node_id": 2})
    second = cluster.call("allocate_producer_ids", {"node_id": 1})
    found = read_events(tmp_path / "controller-events.jsonl")
    allocated = [event for event in found if event["kind"] == "producer-ids-allocated"]
    assert [picked(event, "broker first count") for event in allocated] == [
        (2, first["first"], first["count"]),
        (1, second["first"], second["count"]),
    ]
    assert second["first"] == first["first"] + first["count"], "blocks overlap"
    versions = {event["metadata_version"] for event in found if event["kind"] != "start"}
    assert versions == set(range(1, cluster.controller.metadata["version"] + 1)), "a version without an event"


# ---- a local cluster: kill a leader -------------------------------------------------------------

TOPIC = "evidence"
SETTINGS = {"min.insync.replicas": 2, "replica.lag.time.max.ms": 1000}


def producer(address: str, acks: int | str) -> KafkaProducer:
    """A kafka-python producer that has its metadata already (so that later sends need no
    other broker than the leader: a frozen broker never answers a metadata request)."""
    made = KafkaProducer(
        bootstrap_servers=address,
        acks=acks,
        enable_idempotence=acks == "all",
        retries=5,
        request_timeout_ms=10000,
        max_block_ms=20000,
    )
    made.partitions_for(TOPIC)
    return made


def send(target: KafkaProducer, values: list[str]) -> list[int]:
    futures = [target.send(TOPIC, value=value.encode(), partition=0) for value in values]
    return [int(future.get(timeout=30).offset) for future in futures]


def produce(address: str, values: list[str]) -> list[int]:
    """Send ``values`` acks=all with a fresh producer; return their offsets."""
    made = producer(address, "all")
    try:
        return send(made, values)
    finally:
        made.close(timeout=5)


def wait_for_event(
    cluster: LocalCluster, node: str, what: str, matches: Callable[[Event], bool], timeout: float = 30
) -> Event:
    def found() -> Event | None:
        return next((event for event in read_events(cluster.events_path(node)) if matches(event)), None)

    event: Event = cluster.wait_for(found, timeout, f"{what} in the event log of {node}")
    return event


def test_killing_a_leader_leaves_the_evidence_of_every_decision(start_cluster: ClusterFactory) -> None:
    """Broker 1 leads; its followers freeze, it shrinks the ISR to itself (the ELR keeps them)
    and takes 5 records acks=1 that only it holds; it is SIGKILLed, a follower is elected from
    the ELR, writes in a new epoch, and broker 1, restarted, truncates its 5 records away."""
    cluster = start_cluster(3, SETTINGS)
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    address = {node: entry["address"] for node, entry in cluster.state["brokers"].items()}
    assert produce(address["1"], [f"a{i}" for i in range(10)]) == list(range(10))

    unreplicated = producer(address["1"], 1)
    cluster.pause("2")
    cluster.pause("3")
    # Once the ISR shrank, the frozen followers' last long-poll fetches were answered (the
    # lag, 1 s, exceeds replica.fetch.wait.max.ms): no response can carry the next records.
    cluster.wait_for(lambda: cluster.partition_state(TOPIC, 0)["isr"] == [1], 20, "the ISR to shrink to [1]")
    try:
        assert send(unreplicated, [f"b{i}" for i in range(5)]) == list(range(10, 15))
    finally:
        unreplicated.close(timeout=0)
    cluster.kill("1")
    cluster.resume("2")
    cluster.resume("3")
    # The ELR holds whichever follower left the ISR once it was below min ISR: both if the shrink
    # was one step, the later one if the leader saw them lag one after the other.
    cluster.wait_for(
        lambda: cluster.partition_state(TOPIC, 0)["leader"] in (2, 3), 30, "2 or 3 to be elected"
    )
    new = cluster.partition_state(TOPIC, 0)["leader"]
    other = 5 - new
    cluster.wait_for(
        lambda: sorted(cluster.partition_state(TOPIC, 0)["isr"]) == [2, 3], 30, f"{other} to rejoin"
    )
    assert produce(f"{address['2']},{address['3']}", ["c0", "c1"]) == [10, 11]

    # The old leader's events, although it was SIGKILLed: its ISR shrink -- in one step, or in two
    # when the leader saw one follower lag before the other (both are legitimate).
    old_leader = read_events(cluster.events_path("1"))
    proposals = [event for event in old_leader if event["kind"] == "isr-proposal"]
    assert proposals and len(proposals) <= 2, proposals
    assert proposals[0]["isr"] == [1, 2, 3] and proposals[-1]["proposed"] == [1]
    removed = [entry for proposal in proposals for entry in proposal["removed"]]
    assert sorted(entry["replica"] for entry in removed) == [2, 3]
    assert all(entry["caught_up_ms_ago"] >= 1000 for entry in removed)
    shrinks = [event for event in old_leader if event["kind"] == "isr-change"]
    assert len(shrinks) == len(proposals), shrinks
    assert shrinks[0]["old_isr"] == [1, 2, 3] and shrinks[-1]["new_isr"] == [1]
    assert all(picked(shrink, "reason role") == ("proposal", "leader") for shrink in shrinks)
    assert all(a["new_isr"] == b["old_isr"] for a, b in itertools.pairwise(shrinks))

    # The controller: the shrink below min ISR put the new leader into the ELR; it was elected from it.
    controller = read_events(cluster.events_path("controller"))
    alone = [event for event in controller if event["kind"] == "isr-change" and event["new_isr"] == [1]]
    assert len(alone) == 1 and new in alone[0]["new_elr"], json.dumps(alone)
    assert set(alone[0]["new_elr"]) <= {2, 3}
    election = next(
        event for event in controller if event["kind"] == "election" and event["new_leader"] == new
    )
    assert picked(election, "old_leader how old_elr") == (1, "elr", alone[0]["new_elr"])
    epoch = election["new_epoch"]
    assert epoch >= 1

    # The new leader: leadership in the new epoch, then the HW over the new records.  (Had
    # broker 1's session expired before 2 and 3 heartbeated again, the partition was offline
    # in between: 2 then led after a leaderless epoch.)
    become = wait_for_event(cluster, str(new), "become-leader", lambda e: e["kind"] == "become-leader")
    previous_role = "follower" if election["old_leader"] == 1 else "none"
    assert picked(become, "epoch leo epoch_start previous_role isr") == (epoch, 10, 10, previous_role, [new])
    advance = wait_for_event(
        cluster,
        str(new),
        "an HW of 12",
        lambda e: e["kind"] == "hw" and e["epoch"] == epoch and e["new_hw"] == 12,
    )
    assert advance["old_hw"] < 12
    assert picked(advance, "role leo min_isr epoch_start") == ("leader", 12, 2, 10)
    assert sorted(advance["isr"]) == [2, 3]

    # The old leader comes back (unclean shutdown) and truncates the 5 records only it held.
    cluster.start("1")
    truncation = wait_for_event(
        cluster, "1", "the truncation", lambda e: e["kind"] == "truncate" and e["new_leo"] < e["old_leo"]
    )
    assert picked(truncation, "reason leader epoch old_leo new_leo") == ("leader-epoch", new, epoch, 15, 10)
    assert picked(truncation, "queried_epoch answer_epoch answer_end_offset complete") == (0, 0, 10, True)
    assert truncation["new_hw"] <= 10
    restarted = read_event_file(cluster.events_path("1"))
    starts = [event for event in restarted.events if event["kind"] == "start"]
    assert [event["clean_shutdown"] for event in starts] == [True, False]
    assert (restarted.torn, restarted.gaps) == ([], []), "a SIGKILL tears no line and loses no event"
    reopened = next(
        e for e in restarted.events if e["kind"] == "replica-opened" and e["seq"] > starts[1]["seq"]
    )
    assert reopened["leo"] == 15

    # A follower's HW, and a clean shutdown that ends with its summary.
    follower = str(other)
    wait_for_event(
        cluster, follower, "a follower HW of 12", lambda e: e["kind"] == "hw" and e["new_hw"] == 12
    )
    cluster.wait_for(lambda: sorted(cluster.partition_state(TOPIC, 0)["isr"]) == [1, 2, 3], 30, "1 to rejoin")
    cluster.stop(follower)
    last = read_events(cluster.events_path(follower))[-1]
    assert last["kind"] == "shutdown"
    assert last["partitions"] == [
        {"topic": TOPIC, "partition": 0, "role": "follower", "epoch": epoch, "leo": 12, "hw": 12}
    ]
