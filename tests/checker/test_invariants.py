"""The white-box checks (pandas engine, the oracle): exactly the planted violations, nothing else.

Synthetic event logs (:mod:`tests.checker.invariant_runs`) plant each violation on a partition of
its own, beside Kafka's legitimate behaviour that a naive definition would flag; each legitimate
episode is also shown to *be* such a trap (the naive rule, computed here, fires on it), so the
silence of the real definition is a decision, not an accident of the episode.  Then the evidence
rules: what is not applicable, what is incomplete.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    EPOCH_REUSE,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    INVARIANT_CHECKS,
    ISR_DIVERGENCE,
    METADATA_ROLLBACK,
    MIN_ISR_VIOLATION,
    TRUNCATED_COMMITTED,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.pandas.invariants import exposures, of_topics, prepare, read_events
from testbed.record.rundir import RunDir
from tests.checker.invariant_runs import LEGIT, PLANTABLE, InvariantPlan, write_invariant_run


def check(run_dir: Path) -> dict[str, Any]:
    return check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]


def reported(result: dict[str, Any]) -> dict[str, int]:
    return {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}


@st.composite
def invariant_plans(draw: st.DrawFn, clean: bool = False) -> InvariantPlan:
    plant = () if clean else tuple((kind, draw(st.integers(0, 2))) for kind in PLANTABLE)
    legit = tuple((episode, draw(st.integers(0, 1))) for episode in LEGIT)
    return InvariantPlan(seed=draw(st.integers(0, 2**32)), plant=plant, legit=legit)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=invariant_plans())
def test_reports_exactly_the_planted_violations(tmp_path: Path, plan: InvariantPlan) -> None:
    run_dir = tmp_path / f"run-{plan.seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    planted = write_invariant_run(run_dir, plan)
    result = check(run_dir)
    assert reported(result) == planted
    assert result["incomplete"] == [] and result["not_applicable"] == {}
    errors = set(planted) - {"divergent-tail"}
    assert result["valid"] is (not errors)
    for name in INVARIANT_CHECKS:
        if name in planted:
            anomaly = result["anomalies"][name]
            assert 1 <= len(anomaly["examples"]) <= DEFAULT_EXAMPLE_LIMIT
            assert anomaly["expected"] is False and anomaly["severity"] == "error"


def test_a_clean_run_with_every_legitimate_episode_is_valid(tmp_path: Path) -> None:
    plan = InvariantPlan(seed=5, legit=tuple((episode, 1) for episode in LEGIT))
    assert write_invariant_run(tmp_path / "run", plan) == {}
    result = check(tmp_path / "run")
    assert result["anomalies"] == {} and result["valid"] is True
    assert set(INVARIANT_CHECKS) <= set(result["checks"])


def _table(run_dir: Path) -> pd.DataFrame:
    events = prepare(read_events([(RunDir(run_dir).events, None)]))
    return of_topics(events, {int(events["run_id"].iloc[0]): "queue"})


def _naive_truncation(rows: pd.DataFrame) -> int:
    """Truncations below the highest HW any leader exposed before (no lineage)."""
    shown = exposures(rows)
    count = 0
    for cut in rows[rows["kind"] == "truncate"].itertuples():
        before = shown[(shown["partition"] == cut.partition) & (shown["order"] < cut.order)]
        count += bool(cut.leo < cut.old_leo and not before.empty and cut.leo < before["hw"].max())
    return count


def _naive_regression(rows: pd.DataFrame, established: bool) -> int:
    """Leader HWs below the highest any leader exposed before (no current leader; ``established``
    False: not even waiting for the epoch start)."""
    count = 0
    for _, shown in exposures(rows).groupby("partition"):
        shown = shown.sort_values("order")
        starts: dict[tuple[str, int], int] = {}
        highest = -1
        for row in shown.itertuples():
            if row.kind == "become-leader":
                starts[(row.node_name, row.epoch)] = row.leo
            start = starts.get((row.node_name, row.epoch), 0)
            count += bool(row.hw < highest and (not established or row.hw >= start))
            highest = max(highest, row.hw)
    return count


def _naive_broker_hw(rows: pd.DataFrame) -> int:
    """A broker's own HW going back (a restart's checkpointed HW below the HW it had)."""
    count = 0
    for _, own in rows[rows["hw"].notna() & (rows["process"] == "broker")].groupby(
        ["node_name", "partition"]
    ):
        values = own.sort_values("order")["hw"].tolist()
        count += sum(later < earlier for earlier, later in itertools.pairwise(values))
    return count


NAIVE: dict[str, Callable[[pd.DataFrame], int]] = {
    "stale-new-leader": lambda rows: _naive_regression(rows, established=False),
    "restart-lower-checkpoint": _naive_broker_hw,
    "deposed-leader-tail": _naive_truncation,
    "zombie-exposure": lambda rows: _naive_regression(rows, established=True),
    "uncommitted-tail-hw-mode": lambda rows: int(
        ((rows["kind"] == "truncate") & (rows["leo"] < rows["old_leo"])).sum()
    ),
}
"""What a naive definition would flag in each legitimate episode."""


@pytest.mark.parametrize("episode", LEGIT)
def test_a_legitimate_episode_is_silent_where_a_naive_rule_fires(tmp_path: Path, episode: str) -> None:
    write_invariant_run(tmp_path / "run", InvariantPlan(seed=1, legit=((episode, 1),)))
    result = check(tmp_path / "run")
    assert result["anomalies"] == {} and result["valid"] is True
    assert NAIVE[episode](_table(tmp_path / "run")) >= 1, "the episode must be a trap for a naive rule"


def test_examples_show_the_events_compared(tmp_path: Path) -> None:
    plan = InvariantPlan(seed=9, plant=tuple((kind, 1) for kind in PLANTABLE))
    write_invariant_run(tmp_path / "run", plan)
    found = check(tmp_path / "run")["anomalies"]
    (cut,) = found[TRUNCATED_COMMITTED]["examples"]
    assert cut["truncate"]["kind"] == "truncate" and cut["exposed_by"]["kind"] == "hw"
    assert cut["new_leo"] == cut["truncate"]["new_leo"] < cut["committed_hw"] == cut["exposed_by"]["new_hw"]
    assert cut["committed_cut"] == 1 and cut["node"] == f"n{cut['truncate']['node']}"
    assert {"ts", "node", "seq"} <= set(cut["truncate"]) and cut["exposed_by"]["ts"] < cut["truncate"]["ts"]
    elections = found[INCOMPLETE_LEADER]["examples"]
    assert all(e["election"]["kind"] == "become-leader" and e["leo"] < e["exposed_hw"] for e in elections)
    (regression,) = found[HW_REGRESSION]["examples"]
    assert regression["hw"] < regression["previous_hw"] == regression["previous"]["new_hw"]
    (alone,) = found[MIN_ISR_VIOLATION]["examples"]
    assert (alone["isr_size"], alone["min_isr"], alone["hw"]["isr"]) == (1, 2, [1])
    (diverged,) = found[ISR_DIVERGENCE]["examples"]
    assert (diverged["member"], diverged["leader"], diverged["isr_from"]["kind"]) == (
        "n2",
        "n1",
        "topic-created",
    )
    assert [entry["partition"] for entry in diverged["isr_from"]["partitions"]] == [diverged["partition"]]
    records = diverged["replicas"]
    assert records["n2"]["value"].startswith("diverged-") and records["n1"]["value"] != records["n2"]["value"]
    (reused,) = found[EPOCH_REUSE]["examples"]
    assert (reused["epoch"], reused["highest_before"]) == (1, 1)
    assert reused["published"]["kind"] == reused["first_published"]["kind"] == "election"
    assert reused["published"]["new_leader"] == 3 and reused["first_published"]["new_leader"] == 2
    assert reused["first_published"]["seq"] < reused["published"]["seq"]
    rollbacks = found[METADATA_ROLLBACK]["examples"]
    # epoch-reuse's restart (from v0, after the topic's creation at v1) comes first, then the fencing's
    assert sorted((r["loaded_version"], r["published_version"]) for r in rollbacks) == [(0, 1), (2, 7)]
    assert all(r["restart"]["kind"] == "start" for r in rollbacks)
    assert all(r["versions_lost"] == r["published_version"] - r["loaded_version"] for r in rollbacks)
    assert {r["published"]["kind"] for r in rollbacks} == {"topic-created", "broker-fenced"}


def test_many_violations_count_all_and_show_the_first_few(tmp_path: Path) -> None:
    plan = InvariantPlan(seed=3, plant=((MIN_ISR_VIOLATION, 7),))
    assert write_invariant_run(tmp_path / "run", plan) == {MIN_ISR_VIOLATION: 7}
    anomaly = check(tmp_path / "run")["anomalies"][MIN_ISR_VIOLATION]
    assert anomaly["count"] == 7 and len(anomaly["examples"]) == DEFAULT_EXAMPLE_LIMIT
    assert [e["partition"] for e in anomaly["examples"]] == [1, 2, 3, 4, 5]


def _edit_spec(run_dir: Path, **fields: Any) -> None:
    path = RunDir(run_dir).spec_file
    spec = json.loads(path.read_text())
    spec.update(fields)
    path.write_text(json.dumps(spec))


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"replica_evidence": "none: an external cluster"}, "no broker event logs: an external cluster"),
        ({"replica_evidence": "single-store: tansu"}, "no broker event logs: tansu"),
        ({"broker_config": {"event.log.enable": "false"}}, "no broker event logs: event.log.enable=false"),
        ({"broker_config": {}}, "no broker event logs: the run recorded no event.log.enable"),
    ],
)
def test_targets_without_event_logs_name_the_checks_not_applicable(
    tmp_path: Path, fields: dict[str, Any], why: str
) -> None:
    write_invariant_run(tmp_path / "run", InvariantPlan(seed=2, plant=((TRUNCATED_COMMITTED, 1),)))
    _edit_spec(tmp_path / "run", **fields)
    result = check(tmp_path / "run")
    assert set(result["not_applicable"]) >= set(INVARIANT_CHECKS)
    assert all(result["not_applicable"][name].startswith(why) for name in INVARIANT_CHECKS)
    assert TRUNCATED_COMMITTED not in result["anomalies"], "not run, so not found"
    assert result["valid"] is True, "not applicable is no reason for unknown"


def _cut_log(run_dir: Path, node: str, how: str) -> None:
    path = RunDir(run_dir).broker_events(node)
    lines = path.read_text().splitlines()
    if how == "missing":
        path.unlink()
    elif how == "damaged":
        path.write_text("\n".join([*lines[:2], "not an event", *lines[2:]]) + "\n")
    elif how == "torn":
        path.write_text("\n".join(lines)[:-7])
    else:  # an event lost to a failed write
        gap = [json.loads(line) for line in lines]
        path.write_text("".join(json.dumps({**e, "seq": e["seq"] + (e["seq"] >= 3)}) + "\n" for e in gap))


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("missing", "event log of node n3 missing: no broker-events.jsonl"),
        ("damaged", "event log of node n3 missing: damaged event log: "),
        ("torn", "event log of node n3: torn line(s) "),
        ("gap", "event log of node n3: 1 event(s) lost (seq gaps [[3, 4]])"),
    ],
)
def test_a_missing_or_damaged_event_log_makes_the_verdict_unknown(
    tmp_path: Path, how: str, reason: str
) -> None:
    write_invariant_run(tmp_path / "clean", InvariantPlan(seed=4))
    _cut_log(tmp_path / "clean", "n3", how)
    result = check(tmp_path / "clean")
    assert [line for line in result["incomplete"] if line.startswith(reason)], result["incomplete"]
    assert result["valid"] == "unknown" and result["not_applicable"] == {}
    # What the other logs prove stays proven: n2's truncation is in n2's log, the exposure in n1's.
    write_invariant_run(tmp_path / "bad", InvariantPlan(seed=6, plant=((MIN_ISR_VIOLATION, 1),)))
    _cut_log(tmp_path / "bad", "n3", how)
    result = check(tmp_path / "bad")
    assert reported(result) == {MIN_ISR_VIOLATION: 1} and result["valid"] is False


def test_a_missing_controller_log_is_incomplete(tmp_path: Path) -> None:
    write_invariant_run(tmp_path / "run", InvariantPlan(seed=4))
    (tmp_path / "run" / "nodes" / "controller" / "controller-events.jsonl").unlink()
    result = check(tmp_path / "run")
    assert "event log of node controller missing: no controller-events.jsonl" in result["incomplete"]
    assert result["valid"] == "unknown"


def test_a_clock_stepping_back_inside_one_log_keeps_its_seq_order() -> None:
    events = pd.DataFrame(
        {
            "run_id": [7] * 4,
            "node_name": ["n1", "n1", "n1", "n2"],
            "seq": [0, 1, 2, 0],
            "ts": [100, 300, 200, 250],  # n1's clock stepped back before its third event
        }
    )
    ordered = prepare(events)
    assert list(zip(ordered["node_name"], ordered["seq"], ordered["t"], ordered["order"], strict=True)) == [
        ("n1", 0, 100, 0),
        ("n2", 0, 250, 1),
        ("n1", 1, 300, 2),
        ("n1", 2, 300, 3),
    ]


def test_the_final_isr_is_the_last_state_when_no_broker_shut_down_cleanly(tmp_path: Path) -> None:
    """Brokers SIGKILLed at the end (no ``shutdown`` event): every published state counts."""
    planted = write_invariant_run(tmp_path / "run", InvariantPlan(seed=8, plant=((ISR_DIVERGENCE, 2),)))
    for node in ("n1", "n2", "n3"):
        path = RunDir(tmp_path / "run").broker_events(node)
        kept = [line for line in path.read_text().splitlines() if '"kind":"shutdown"' not in line]
        path.write_text("\n".join(kept) + "\n")
    assert reported(check(tmp_path / "run")) == planted == {ISR_DIVERGENCE: 2, "divergent-tail": 2}
