"""The consumer-group checks (pandas engine): tiny examples, planted anomalies, expectations, cost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import (
    ALL_CHECKS,
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    DEFAULT_EXAMPLE_LIMIT,
    GENERATION_REGRESSION,
    GROUP_CHECKS,
    GROUP_REDELIVERY,
    GROUP_SKIP,
    ORDER_CHECKS,
    POLL_SKIP,
)
from checker.driver import check_pass
from checker.evidence import load_run
from checker.expectations import applicable_rules, expectation
from checker.pandas.engine import PandasEngine
from checker.pandas.groups import decode_payload
from tests.checker.group_cases import CASES
from tests.checker.group_synthetic import GROUP_PLANTABLE, GroupPlan, write_group_run
from tests.checker.order_cases import Case, write_case
from tests.checker.synthetic import Plan, write_run

CHECKS = (*ORDER_CHECKS, *GROUP_CHECKS)
COMPARED_NAMES = {
    GROUP_SKIP: ("committed_offset", "offset"),
    GROUP_REDELIVERY: ("committed_offset", "offset"),
    COMMIT_REGRESSION: ("prev_offset", "offset"),
    COMMITTED_BEYOND_READ: ("read_offset", "offset"),
    GENERATION_REGRESSION: ("prev_generation", "generation"),
}
EARLIER_OPS = ("committed_by", "prev_commit", "prev_assign")
"""The example field naming the earlier op each group check compares with (committed-beyond-read: none)."""


def check(run_dir: Path, checks: tuple[str, ...] = ALL_CHECKS) -> dict[str, Any]:
    return check_pass(PandasEngine(), [load_run(run_dir)], checks, DEFAULT_EXAMPLE_LIMIT)[0]


def counts(result: dict[str, Any]) -> dict[str, int]:
    return {name: anomaly["count"] for name, anomaly in result["anomalies"].items()}


def assert_group_case(case: Case, result: dict[str, Any]) -> None:
    """The case's anomalies exactly, and the two offsets its first examples compare."""
    assert counts(result) == case.found, case.name
    for kind, pair in case.compared.items():
        example = result["anomalies"][kind]["examples"][0]
        names = COMPARED_NAMES.get(kind, ("prev_offset", "offset"))
        assert (example[names[0]], example[names[1]]) == pair, (case.name, kind)
    for kind, indexes in case.earlier.items():
        examples = result["anomalies"][kind]["examples"]
        named = [next(e[key]["index"] for key in EARLIER_OPS if key in e) for e in examples]
        assert named == indexes, (case.name, kind)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_definitions_tiny_examples(tmp_path: Path, case: Case) -> None:
    write_case(tmp_path, case)
    assert_group_case(case, check(tmp_path, CHECKS))


def test_a_poll_skip_across_a_takeover_names_both_processes(tmp_path: Path) -> None:
    """The chain is one consumer; the example still says which process read what."""
    (case,) = [case for case in CASES if case.name == "a poll-skip across a takeover"]
    write_case(tmp_path, case)
    (example,) = check(tmp_path, CHECKS)["anomalies"][POLL_SKIP]["examples"]
    assert example["process"] == example["poll"]["process"] == 11
    assert example["prev_poll"]["process"] == 10


def test_a_reader_that_read_nothing_of_the_partition_allows_0(tmp_path: Path) -> None:
    (case,) = [case for case in CASES if case.name.startswith("an asynchronous commit names")]
    write_case(tmp_path, case)
    examples = check(tmp_path, CHECKS)["anomalies"][COMMITTED_BEYOND_READ]["examples"]
    assert [(e["partition"], e["read_offset"], e["offset"], e["read"]) for e in examples] == [
        (0, None, 5, None),
        (1, None, 2, None),
    ]
    assert {e["commit"]["value"]["polled_by"] for e in examples} == {11}


