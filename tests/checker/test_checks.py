"""Soundness of the checks (pandas engine): exactly the planted anomalies, nothing on clean runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    DUPLICATE,
    LOST_WRITE,
    POLL_SKIP,
    REPLICA_DIVERGENCE,
    STALLED,
    UNSEEN,
    WARNINGS,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from testbed.record.history import convert_history, write_parquet
from tests.checker.strategies import plans
from tests.checker.synthetic import Plan, write_run


def check(run_dir: Path) -> dict[str, Any]:
    return check_pass(
        PandasEngine(),
        [load_run(run_dir)],
        ALL_CHECKS,
        DEFAULT_EXAMPLE_LIMIT,
    )[0]


def reported(result: dict[str, Any]) -> dict[str, int]:
    return {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=plans())
def test_reports_exactly_the_planted_anomalies(tmp_path: Path, plan: Plan) -> None:
    run_dir = tmp_path / f"run-{plan.seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    planted = write_run(run_dir, plan)
    result = check(run_dir)
    assert reported(result) == planted
    errors = set(planted) - WARNINGS - {STALLED}  # stalled: a warning unless --liveness strict
    assert result["valid"] == (False if errors else ("unknown" if UNSEEN in planted else True))
    for anomaly in result["anomalies"].values():
        assert 1 <= len(anomaly["examples"]) <= DEFAULT_EXAMPLE_LIMIT
        assert anomaly["expected"] is False  # the default config is the safe one


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=plans(clean=True))
def test_clean_runs_are_valid(tmp_path: Path, plan: Plan) -> None:
    run_dir = tmp_path / f"run-{plan.seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    write_run(run_dir, plan)
    result = check(run_dir)
    assert result["anomalies"] == {}
    assert result["valid"] is True, result["incomplete"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(plans(), min_size=2, max_size=4, unique_by=lambda plan: plan.seed))
def test_a_pass_of_several_runs_answers_each_as_alone(tmp_path: Path, batch: list[Plan]) -> None:
    """Example rows are read by position across the pass's files (``PandasEngine._columns``):
    every run's results, examples included, must not depend on the runs checked with it."""
    root = tmp_path / "batch"
    shutil.rmtree(root, ignore_errors=True)
    for plan in batch:
        write_run(root / f"run-{plan.seed}", plan)
    runs = [load_run(root / f"run-{plan.seed}") for plan in batch]
    together = check_pass(PandasEngine(), runs, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    for run, result in zip(runs, together, strict=True):
        alone = check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]
        assert json.dumps(result, sort_keys=True) == json.dumps(alone, sort_keys=True)


def test_a_history_stored_out_of_index_order_gives_the_same_results(tmp_path: Path) -> None:
    """The pandas engine finds example ops by binary search on ``index`` (ops are stored in index
    order); a file that is not in order must be searched row by row, with the same answers."""
    plan = Plan(seed=5, partitions=2, plant=((LOST_WRITE, 1), (DUPLICATE, 1), (POLL_SKIP, 1)))
    in_order, reversed_ = tmp_path / "in-order", tmp_path / "reversed"
    write_run(in_order, plan)
    convert_history(in_order / "history.jsonl", in_order / "history.parquet")
    shutil.copytree(in_order, reversed_)
    history = pq.read_table(in_order / "history.parquet")
    write_parquet(history.take(pa.array(range(history.num_rows - 1, -1, -1))), reversed_ / "history.parquet")
    expected, found = check(in_order), check(reversed_)
    assert expected["anomalies"].keys() == {LOST_WRITE, DUPLICATE, POLL_SKIP}
    assert json.dumps(found["anomalies"], sort_keys=True) == json.dumps(expected["anomalies"], sort_keys=True)


def test_lost_write_example_shows_the_acknowledged_send(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=1, partitions=1, plant=((LOST_WRITE, 1),)))
    example = check(tmp_path)["anomalies"][LOST_WRITE]["examples"][0]
    assert example["send"]["type"] == "ok" and example["send"]["f"] == "send"
    assert (
        example["send"]["value"]["value"] == example["value"]
        and example["send"]["value"]["offset"] == example["offset"]
    )


def test_divergence_example_shows_both_records_of_the_first_divergent_offset(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=2, partitions=1, plant=((REPLICA_DIVERGENCE, 2),)))
    anomaly = check(tmp_path)["anomalies"][REPLICA_DIVERGENCE]
    assert anomaly["count"] == 2
    pairs = {tuple(sorted(e["replicas"])) for e in anomaly["examples"]}
    assert pairs == {("n1", "n3"), ("n2", "n3")}
    for example in anomaly["examples"]:
        assert all(e["positions"] == 2 for e in anomaly["examples"])
        records = example["replicas"]
        assert records["n3"]["value"].startswith("diverged-") and records["n3"]["offset"] == example["offset"]
        assert records["n3"]["value"] != next(r for n, r in records.items() if n != "n3")["value"]


