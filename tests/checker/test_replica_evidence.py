"""What the checker says when the target keeps one replica (tansu: PostgreSQL) or none it can dump
(an external cluster): the replica checks are named not applicable and the verdict rests on the
client history and the drain -- while a dump the target should have given still makes it unknown.
And the expectations of a log kept in PostgreSQL (``postgresql.fsync=off`` + power loss)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checker.api import check_runs
from checker.definitions import (
    ALL_CHECKS,
    DIVERGENT_TAIL,
    DUPLICATE,
    INVARIANT_CHECKS,
    LOST_WRITE,
    REPLICA_DIVERGENCE,
)
from checker.evidence import load_run
from checker.expectations import applicable_rules, expectation
from checker.pandas.engine import PandasEngine
from testbed.record.history import HistoryWriter
from testbed.record.ops import Op

TANSU_CONFIG = {"acks": "all", "postgresql.fsync": "on", "postgresql.synchronous_commit": "on"}


def write_run(run_dir: Path, *, evidence: str | None, nodes: list[str], lose: bool = False) -> Path:
    """Two acknowledged sends to partition 0 and a complete drain (holding both, or only the first)."""
    run_dir.mkdir(parents=True)
    drained = [{"offset": 0, "key": "k", "value": 1}] + (
        [] if lose else [{"offset": 1, "key": "k", "value": 2}]
    )
    steps: list[tuple[Any, str, str, Any]] = [
        (1, "invoke", "send", {"partition": 0, "key": "k", "value": 1}),
        (1, "ok", "send", {"partition": 0, "key": "k", "value": 1, "offset": 0}),
        (1, "invoke", "send", {"partition": 0, "key": "k", "value": 2}),
        (1, "ok", "send", {"partition": 0, "key": "k", "value": 2, "offset": 1}),
        (9, "invoke", "drain", {"partition": 0}),
        (
            9,
            "ok",
            "drain",
            {"partition": 0, "records": drained, "end_offset": len(drained), "complete": True},
        ),
    ]
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for index, (process, kind, f, value) in enumerate(steps):
            writer.append(Op(index, index * 1000, process, kind, f, value))  # type: ignore[arg-type]
    spec: dict[str, Any] = {
        "schema_version": 1,
        "name": "evidence",
        "topic": "queue",
        "workload": {"name": "queue", "partitions": 1, "acks": "all"},
        "broker_config": TANSU_CONFIG,
        "nemesis": {"faults": ["kill", "partition"]},
        "scenario": None,
        "nodes": nodes,
    }
    if evidence is not None:
        spec["replica_evidence"] = evidence
    (run_dir / "test.json").write_text(json.dumps(spec), encoding="utf-8")
    return run_dir


def write_dump(run_dir: Path, node: str) -> None:
    lines = [
        {"type": "partition", "topic": "queue", "partition": 0, "high_watermark": 2, "log_end_offset": 2}
        | {"log_start_offset": 0, "epochs": []},
        {
            "type": "record",
            "topic": "queue",
            "partition": 0,
            "offset": 0,
            "leader_epoch": -1,
            "key": "k",
            "value": "1",
        },
        {
            "type": "record",
            "topic": "queue",
            "partition": 0,
            "offset": 1,
            "leader_epoch": -1,
            "key": "k",
            "value": "2",
        },
    ]
    path = run_dir / "nodes" / node / "dump.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def check(run_dir: Path) -> dict[str, Any]:
    return check_runs([load_run(run_dir)], PandasEngine(), ALL_CHECKS, 5)[0]


def test_one_replica_is_valid_with_divergence_not_applicable(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path / "run", evidence="single-store: the log lives in one PostgreSQL", nodes=["pg"]
    )
    write_dump(run_dir, "pg")
    results = check(run_dir)
    assert results["valid"] is True, results["incomplete"]
    assert results["incomplete"] == []
    # No broker event logs either (tansu keeps none): the white-box checks do not apply.
    assert set(results["not_applicable"]) == {REPLICA_DIVERGENCE, DIVERGENT_TAIL, *INVARIANT_CHECKS}
    assert (
        "one replica only: the log lives in one PostgreSQL" in results["not_applicable"][REPLICA_DIVERGENCE]
    )
    assert results["stats"]["replicas"]["records"] == {"pg": 2}


def test_a_target_with_no_dumps_gets_a_verdict_from_the_history_and_the_drain(tmp_path: Path) -> None:
    valid = check(write_run(tmp_path / "valid", evidence="none: an external cluster", nodes=[]))
    assert valid["valid"] is True and valid["incomplete"] == []
    assert valid["not_applicable"][REPLICA_DIVERGENCE] == "no replica dumps: an external cluster"
    lossy = check(write_run(tmp_path / "lossy", evidence="none: an external cluster", nodes=[], lose=True))
    assert lossy["valid"] is False
    assert lossy["anomalies"][LOST_WRITE]["count"] == 1


def test_runs_stored_before_the_kinds_read_unavailable_as_none(tmp_path: Path) -> None:
    results = check(write_run(tmp_path / "run", evidence="unavailable (external cluster)", nodes=[]))
    assert results["valid"] is True
    assert results["not_applicable"][REPLICA_DIVERGENCE] == "no replica dumps: unavailable (external cluster)"


@pytest.mark.parametrize("evidence", [None, "dumps", "single-store: one PostgreSQL"])
def test_a_dump_the_target_should_have_given_still_makes_the_verdict_unknown(
    tmp_path: Path, evidence: str | None
) -> None:
    results = check(write_run(tmp_path / "run", evidence=evidence, nodes=["pg"]))
    assert results["valid"] == "unknown"
    assert any("no replica dumps" in reason for reason in results["incomplete"])


def _spec(config: dict[str, str], faults: list[str]) -> dict[str, Any]:
    return {"workload": {"acks": "all"}, "broker_config": config, "nemesis": {"faults": faults}}


@pytest.mark.parametrize(
    ("settings", "faults", "rule"),
    [
        ({"postgresql.fsync": "off"}, ["power-loss"], "postgresql.fsync=off + power-loss"),
        ({"postgresql.fsync": "off"}, ["kill", "partition"], None),  # a crash keeps the page cache
        ({}, ["power-loss", "kill"], None),  # PostgreSQL's defaults: nothing acknowledged may be lost
        ({"postgresql.synchronous_commit": "off"}, ["kill"], "postgresql.synchronous_commit=off + kill"),
        (
            {"postgresql.synchronous_commit": "off"},
            ["power-loss", "kill"],
            "postgresql.synchronous_commit=off + power-loss or kill",
        ),
    ],
)
def test_postgresql_durability_settings_decide_what_loss_is_expected(
    settings: dict[str, str], faults: list[str], rule: str | None
) -> None:
    rules = applicable_rules(_spec({**TANSU_CONFIG, **settings}, faults))
    assert expectation(LOST_WRITE, rules) == ((True, rule) if rule else (False, None))
    assert expectation(REPLICA_DIVERGENCE, rules) == (False, None)


def test_the_kafka_rules_do_not_describe_a_log_kept_in_postgresql() -> None:
    # Without flush.messages recorded, a bundled run with power loss expects loss; a tansu run does not.
    assert expectation(LOST_WRITE, applicable_rules(_spec({}, ["power-loss"])))[0] is True
    assert applicable_rules(_spec(TANSU_CONFIG, ["power-loss"])) == []
    acks_one = {"workload": {"acks": "1"}, "broker_config": TANSU_CONFIG, "nemesis": {"faults": ["kill"]}}
    assert applicable_rules(acks_one) == []  # tansu acknowledges after the commit whatever acks says


def test_nisshi_on_sqlite_may_lose_acknowledged_writes_at_a_power_loss_and_at_nothing_else() -> None:
    sqlite = {"nisshi.storage": "sqlite"}
    rules = applicable_rules(_spec(sqlite, ["power-loss", "kill"]))
    assert expectation(LOST_WRITE, rules) == (True, "nisshi.storage=sqlite + power-loss")
    assert expectation(REPLICA_DIVERGENCE, rules) == (False, None)
    assert applicable_rules(_spec(sqlite, ["kill", "pause", "partition"])) == []  # the WAL outlives a crash
    on_postgresql = {"nisshi.storage": "postgresql", **TANSU_CONFIG}
    assert applicable_rules(_spec(on_postgresql, ["power-loss"])) == []  # PostgreSQL's rules, its defaults


@pytest.mark.parametrize("config", [{}, TANSU_CONFIG], ids=["bundled", "tansu"])
def test_producers_without_idempotence_permit_duplicates_and_nothing_else(config: dict[str, str]) -> None:
    plain = {
        "workload": {"acks": "all", "idempotent": False},
        "broker_config": config,
        "nemesis": {"faults": ["kill"]},
    }
    rules = applicable_rules(plain)
    assert [rule.name for rule in rules] == ["idempotent=false"]
    assert expectation(DUPLICATE, rules) == (True, "idempotent=false")
    assert expectation(LOST_WRITE, rules) == (False, None)
    idempotent = {**plain, "workload": {"acks": "all", "idempotent": True}}
    assert applicable_rules(idempotent) == []
    unrecorded = {**plain, "workload": {"acks": "all"}}  # a run stored before the field: no rule
    assert applicable_rules(unrecorded) == []