def test_examples_show_the_ops_compared(tmp_path: Path) -> None:
    plan = GroupPlan(seed=5, partitions=2, plant=tuple((kind, 2) for kind in GROUP_PLANTABLE))
    write_group_run(tmp_path, plan)
    anomalies = check(tmp_path)["anomalies"]
    skip = anomalies[GROUP_SKIP]["examples"][0]
    assert skip["send"]["f"] == "send" and skip["send"]["value"]["offset"] == skip["offset"]
    assert skip["offset"] < skip["committed_offset"]
    assert [r["offset"] for r in skip["committed_by"]["value"]] == [skip["committed_offset"]]  # a resume
    again = anomalies[GROUP_REDELIVERY]["examples"][0]
    assert [r["offset"] for r in again["read"]["value"]] == [again["offset"]]
    assert again["committed_by"]["f"] == "commit" and again["committed_by"]["type"] == "ok"
    assert again["committed_by"]["value"]["offsets"][str(again["partition"])] == again["committed_offset"]
    back = anomalies[COMMIT_REGRESSION]["examples"][0]
    assert back["prev_commit"]["index"] < back["commit"]["index"]
    assert back["commit"]["value"]["offsets"][str(back["partition"])] == back["offset"] < back["prev_offset"]
    assert back["prev_commit"]["value"]["offsets"][str(back["partition"])] == back["prev_offset"]
    (older, newer) = anomalies[GENERATION_REGRESSION]["examples"]
    assert older["generation"] <= newer["generation"] < newer["prev_generation"]
    for back in (older, newer):
        assert back["prev_assign"]["index"] < back["assign"]["index"]
        assert back["assign"]["f"] == back["prev_assign"]["f"] == "assign"
        assert back["assign"]["process"] == back["process"]
        assert back["assign"]["value"]["consumer"] == back["prev_assign"]["value"]["consumer"]
        assert back["assign"]["value"]["generation"] == back["generation"]
        assert back["prev_assign"]["value"]["generation"] == back["prev_generation"]
    beyond = anomalies[COMMITTED_BEYOND_READ]["examples"][0]
    assert beyond["commit"]["value"]["polled_by"] == beyond["read"]["process"]
    assert [r["offset"] for r in beyond["read"]["value"]] == [beyond["read_offset"]]
    assert beyond["offset"] > beyond["read_offset"] + 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.sets(st.sampled_from(GROUP_PLANTABLE)),
    count=st.integers(1, 3),
    partitions=st.integers(1, 3),
    consumers=st.integers(1, 3),
    generations=st.integers(2, 4),
    commit=st.sampled_from(["sync", "async"]),
    seed=st.integers(0, 2**32),
)
def test_each_group_anomaly_planted_into_a_clean_group_history_is_found(
    tmp_path: Path,
    kinds: set[str],
    count: int,
    partitions: int,
    consumers: int,
    generations: int,
    commit: str,
    seed: int,
) -> None:
    """Exactly the planted counts; a clean history (no kind drawn) shows nothing at all."""
    run_dir = tmp_path / f"run-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    plan = GroupPlan(
        seed=seed,
        partitions=partitions,
        consumers=consumers,
        generations=generations,
        commit=commit,
        plant=tuple((kind, count) for kind in sorted(kinds)),
    )
    planted = write_group_run(run_dir, plan)
    result = check(run_dir)
    assert counts(result) == planted
    assert set(planted) == kinds
    assert result["valid"] is (False if kinds else "unknown")  # no replica dumps: unknown at best


