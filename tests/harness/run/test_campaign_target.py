"""A campaign's ``target`` (campaign-wide, per matrix value, per hunt), its settings checked against
that target, several ``[[matrix]]`` tables, and the shipped tansu campaign -- all planned, none run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.run.campaign import CampaignError, load_campaign, plan_campaign

REPOSITORY = Path(__file__).resolve().parents[3]
TANSU_WORKLOAD = {"partitions": 2, "replication_factor": 1, "isolation": "read_uncommitted"}


def plan(**data: Any) -> Any:
    return plan_campaign({"name": "c", "nodes": 2, "workload": TANSU_WORKLOAD, **data}, Path("c.toml"))


def test_a_campaign_wide_target_reaches_every_run_and_its_settings_are_the_targets() -> None:
    campaign = plan(target="tansu", matrix={"nemesis": ["kill"], "postgresql.fsync": ["on", "off"]})
    assert [run.spec.target for run in campaign.runs] == ["tansu", "tansu"]
    assert [run.spec.broker_config()["postgresql.fsync"] for run in campaign.runs] == ["on", "off"]
    assert plan(matrix={"nemesis": ["kill"]}).runs[0].spec.target == "bundled", "the default"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"target": "kafka"}, "c.toml: target: expected one of bundled, tansu, nisshi, not 'kafka'"),
        (
            {"matrix": {"target": ["tansu", "x"]}},
            "c.toml: matrix.target: expected one of bundled, tansu, nisshi, not 'x'",
        ),
        (
            {"target": "tansu", "matrix": {"truncation.mode": ["leader-epoch"]}},
            "c.toml: run truncation.mode=leader-epoch__r0: --set truncation.mode: not a setting of the tansu target",
        ),
        (
            {"matrix": {"postgresql.fsync": ["off"]}},
            "c.toml: run postgresql.fsync=off__r0: --set postgresql.fsync: unknown broker or controller setting",
        ),
        (
            {"matrix": [{"nemesis": ["kill"]}, {"nemesis": ["kill", "pause"]}]},
            "c.toml: run nemesis=kill__r0 is planned twice (by two [[matrix]] tables)",
        ),
        (
            {"matrix": [{"nemesis": ["kill"]}, {"acks": []}]},
            "c.toml: matrix[2].acks must be a non-empty list",
        ),
        (
            {"target": "bundled", "matrix": {"scenario": ["tansu-pg-power-loss"]}},
            "c.toml: run scenario=tansu-pg-power-loss__r0: target bundled conflicts with scenario "
            'tansu-pg-power-loss\'s target = "tansu"',
        ),
    ],
)
def test_bad_targets_and_settings_name_the_file_and_the_key_or_run(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(CampaignError) as caught:
        plan(**data)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_target_axis_plans_runs_of_both_targets() -> None:
    campaign = plan(matrix={"target": ["bundled", "tansu"], "nemesis": ["kill"]})
    assert [(run.key, run.spec.target) for run in campaign.runs] == [
        ("target=bundled__nemesis=kill__r0", "bundled"),
        ("target=tansu__nemesis=kill__r0", "tansu"),
    ]


def test_a_scenario_brings_its_own_target_unless_the_campaign_names_the_same() -> None:
    for data in ({}, {"target": "tansu"}):
        (run,) = plan(matrix={"scenario": ["tansu-pg-power-loss"]}, **data).runs
        assert run.spec.target == "tansu" and run.spec.power_loss_filesystem


def test_matrix_tables_are_expanded_one_by_one_and_joined() -> None:
    campaign = plan(
        target="tansu",
        repeats=2,
        matrix=[
            {"nemesis": ["kill", "pause"], "postgresql.fsync": ["on"]},
            {"scenario": ["tansu-pg-power-loss"], "postgresql.fsync": ["on", "off"]},
        ],
    )
    assert [run.key for run in campaign.runs] == [
        "nemesis=kill__postgresql.fsync=on__r0",
        "nemesis=kill__postgresql.fsync=on__r1",
        "nemesis=pause__postgresql.fsync=on__r0",
        "nemesis=pause__postgresql.fsync=on__r1",
        "scenario=tansu-pg-power-loss__postgresql.fsync=on__r0",
        "scenario=tansu-pg-power-loss__postgresql.fsync=on__r1",
        "scenario=tansu-pg-power-loss__postgresql.fsync=off__r0",
        "scenario=tansu-pg-power-loss__postgresql.fsync=off__r1",
    ]


def test_a_hunt_takes_the_campaigns_target_or_its_own() -> None:
    hunts: list[dict[str, Any]] = [
        {"name": "on-tansu", "budget": "1m", "nemesis": "kill", "settings": {"postgresql.fsync": "off"}},
        {"name": "on-bundled", "budget": "1m", "nemesis": "kill", "target": "bundled", "settings": {}},
    ]
    first, second = plan(target="tansu", hunt=hunts).hunts
    assert (first.spec.target, first.spec.broker_config()["postgresql.fsync"]) == ("tansu", "off")
    assert second.spec.target == "bundled"
    with pytest.raises(CampaignError, match=r"^c\.toml: hunt h: target: expected one of bundled, tansu"):
        plan(hunt=[{"name": "h", "budget": "1m", "nemesis": "kill", "target": "pg"}])
    with pytest.raises(CampaignError, match=r"^c\.toml: hunt h: --set postgresql\.fsync: unknown broker"):
        plan(hunt=[{"name": "h", "budget": "1m", "nemesis": "kill", "settings": {"postgresql.fsync": "off"}}])


def test_the_shipped_tansu_campaign_faults_both_tiers_under_both_postgresql_settings() -> None:
    campaign = load_campaign(REPOSITORY / "harness" / "run" / "campaigns" / "tansu.toml")
    runs = campaign.runs
    assert {run.spec.target for run in runs} == {"tansu"}
    fsync = {run.spec.broker_config()["postgresql.fsync"] for run in runs}
    assert fsync == {"on", "off"}
    random = {
        (run.spec.nemesis.faults, run.spec.settings["postgresql.fsync"])
        for run in runs
        if not run.spec.scenario
    }
    assert random == {
        ((fault,), value) for fault in ("kill", "pause", "partition") for value in ("on", "off")
    }
    power = [run for run in runs if run.spec.scenario]
    assert {run.spec.scenario for run in power} == {"tansu-pg-power-loss"}
    assert {run.spec.settings["postgresql.fsync"] for run in power} == {"on", "off"}
    assert all(run.spec.power_loss_filesystem for run in power)
    assert len(runs) == (6 + 2) * 3, "three repeats of each"
    assert {run.spec.workload.isolation for run in runs} == {"read_uncommitted"}


def test_every_shipped_campaign_plans() -> None:
    for path in sorted((REPOSITORY / "harness" / "run" / "campaigns").glob("*.toml")):
        assert load_campaign(path).runs or load_campaign(path).hunts, path


def test_the_shipped_nisshi_campaign_hunts_both_stores_and_a_hunt_may_size_its_own_cluster() -> None:
    campaign = load_campaign(REPOSITORY / "harness" / "run" / "campaigns" / "nisshi.toml")
    hunts = {hunt.key: hunt.spec for hunt in campaign.hunts}
    assert sorted(hunts) == ["postgresql", "postgresql-groups", "sqlite"]
    assert {spec.target for spec in hunts.values()} == {"nisshi"}
    assert {key: spec.node_count for key, spec in hunts.items()} == {
        "postgresql": 2,
        "postgresql-groups": 2,
        "sqlite": 1,
    }
    assert hunts["sqlite"].broker_config()["nisshi.storage"] == "sqlite"
    assert hunts["postgresql"].broker_config()["nisshi.storage"] == "postgresql"
    assert hunts["postgresql-groups"].workload.consume_via == "subscribe"
    assert all(hunt.unexpected_only for hunt in campaign.hunts), "permitted duplicates end no hunt"
    with pytest.raises(CampaignError, match=r"nisshi on SQLite runs one broker"):
        plan(
            target="nisshi",
            hunt=[{"name": "h", "budget": "1m", "nemesis": "kill", "settings": {"nisshi.storage": "sqlite"}}],
        )
