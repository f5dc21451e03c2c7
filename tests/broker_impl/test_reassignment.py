"""Partition reassignment (KIP-455) and preferred-leader election, the controller's rules driven
directly (:class:`DirectController`: no process, no socket).

The rule every reassignment test leans on: the old replicas stay until every target replica is
in the ISR (``test_the_old_replicas_stay_until_every_new_one_is_in_the_isr`` fails when the
controller drops them early -- mutant ``bench/mutants/14-*``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from broker_impl import wire
from broker_impl.controller import Controller

from .test_controller import TOPIC, DirectController


def rpc(direct: DirectController, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One of the controller's reassignment RPCs (the names ``run`` serves them under)."""
    handlers = {
        "alter_reassignments": direct.controller.reassignments.alter,
        "list_reassignments": direct.controller.reassignments.list_ongoing,
        "elect_leaders": direct.controller.reassignments.elect_leaders,
    }
    reply: dict[str, Any] = asyncio.run(handlers[method](params))
    return reply


def reassign(direct: DirectController, replicas: list[int] | None, partition: int = 0) -> dict[str, Any]:
    """AlterPartitionReassignments of one partition: its answer entry (error, message)."""
    reply = rpc(
        direct,
        "alter_reassignments",
        {"topics": [{"name": TOPIC, "partitions": [{"partition": partition, "replicas": replicas}]}]},
    )
    entry: dict[str, Any] = reply["topics"][0]["partitions"][0]
    return entry


def ongoing(direct: DirectController) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = rpc(direct, "list_reassignments", {"topics": None})["reassignments"]
    return found


def events(direct: DirectController, kind: str) -> list[dict[str, Any]]:
    path = Path(direct.settings["metadata.log.dir"]) / "controller-events.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line for line in lines if line.get("kind") == kind or line.get("type") == kind]


def test_a_reassignment_adds_the_new_replicas_first_and_announces_them_in_a_new_leader_epoch(
    tmp_path: Path,
) -> None:
    direct = DirectController(tmp_path, brokers=4)
    before = dict(direct.state())
    assert reassign(direct, [1, 2, 3])["error"] == wire.NONE
    state = direct.state()
    assert state["replicas"] == [1, 2, 3, 0]  # the target, then the replicas being removed
    assert (state["adding_replicas"], state["removing_replicas"]) == ([3], [0])
    assert (state["leader"], state["isr"]) == (0, [0, 1, 2])  # nothing leaves yet
    assert state["leader_epoch"] == before["leader_epoch"] + 1
    assert ongoing(direct) == [
        {
            "topic": TOPIC,
            "partition": 0,
            "replicas": [1, 2, 3, 0],
            "adding_replicas": [3],
            "removing_replicas": [0],
        }
    ]
    assert direct.persisted() == state  # fsynced with the commit


