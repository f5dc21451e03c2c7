"""``disk-error`` on real brokers (Docker): the leader's log-segment fsyncs fail, it halts as Kafka
does with its only log directory failed, the leadership moves, and ``disk-heal`` brings it back.

A scenario in the node image with ``flush.messages=1`` (so the very next produce fsyncs a
segment): the leader of partition 0 gets ``disk-error`` on ``*.log``; the scenario waits until
another replica leads, heals the disk and waits until the broker answers and is back in the ISR.
Read off the run directory: the verdict is valid (nothing acknowledged was lost), the failed
broker recorded exactly the halt its disk caused (``log-dir-failure``, a failed ``flush`` with
``EIO``) and a new process ``start`` after it, and no other broker halted.
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

SCENARIO: dict[str, Any] = {
    "name": "disk-error-halts-the-leader",
    "node_count": 3,
    "settings": {"flush.messages": 1},
    "step": [
        {"wait": "caught-up"},
        {"bind": {"L": "leader-of:0"}},
        {"fault": "disk-error", "node": "L", "files": "*.log"},
        {"wait": "leader-is-not", "node": "L", "partition": 0, "timeout": 30},
        {"fault": "disk-heal", "node": "L"},
        {"wait": "answers", "node": "L", "timeout": 30},
        {"wait": "in-isr", "node": "L", "partition": 0, "timeout": 60},
    ],
}


def broker_events(run: Path) -> dict[str, list[dict[str, Any]]]:
    """Every broker's events, by node name, in file order (intact lines only)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((run / "nodes").glob("*/broker-events.jsonl")):
        lines = path.read_text().splitlines()
        found[path.parent.name] = [json.loads(line) for line in lines if line.endswith("}")]
    return found


def test_a_failed_segment_fsync_halts_the_leader_and_disk_heal_brings_it_back(
    image: str, tmp_path: Path
) -> None:
    spec = TestSpec(name="disk-error-halts").with_scenario(parse_scenario(SCENARIO, "disk-error scenario"))
    assert spec.power_loss_filesystem, "a disk fault mounts the lazy filesystem unasked"
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.results["valid"] is True, json.dumps(outcome.results["anomalies"])[:2000]
    lines = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    history = [op for op in map(json.loads, lines) if "f" in op]  # the first line is the header
    [failed] = [op["value"]["nodes"] for op in history if op["f"] == "disk-error" and op["type"] == "ok"]
    assert [op["type"] for op in history if op["f"] == "disk-heal"] == ["invoke", "ok"]
    events = broker_events(outcome.run_dir)
    halts = {node: [e for e in found if e["kind"] == "log-dir-failure"] for node, found in events.items()}
    assert {node for node, found in halts.items() if found} == set(failed)
    [halt] = halts[failed[0]]
    assert (halt["operation"], halt["errno"]) == ("flush", "EIO")
    restarted = [e for e in events[failed[0]] if e["kind"] == "start" and e["seq"] > halt["seq"]]
    assert restarted and restarted[0]["clean_shutdown"] is False