@pytest.mark.parametrize(
    ("config", "acks", "faults", "rule"),
    [
        ({}, "1", ("kill",), "acks=1"),
        ({"unclean.leader.election.enable": "true"}, "all", ("kill",), "unclean.leader.election.enable=true"),
        (
            {"min.insync.replicas": "1"},  # every run records its effective settings (test.json)
            "all",
            ("power-loss",),
            "flush never + power-loss; min.insync.replicas=1 + flush never + power-loss",
        ),
        ({}, "all", ("power-loss",), "flush never + power-loss"),  # no recorded min ISR: no default assumed
        (
            {"truncation.mode": "high-watermark", "min.insync.replicas": "2"},
            "all",
            ("kill",),
            "truncation.mode=high-watermark",
        ),
        ({"leader.epoch.lookup": "single"}, "all", ("kill",), "leader.epoch.lookup=single"),
        ({"isr.join.offset": "high-watermark"}, "all", ("kill",), "isr.join.offset=high-watermark"),
        (
            {"leader.epoch.fencing.enable": "false"},
            "all",
            ("metadata-delay",),
            "leader.epoch.fencing.enable=false",
        ),
        ({"min.insync.replicas.strict": "false"}, "all", ("kill",), "min.insync.replicas.strict=false"),
        (
            {"eligible.leader.replicas.enable": "false", "min.insync.replicas": "2"},
            "all",
            ("power-loss",),
            "flush never + power-loss; eligible.leader.replicas.enable=false + flush never + power-loss",
        ),
    ],
)
def test_lost_write_is_expected_only_where_the_config_permits_it(
    tmp_path: Path, config: dict[str, str], acks: str, faults: tuple[str, ...], rule: str
) -> None:
    plan = Plan(
        seed=3,
        partitions=1,
        plant=((LOST_WRITE, 1),),
        broker_config=tuple(config.items()),
        acks=acks,
        faults=faults,
    )
    write_run(tmp_path, plan)
    result = check(tmp_path)
    assert result["valid"] is False and result["expected_only"] is True
    assert (
        result["anomalies"][LOST_WRITE]["expected"] is True
        and result["anomalies"][LOST_WRITE]["rule"] == rule
    )


@pytest.mark.parametrize(
    "config",
    [
        {
            "leader.epoch.lookup": "iterative",
            "isr.join.offset": "epoch-start",
            "leader.epoch.fencing.enable": "true",
            "min.insync.replicas.strict": "true",
            "eligible.leader.replicas.enable": "true",
            "truncation.mode": "leader-epoch",
        },
        {"leader.epoch.lookup": "single"},  # permits divergence and loss, not aborted reads
    ],
)
def test_safe_switch_settings_expect_no_divergence(tmp_path: Path, config: dict[str, str]) -> None:
    plan = Plan(seed=8, partitions=1, plant=((REPLICA_DIVERGENCE, 1),), broker_config=tuple(config.items()))
    write_run(tmp_path, plan)
    anomaly = check(tmp_path)["anomalies"][REPLICA_DIVERGENCE]
    assert anomaly["expected"] is (config.get("leader.epoch.lookup") == "single")


def test_power_loss_with_fsync_per_message_expects_nothing(tmp_path: Path) -> None:
    plan = Plan(
        seed=4,
        partitions=1,
        plant=((LOST_WRITE, 1),),
        broker_config=(("flush.messages", "1"),),
        faults=("power-loss",),
    )
    write_run(tmp_path, plan)
    result = check(tmp_path)
    assert result["anomalies"][LOST_WRITE]["expected"] is False and result["expected_only"] is False


def test_missing_replica_dump_makes_a_clean_run_unknown(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=5))
    shutil.rmtree(tmp_path / "nodes" / "n2")
    result = check(tmp_path)
    assert result["valid"] == "unknown"
    assert result["incomplete"] == ["replica dump of node n2 missing: no dump.jsonl"]


def test_incomplete_drain_makes_a_clean_run_unknown(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=6, partitions=2))
    history = (tmp_path / "history.jsonl").read_text().replace('"complete":true', '"complete":false', 1)
    (tmp_path / "history.jsonl").write_text(history)
    result = check(tmp_path)
    assert result["valid"] == "unknown" and result["anomalies"] == {}
    assert "have no complete final drain" in result["incomplete"][0]


def test_results_json_is_written_and_stable(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=7, plant=((LOST_WRITE, 1),)))
    first = check(tmp_path)
    assert json.loads(json.dumps(first)) == check(tmp_path)