def test_the_old_replicas_stay_until_every_new_one_is_in_the_isr(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reassign(direct, [1, 2, 3])
    direct.alter_isr([0, 1])  # the ISR changes, 3 still out: nothing completes
    assert direct.state()["replicas"] == [1, 2, 3, 0]
    assert direct.state()["adding_replicas"] == [3]
    direct.alter_isr([0, 1, 3])  # 2 of the target is out now
    assert direct.state()["removing_replicas"] == [0]
    epoch = direct.state()["leader_epoch"]
    direct.alter_isr([0, 1, 2, 3])  # every target replica in sync: complete
    state = direct.state()
    assert (state["replicas"], state["isr"]) == ([1, 2, 3], [1, 2, 3])
    assert (state["adding_replicas"], state["removing_replicas"]) == ([], [])
    assert state["leader"] == 1  # the leader was removed: elected from the target's ISR
    assert state["leader_epoch"] == epoch + 1
    assert ongoing(direct) == []
    assert direct.persisted() == state


def test_a_leader_that_stays_keeps_leading_in_a_new_epoch(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reassign(direct, [0, 1, 3])
    epoch = direct.state()["leader_epoch"]
    direct.alter_isr([0, 1, 2, 3])
    state = direct.state()
    assert (state["replicas"], state["isr"], state["leader"]) == ([0, 1, 3], [0, 1, 3], 0)
    assert state["leader_epoch"] == epoch + 1


def test_a_cancel_reverts_to_the_old_replicas(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reassign(direct, [1, 2, 3])
    direct.alter_isr([0, 1, 3])
    assert reassign(direct, None)["error"] == wire.NONE
    state = direct.state()
    assert (state["replicas"], state["isr"], state["leader"]) == ([1, 2, 0], [0, 1], 0)
    assert (state["adding_replicas"], state["removing_replicas"]) == ([], [])
    assert reassign(direct, None)["error"] == wire.NO_REASSIGNMENT_IN_PROGRESS


def test_a_new_target_replaces_a_running_reassignment(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=5)
    reassign(direct, [1, 2, 3])
    reassign(direct, [0, 1, 4])
    state = direct.state()
    assert (state["adding_replicas"], state["removing_replicas"]) == ([4], [2])
    assert 3 not in state["replicas"]


def test_a_reordering_or_a_shrink_within_the_isr_takes_effect_at_once(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=3)
    reassign(direct, [2, 1, 0])
    assert (direct.state()["replicas"], direct.state()["leader"]) == ([2, 1, 0], 0)
    reassign(direct, [1, 0])
    state = direct.state()
    assert (state["replicas"], state["isr"], state["adding_replicas"]) == ([1, 0], [0, 1], [])


def test_invalid_targets_get_kafkas_errors(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    assert reassign(direct, [1, 9, 3])["error"] == wire.INVALID_REPLICA_ASSIGNMENT
    assert reassign(direct, [1, 1, 3])["error"] == wire.INVALID_REPLICA_ASSIGNMENT
    assert reassign(direct, [])["error"] == wire.INVALID_REPLICA_ASSIGNMENT
    assert reassign(direct, [1, 2, 3], partition=7)["error"] == wire.UNKNOWN_TOPIC_OR_PARTITION
    assert direct.state()["replicas"] == [0, 1, 2]


def test_a_restarted_controller_resumes_a_reassignment(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reassign(direct, [1, 2, 3])
    direct.controller = Controller(direct.settings)  # a restart: everything from metadata.json
    assert ongoing(direct)[0]["adding_replicas"] == [3]
    direct.alter_isr([0, 1, 2, 3])
    assert direct.state()["replicas"] == [1, 2, 3]


def test_a_restarted_controller_completes_a_reassignment_whose_target_is_in_sync(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reassign(direct, [1, 2, 3])
    path = Path(direct.settings["metadata.log.dir"]) / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata["topics"][TOPIC]["partitions"][0]["isr"] = [0, 1, 2, 3]  # the ISR grew, then a crash
    path.write_text(json.dumps(metadata))
    direct.controller = Controller(direct.settings)
    assert (direct.state()["replicas"], direct.state()["leader"]) == ([1, 2, 3], 1)
    assert direct.persisted()["replicas"] == [1, 2, 3]


def test_the_events_record_start_and_completion(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, {"event.log.enable": True}, brokers=4)
    reassign(direct, [1, 2, 3])
    direct.alter_isr([0, 1, 2, 3])
    started, completed = events(direct, "reassignment-started"), events(direct, "reassignment-completed")
    assert [(e["target"], e["adding"], e["removing"]) for e in started] == [([1, 2, 3], [3], [0])]
    assert [(e["replicas"], e["removed"], e["old_leader"], e["leader"]) for e in completed] == [
        ([1, 2, 3], [0], 0, 1)
    ]
    assert completed[0]["metadata_version"] == direct.controller.metadata["version"]


def elect(direct: DirectController, partitions: list[list[Any]] | None) -> list[list[Any]]:
    results: list[list[Any]] = rpc(direct, "elect_leaders", {"type": 0, "partitions": partitions})["results"]
    return results


def test_a_preferred_election_moves_leadership_back_to_the_first_replica(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    assert elect(direct, [[TOPIC, 0]]) == [[TOPIC, 0, wire.ELECTION_NOT_NEEDED, None]]
    direct.expire(0)  # 1 leads; 0 leaves the ISR
    assert direct.state()["leader"] == 1
    assert elect(direct, None)[0][2] == wire.PREFERRED_LEADER_NOT_AVAILABLE
    direct.heartbeat(0)  # alive again, not in sync yet: still refused (bench/mutants/18-*)
    assert elect(direct, [[TOPIC, 0]])[0][2] == wire.PREFERRED_LEADER_NOT_AVAILABLE
    assert direct.state()["leader"] == 1
    direct.alter_isr([0, 1, 2])  # 1 takes 0 back into the ISR
    epoch = direct.state()["leader_epoch"]
    assert elect(direct, [[TOPIC, 0]]) == [[TOPIC, 0, wire.NONE, None]]
    assert (direct.state()["leader"], direct.state()["leader_epoch"]) == (0, epoch + 1)
    assert direct.persisted()["leader"] == 0


def test_unclean_elections_on_request_are_refused(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    assert "error" in rpc(direct, "elect_leaders", {"type": 1, "partitions": None})


def test_an_answer_carries_the_version_to_wait_for(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, brokers=4)
    reply = asyncio.run(
        direct.controller.reassignments.alter(
            {"topics": [{"name": TOPIC, "partitions": [{"partition": 0, "replicas": [3, 2, 1]}]}]}
        )
    )
    assert reply["version"] == direct.controller.metadata["version"]
