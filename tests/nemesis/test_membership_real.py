"""``decommission``, ``recommission`` and ``elect-preferred`` on real brokers (Docker), under the
queue workload's load.

Four brokers, the workload's topic at replication factor 3.  The leader of partition 0 is
decommissioned: each of its replicas is reassigned to the broker outside the set, in its place
(the newcomer first where the leader was), through kafka-python's admin client; the scenario waits
until another broker leads partition 0, then recommissions it -- the original replica sets back,
the moves awaited, the preferred leaders elected -- and waits until it is in the ISR again.

Read off the run directory: the verdict is valid (nothing acknowledged was lost, nothing read
twice or out of order), the controller recorded a reassignment of partition 0 started and
completed each way with the removed replicas leaving only at completion (after every target
replica joined the ISR), and the broker that replaced the leader held every acknowledged record of
partition 0 when the run ended (its dump).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import parse_scenario
from testbed.record.rundir import RunDir

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCENARIO: dict[str, Any] = {
    "name": "decommission-the-leader-under-load",
    "node_count": 4,
    "step": [
        {"wait": "caught-up"},
        {"bind": {"L": "leader-of:0"}},
        {"fault": "decommission", "node": "L"},
        {"wait": "leader-is-not", "node": "L", "partition": 0, "timeout": 60},
        {"fault": "recommission", "node": "L"},
        {"wait": "in-isr", "node": "L", "partition": 0, "timeout": 60},
    ],
}


def controller_events(run: Path) -> list[dict[str, Any]]:
    [path] = sorted((run / "nodes").glob("*/controller-events.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_decommissioning_the_leader_under_load_loses_nothing(image: str, tmp_path: Path) -> None:
    spec = TestSpec(name="decommission").with_scenario(parse_scenario(SCENARIO, "decommission scenario"))
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.results["valid"] is True, json.dumps(outcome.results["anomalies"])[:2000]
    lines = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    history = [op for op in map(json.loads, lines) if "f" in op]
    assert [op["type"] for op in history if op["f"] == "decommission"] == ["invoke", "ok"]
    assert [op["type"] for op in history if op["f"] == "recommission"] == ["invoke", "ok"]
    events = controller_events(outcome.run_dir)
    started = [e for e in events if e["kind"] == "reassignment-started" and e["partition"] == 0]
    completed = [e for e in events if e["kind"] == "reassignment-completed" and e["partition"] == 0]
    assert len(started) >= 2 and len(completed) >= 2, (started, completed)
    away, back = started[0], started[-1]
    assert away["adding"] and away["removing"] and set(back["target"]) == set(away["replicas"])
    for done in completed:
        # The ISR change that completed it had every target replica in it (Kafka's rule).
        assert sorted(done["isr"]) == sorted(done["replicas"]), done
    acked = {
        str(op["value"]["value"])
        for op in history
        if op["f"] == "send" and op["type"] == "ok" and op["value"]["partition"] == 0
    }
    assert acked, "the workload acknowledged records of partition 0"
    [returned] = [
        op["value"]["nodes"][0] for op in history if op["f"] == "decommission" and op["type"] == "ok"
    ]
    # The decommissioned broker's replica was deleted and re-created empty by the move back: what it
    # holds now it fetched as an adding replica, and it must hold every acknowledged record.
    dump = RunDir(outcome.run_dir).dump(returned)
    held = {
        line["value"]
        for line in map(json.loads, dump.read_text().splitlines())
        if line.get("type") == "record" and line["partition"] == 0 and line["topic"] == spec.topic
    }
    assert acked <= held, sorted(acked - held)[:10]


ELECTION: dict[str, Any] = {
    "name": "elect-the-preferred-leader-under-load",
    "step": [
        {"wait": "caught-up"},
        {"bind": {"L": "leader-of:0"}},  # at creation the leader is the preferred (first) replica
        {"fault": "kill", "node": "L"},
        {"wait": "leader-is-not", "node": "L", "partition": 0, "timeout": 30},
        {"fault": "start", "node": "L"},
        {"wait": "in-isr", "node": "L", "partition": 0, "timeout": 60},
        {"fault": "elect-preferred", "node": "L"},
        {"wait": "leader-is", "node": "L", "partition": 0, "timeout": 30},
    ],
}


def test_a_preferred_leader_election_under_load_hands_the_leadership_back_and_loses_nothing(
    image: str, tmp_path: Path
) -> None:
    """The leader is killed, comes back and catches up; ``elect-preferred`` then moves the
    leadership back to it from a live leader, as Kafka's auto leader rebalance does.  Read off the
    run: valid, the op ok and its window in the history, the controller's ``preferred-election``
    of partition 0 to L from the leader that had it."""
    spec = TestSpec(name="elect-preferred").with_scenario(parse_scenario(ELECTION, "election scenario"))
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.results["valid"] is True, json.dumps(outcome.results["anomalies"])[:2000]
    lines = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    history = [op for op in map(json.loads, lines) if "f" in op]
    elections = [op for op in history if op["f"] == "elect-preferred"]
    assert [op["type"] for op in elections] == ["invoke", "ok"]
    [preferred] = elections[0]["value"]["nodes"]
    node_id = int(preferred.lstrip("n"))
    moved = [
        e
        for e in controller_events(outcome.run_dir)
        if e["kind"] == "preferred-election" and e["partition"] == 0
    ]
    assert len(moved) == 1 and moved[0]["new_leader"] == node_id != moved[0]["old_leader"], moved
