"""``controller-power-loss`` with every broker powered off (Docker): the whole cluster and its
controller down at once, their unsynced writes dropped, twice, as the nightly hunt's
``whole-cluster-crash`` draws it -- the brokers started first to no controller, then the controller
first to no brokers.

A scenario in the node image with ``flush.messages=1`` (so a power loss is safe by Kafka's rules).
Read off the run directory: the verdict is valid (nothing acknowledged lost, replicas identical),
the history holds the controller's kills and starts on the controller node, and the controller's
event log shows three process ``start``s, each restart loading the last version the process before
published, and every election's leader epoch above every epoch it had published for the partition
before -- at topic creation or by an earlier process --, with elections after a restart: its
metadata came back from its disk, so no epoch is reused (a reused epoch lets a stale leader's
fetchers and clients be believed).  Planted: with ``20-controller-skips-the-directory-fsync``
applied, each restart loads the version before the last (a plain kill could not show it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import parse_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BROKERS = ["n1", "n2", "n3"]


def outage(controller_first: bool) -> list[dict[str, Any]]:
    """Every broker and the controller powered off, then all started -- the controller before the
    brokers or after them -- and every replica back in partition 0's ISR."""
    starts: list[dict[str, Any]] = [
        {"fault": "start", "nodes": BROKERS},
        {"sleep": 2.0, "why": "the first to come back finds the others down"},
    ]
    starts.insert(0 if controller_first else len(starts), {"fault": "controller-start"})
    return [
        {"fault": "power-loss", "nodes": BROKERS},
        {"fault": "controller-power-loss"},
        {"sleep": 1.0, "why": "the whole cluster is down"},
        *starts,
        *({"wait": "answers", "node": node, "timeout": 30} for node in BROKERS),
        *({"wait": "in-isr", "node": node, "partition": 0, "timeout": 60} for node in BROKERS),
    ]


SCENARIO: dict[str, Any] = {
    "name": "whole-cluster-and-controller-power-off",
    "node_count": 3,
    "settings": {"flush.messages": 1},
    # Twice, as a flapping supply does: the second restart must go on from the epochs the first
    # one's elections published, not merely from those the topic was created with.
    "step": [{"wait": "caught-up"}, *outage(controller_first=False), *outage(controller_first=True)],
}


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_the_cluster_comes_back_from_its_controller_s_disk_with_every_acknowledged_write(
    image: str, tmp_path: Path
) -> None:
    spec = TestSpec(name="controller-crash").with_scenario(parse_scenario(SCENARIO, "controller scenario"))
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert not [p for p in outcome.problems if p.startswith("main phase")], outcome.problems
    assert outcome.results["valid"] is True, json.dumps(outcome.results["anomalies"])[:2000]
    lines = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    history = [op for op in map(json.loads, lines) if "f" in op]  # the first line is the header
    controller_ops = [
        (op["f"], op["type"], op["value"]) for op in history if op["f"].startswith("controller-")
    ]
    assert (
        controller_ops
        == [
            ("controller-power-loss", "invoke", {"nodes": ["controller"]}),
            ("controller-power-loss", "ok", {"nodes": ["controller"]}),
            ("controller-start", "invoke", {"nodes": ["controller"]}),
            ("controller-start", "ok", {"nodes": ["controller"]}),
        ]
        * 2
    )
    [log] = (outcome.run_dir / "nodes").glob("controller/controller-events.jsonl")
    found = events(log)
    assert [event["kind"] for event in found].count("start") == 3, [event["kind"] for event in found]
    published: dict[tuple[str, int], int] = {}
    elected_after_a_restart = 0
    restarts = 0
    last_version = 0
    for event in found:
        if event["kind"] == "start":
            restarts += 1
            # What the process before published came back from the disk (a rollback is what
            # mutant 20's missing directory fsync leaves after a power loss).
            assert event["metadata_version"] >= last_version, f"{event}: v{last_version} was published"
        elif event["kind"] == "topic-created":
            for state in event["partitions"]:
                published[(event["topic"], state["partition"])] = state["epoch"]
        elif event["kind"] == "election":
            key = (event["topic"], event["partition"])
            # Its view of the partition is never behind what it published (a lost event could only
            # put it ahead), and its election moves past it: no epoch is reused.
            assert event["new_epoch"] > event["old_epoch"] >= published[key], (
                f"{event} after {published[key]}"
            )
            published[key] = event["new_epoch"]
            elected_after_a_restart += restarts > 1  # the first process: restarts == 1
        last_version = max(last_version, event.get("metadata_version", 0))
    assert elected_after_a_restart, "the restarted controller elected no leader: the check checked nothing"