def test_runs_without_a_group_are_checked_as_before(tmp_path: Path) -> None:
    """Planted order anomalies of an ``assign`` run: the group checks add nothing, and read
    nothing but the ``f`` column every question reads."""
    plan = Plan(seed=3, partitions=2, plant=(("poll-skip", 1), ("stale-read", 2), ("lost-write", 1)))
    planted = write_run(tmp_path, plan)
    engine = PandasEngine()
    run = load_run(tmp_path)
    assert engine.group_anomalies([run], frozenset(GROUP_CHECKS), 5).empty
    (columns,) = engine._history.values()
    assert set(columns._columns) == {"f"}
    assert counts(check_pass(engine, [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0]) == planted


@pytest.mark.parametrize(
    ("payload", "decoded"),
    [
        (
            '{"generation": 3, "takeover": 5, "offsets": {"0": 23, "1": 7}, "polled_by": 6, "consumer": 2}',
            {"generation": 3, "takeover": 5, "consumer": 2, "polled_by": 6, "offsets": [(0, 23), (1, 7)]},
        ),
        (
            '{"generation": "3", "consumer": true, "polled_by": 6.0, "takeover": 1e2}',
            {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": []},
        ),
        (
            '{"generation": 99999999999999999999, "offsets": {"0": null, "00": 1, "x": 2, "-1": 3, "7": 4}}',
            {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": [(7, 4)]},
        ),
        (
            '{"offsets": {"0": 1, "1": "2"}}',
            {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": []},
        ),
        (
            '{"offsets": [1, 2]}',
            {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": []},
        ),
        (
            "[1, 2]",
            {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": []},
        ),
        (None, {"generation": None, "takeover": None, "consumer": None, "polled_by": None, "offsets": []}),
    ],
)
def test_a_group_value_is_read_as_sparks_from_json_reads_it(
    payload: str | None, decoded: dict[str, Any]
) -> None:
    """The rule both engines share (the Spark side: ``tests/checker/spark/test_groups.py``)."""
    assert decode_payload(payload) == decoded
    assert json.dumps(decode_payload(payload)) == json.dumps(decoded)


_SAFE: dict[str, Any] = {
    "workload": {"acks": "all", "consume_via": "subscribe", "commit": "sync"},
    "broker_config": {},
    "nemesis": {"faults": ["kill", "consumer-churn"]},
}
_LOST_COMMITS = {GROUP_SKIP, GROUP_REDELIVERY, COMMIT_REGRESSION, GENERATION_REGRESSION}


@pytest.mark.parametrize(
    ("spec", "permitted"),
    [
        (_SAFE, set()),
        ({**_SAFE, "workload": {**_SAFE["workload"], "commit": "auto"}}, set()),
        ({**_SAFE, "workload": {**_SAFE["workload"], "acks": "1"}}, set()),
        ({**_SAFE, "broker_config": {"unclean.leader.election.enable": "true"}}, _LOST_COMMITS),
        ({**_SAFE, "nemesis": {"faults": ["power-loss"]}}, _LOST_COMMITS),
        ({**_SAFE, "broker_config": {"flush.messages": "1"}, "nemesis": {"faults": ["power-loss"]}}, set()),
        ({**_SAFE, "broker_config": {"truncation.mode": "high-watermark"}}, _LOST_COMMITS),
        ({**_SAFE, "broker_config": {"leader.epoch.fencing.enable": "false"}}, _LOST_COMMITS),
        (
            {
                **_SAFE,
                "workload": {**_SAFE["workload"], "commit": "auto"},
                "broker_config": {"truncation.mode": "high-watermark"},
            },
            _LOST_COMMITS,
        ),
    ],
    ids=[
        "safe",
        "auto-commit",
        "acks=1",
        "unclean",
        "power-loss",
        "power-loss+fsync",
        "hw-truncation",
        "no-fencing",
        "hw-truncation+auto-commit",
    ],
)
def test_group_anomalies_are_expected_where_committed_data_may_vanish(
    spec: dict[str, Any], permitted: set[str]
) -> None:
    """A commit is a record of ``__consumer_offsets``, and so is the group's generation: where
    committed data may vanish, so may either, whatever the commit mode.  committed-beyond-read
    is the workload's arithmetic: never expected."""
    rules = applicable_rules(spec)
    assert {kind for kind in GROUP_CHECKS if expectation(kind, rules)[0]} == permitted


def test_planted_commit_and_generation_regressions_are_expected_under_hw_truncation(tmp_path: Path) -> None:
    plan = GroupPlan(
        seed=8,
        plant=((COMMIT_REGRESSION, 1), (COMMITTED_BEYOND_READ, 1), (GENERATION_REGRESSION, 1)),
        broker_config=(("truncation.mode", "high-watermark"),),
    )
    write_group_run(tmp_path, plan)
    anomalies = check(tmp_path)["anomalies"]
    for kind in (COMMIT_REGRESSION, GENERATION_REGRESSION):
        regression = anomalies[kind]
        assert regression["expected"] is True and regression["rule"] == "truncation.mode=high-watermark"
    assert anomalies[COMMITTED_BEYOND_READ]["expected"] is False
