"""The order checks (pandas engine): their definitions' tiny examples, planted anomalies, expectations."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import (
    ALL_CHECKS,
    DEFAULT_EXAMPLE_LIMIT,
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    ORDER_CHECKS,
    POLL_CHECKS,
    POLL_SKIP,
    REALTIME_ORDER,
    SEND_CHECKS,
    STALE_READ,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.expectations import applicable_rules, expectation
from checker.pandas.engine import PandasEngine
from tests.checker.order_cases import CASES, Case, assert_case, write_case
from tests.checker.synthetic import COMPANIONS, Plan, write_run


def check(run_dir: Path, checks: tuple[str, ...] = ALL_CHECKS) -> dict[str, Any]:
    return check_pass(PandasEngine(), [load_run(run_dir)], checks, DEFAULT_EXAMPLE_LIMIT)[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_definitions_tiny_examples(tmp_path: Path, case: Case) -> None:
    write_case(tmp_path, case)
    assert_case(case, check(tmp_path, ORDER_CHECKS))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(ORDER_CHECKS),
    count=st.integers(1, 3),
    partitions=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_each_order_anomaly_planted_into_a_clean_history_is_found(
    tmp_path: Path, kind: str, count: int, partitions: int, seed: int
) -> None:
    run_dir = tmp_path / f"run-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    planted = write_run(run_dir, Plan(seed=seed, partitions=partitions, plant=((kind, count),)))
    result = check(run_dir)
    assert {name: anomaly["count"] for name, anomaly in result["anomalies"].items()} == planted
    reset = {NONMONOTONIC_POLL} if kind == STALE_READ else set()  # a consumer reset steps back once
    assert planted[kind] >= count and set(planted) <= {kind, *COMPANIONS.get(kind, {}), *reset}
    assert result["valid"] is False and result["expected_only"] is False


def test_examples_show_the_ops_compared(tmp_path: Path) -> None:
    plan = Plan(seed=9, partitions=2, plant=tuple((kind, 1) for kind in ORDER_CHECKS))
    write_run(tmp_path, plan)
    anomalies = check(tmp_path)["anomalies"]
    realtime = anomalies[REALTIME_ORDER]["examples"][0]
    assert realtime["invoke"]["type"] == "invoke" and realtime["send"]["type"] == "ok"
    assert realtime["prev_send"]["index"] < realtime["invoke"]["index"] < realtime["send"]["index"]
    assert realtime["send"]["value"]["offset"] == realtime["offset"] < realtime["prev_offset"]
    assert realtime["prev_send"]["value"]["offset"] == realtime["prev_offset"]
    backwards = anomalies[NONMONOTONIC_SEND]["examples"][0]
    assert backwards["prev_send"]["process"] == backwards["send"]["process"] == backwards["process"]
    for kind in (INT_POLL_SKIP, INT_NONMONOTONIC_POLL):
        inside = anomalies[kind]["examples"][0]
        offsets = [record["offset"] for record in inside["poll"]["value"]]
        assert offsets == [inside["prev_offset"], inside["offset"]]
    across = anomalies[POLL_SKIP]["examples"][0]
    assert [r["offset"] for r in across["prev_poll"]["value"]] == [across["prev_offset"]]
    assert [r["offset"] for r in across["poll"]["value"]] == [across["offset"]]
    stale = anomalies[STALE_READ]["examples"]
    assert all(
        e["offset"] <= e["prev_offset"] and e["read"]["index"] > e["prev_read"]["index"] for e in stale
    )


_SAFE: dict[str, Any] = {"workload": {"acks": "all"}, "broker_config": {}, "nemesis": {"faults": ["kill"]}}


@pytest.mark.parametrize(
    ("spec", "permitted"),
    [
        (_SAFE, set()),
        ({**_SAFE, "workload": {"acks": "1"}}, set(SEND_CHECKS)),
        ({**_SAFE, "workload": {"acks": "0"}}, set(SEND_CHECKS)),
        ({**_SAFE, "broker_config": {"unclean.leader.election.enable": "true"}}, set(ORDER_CHECKS)),
        ({**_SAFE, "nemesis": {"faults": ["power-loss"]}}, set(ORDER_CHECKS)),
        ({**_SAFE, "broker_config": {"flush.messages": "1"}, "nemesis": {"faults": ["power-loss"]}}, set()),
        ({**_SAFE, "broker_config": {"truncation.mode": "high-watermark"}}, set(ORDER_CHECKS)),
        ({**_SAFE, "broker_config": {"min.insync.replicas.strict": "false"}}, set(ORDER_CHECKS)),
    ],
    ids=[
        "safe",
        "acks=1",
        "acks=0",
        "unclean",
        "power-loss",
        "power-loss+fsync",
        "hw-truncation",
        "lax-min-isr",
    ],
)
def test_order_anomalies_are_expected_where_acknowledged_or_committed_data_may_vanish(
    spec: dict[str, Any], permitted: set[str]
) -> None:
    """Sends may reuse offsets wherever acknowledged data may vanish (acks=0/1 included); consumers
    are reset or read a rewritten log only where *committed* data may vanish (not acks=1)."""
    rules = applicable_rules(spec)
    assert {kind for kind in ORDER_CHECKS if expectation(kind, rules)[0]} == permitted
    assert set(POLL_CHECKS) <= permitted or not set(POLL_CHECKS) & permitted


def test_a_planted_realtime_order_is_expected_under_acks_1_and_a_stale_read_is_not(tmp_path: Path) -> None:
    plan = Plan(seed=12, partitions=1, plant=((REALTIME_ORDER, 1), (STALE_READ, 2)), acks="1")
    write_run(tmp_path, plan)
    anomalies = check(tmp_path)["anomalies"]
    assert anomalies[REALTIME_ORDER]["expected"] is True and anomalies[REALTIME_ORDER]["rule"] == "acks=1"
    assert anomalies[STALE_READ]["expected"] is False and anomalies[NONMONOTONIC_POLL]["expected"] is False
