"""The liveness figures and ``stalled`` (pandas engine): the definitions' examples, plants, settings."""

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
    DEFAULT_LIVENESS,
    LIVENESS_STRICT,
    STALLED,
    Liveness,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.expectations import applicable_rules, expectation
from checker.pandas.engine import PandasEngine
from tests.checker.liveness_cases import CASES, Case, assert_case, write_case
from tests.checker.synthetic import JUMP_SECONDS, Plan, write_run


def check(
    run_dir: Path, checks: tuple[str, ...] = ALL_CHECKS, liveness: Liveness = DEFAULT_LIVENESS
) -> dict[str, Any]:
    return check_pass(PandasEngine(), [load_run(run_dir)], checks, DEFAULT_EXAMPLE_LIMIT, liveness)[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_definitions_tiny_examples(tmp_path: Path, case: Case) -> None:
    write_case(tmp_path, case)
    assert_case(case, check(tmp_path))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jump=st.sampled_from(["planted", "announced", None]),
    partitions=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_a_planted_gap_stalls_every_partition_and_an_announced_one_none(
    tmp_path: Path, jump: str | None, partitions: int, seed: int
) -> None:
    run_dir = tmp_path / f"run-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    plant = ((STALLED, 1),) if jump == "planted" else ()
    announced = "announced" if jump == "announced" else None
    planted = write_run(run_dir, Plan(seed=seed, partitions=partitions, plant=plant, jump=announced))
    result = check(run_dir)
    assert {name: a["count"] for name, a in result["anomalies"].items()} == planted
    gaps = [p["longest_gap_s"] for p in result["liveness"]["partitions"].values()]
    if jump == "planted":
        assert planted == {STALLED: partitions} and all(gap >= JUMP_SECONDS for gap in gaps)
        assert result["valid"] is True and result["anomalies"][STALLED]["severity"] == "warning"
    else:
        assert planted == {} and all(gap < 1 for gap in gaps)


def test_strict_liveness_makes_a_stall_an_error(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=4, partitions=2, plant=((STALLED, 1),)))
    strict = check(tmp_path, liveness=Liveness(mode=LIVENESS_STRICT))
    assert strict["anomalies"][STALLED]["severity"] == "error" and strict["valid"] is False
    assert strict["expected_only"] is False and strict["liveness"]["mode"] == LIVENESS_STRICT


def test_the_threshold_decides(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=6, partitions=1, plant=((STALLED, 1),)))
    assert STALLED not in check(tmp_path, liveness=Liveness(stall_threshold_s=JUMP_SECONDS + 1))["anomalies"]
    found = check(tmp_path, liveness=Liveness(stall_threshold_s=JUMP_SECONDS - 1))["anomalies"][STALLED]
    assert found["count"] == 1 and found["examples"][0]["gap_s"] >= JUMP_SECONDS


def test_without_the_stalled_check_there_are_no_figures(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=7, partitions=1, plant=((STALLED, 1),)))
    result = check(tmp_path, tuple(c for c in ALL_CHECKS if c != STALLED))
    assert result["liveness"] is None and STALLED not in result["anomalies"]
    assert any("stalled" in reason for reason in result["incomplete"])


@pytest.mark.parametrize(
    "config",
    [
        {"unclean.leader.election.enable": "true"},
        {"truncation.mode": "high-watermark"},
        {"min.insync.replicas.strict": "false"},
        {},
    ],
)
@pytest.mark.parametrize("acks", ["all", "1", "0"])
def test_no_configuration_permits_a_stall(config: dict[str, str], acks: str) -> None:
    spec = {"workload": {"acks": acks}, "broker_config": config, "nemesis": {"faults": ["power-loss"]}}
    assert expectation(STALLED, applicable_rules(spec)) == (False, None)


@pytest.mark.parametrize("threshold", [0.0, -1.0])
def test_a_threshold_must_be_positive(threshold: float) -> None:
    with pytest.raises(ValueError, match="stall threshold"):
        Liveness(stall_threshold_s=threshold)
