"""One spec check for every command: what ``tidemark run`` refuses, ``hunt``, ``rerun`` and a
campaign refuse too, in the same words (:func:`harness.targets.registry.check_spec`).

Before targets were objects a campaign skipped the checks: a tansu campaign with metadata delay
planned, and each run failed inside.  Nothing starts here: the run, the hunt loop and the rerun
are replaced by stand-ins that fail the test if they are reached.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from harness.cli import hunt as hunt_cli
from harness.cli import rerun as rerun_cli
from harness.cli import run as run_cli
from harness.cli.errors import UsageError
from harness.run import campaign_run
from harness.run.campaign import CampaignError, plan_campaign
from harness.run.runner import write_spec
from testbed.cluster import crate_image
from testbed.record.rundir import RunDir

TANSU = ["--target", "tansu", "--nodes", "2", "--replication-factor", "1"]
TANSU_CAMPAIGN: dict[str, Any] = {"target": "tansu", "nodes": 2, "workload": {"replication_factor": 1}}
ONE_BROKER: dict[str, Any] = {"nodes": 1, "workload": {"replication_factor": 1}}
NISSHI = ["--target", "nisshi", "--nodes", "2", "--replication-factor", "1"]
NISSHI_CAMPAIGN: dict[str, Any] = {"target": "nisshi", "nodes": 2, "workload": {"replication_factor": 1}}
SQLITE = ["--set", "nisshi.storage=sqlite"]

CASES = [
    pytest.param(
        [*TANSU, "--nemesis", "metadata-delay"],
        {**TANSU_CAMPAIGN, "matrix": {"nemesis": ["metadata-delay"]}},
        "--nemesis metadata-delay cuts brokers off a controller node",
        id="tansu-metadata-delay",
    ),
    pytest.param(
        [*TANSU, "--nemesis", "kill", "--partition-scope", "all"],
        {**TANSU_CAMPAIGN, "nemesis": {"partition_scope": "all"}, "matrix": {"nemesis": ["kill"]}},
        "--partition-scope all: with --target tansu partitions always include the PostgreSQL node",
        id="tansu-partition-scope",
    ),
    pytest.param(
        [*TANSU, "--nemesis", "kill", "--txn"],
        {
            **TANSU_CAMPAIGN,
            "workload": {"replication_factor": 1, "txn": True},
            "matrix": {"nemesis": ["kill"]},
        },
        "--txn: tansu 0.6.0 offers no EndTxn",
        id="tansu-txn",
    ),
    pytest.param(
        [*NISSHI, "--nemesis", "kill", "--txn"],
        {
            **NISSHI_CAMPAIGN,
            "workload": {"replication_factor": 1, "txn": True},
            "matrix": {"nemesis": ["kill"]},
        },
        "--txn: nisshi 0.8.1 refuses transactions",
        id="nisshi-txn",
    ),
    pytest.param(
        [*NISSHI, "--nemesis", "disk-error"],
        {**NISSHI_CAMPAIGN, "matrix": {"nemesis": ["disk-error"]}},
        "--nemesis disk-error/slow-disk: nisshi on PostgreSQL keeps its log in PostgreSQL's files",
        id="nisshi-pg-disk-faults",
    ),
    pytest.param(
        [*NISSHI, *SQLITE, "--nemesis", "kill"],
        {**NISSHI_CAMPAIGN, "settings": {"nisshi.storage": "sqlite"}, "matrix": {"nemesis": ["kill"]}},
        "--nodes 2: nisshi on SQLite runs one broker",
        id="nisshi-sqlite-brokers",
    ),
    pytest.param(
        [*TANSU, "--nemesis", "kill,controller-kill"],
        {**TANSU_CAMPAIGN, "matrix": {"nemesis": ["kill,controller-kill"]}},
        "--nemesis controller-kill needs a controller process on the controller node the harness can kill"
        " and start (the bundled broker's): the tansu target has none",
        id="tansu-controller-kill",
    ),
    pytest.param(
        [*TANSU, "--nemesis", "disk-error"],
        {**TANSU_CAMPAIGN, "matrix": {"nemesis": ["disk-error"]}},
        "--nemesis disk-error needs a cluster whose data directories are on the lazy filesystem and take"
        " its disk-fault rules (the bundled broker's): the tansu target has none",
        id="tansu-disk-faults",
    ),
    pytest.param(
        [*NISSHI, *SQLITE, "--nodes", "1", "--nemesis", "controller-kill"],
        {
            **NISSHI_CAMPAIGN,
            "nodes": 1,
            "settings": {"nisshi.storage": "sqlite"},
            "matrix": {"nemesis": ["controller-kill"]},
        },
        "--nemesis controller-kill needs a controller process",
        id="nisshi-controller-kill",
    ),
    pytest.param(
        ["--nodes", "1", "--replication-factor", "1", "--nemesis", "overlapping-faults"],
        {**ONE_BROKER, "matrix": {"nemesis": ["overlapping-faults"]}},
        "--nemesis: overlapping-faults needs two brokers",
        id="bundled-package",
    ),
]


@pytest.fixture
def binary_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(crate_image, "cached_binary", lambda pin: tmp_path / "tansu")


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*arguments: object, **named: object) -> Any:
        raise AssertionError("a refused spec must not start")

    monkeypatch.setattr(run_cli, "run_and_report", unreachable)
    monkeypatch.setattr(hunt_cli, "hunt", unreachable)
    monkeypatch.setattr(rerun_cli, "run_test", unreachable)
    monkeypatch.setattr(campaign_run, "run_test", unreachable)
    monkeypatch.setattr(campaign_run, "hunt", unreachable)


def refusal_of_run(arguments: list[str]) -> str:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    with pytest.raises(UsageError) as caught:
        run_cli.run(parser.parse_args(arguments))
    return str(caught.value)


def refusal_of_hunt(arguments: list[str], store: Path) -> str:
    parser = argparse.ArgumentParser()
    hunt_cli.add_arguments(parser)
    with pytest.raises(UsageError) as caught:
        hunt_cli.run(parser.parse_args([*arguments, "--budget", "1m", "--store", str(store)]))
    return str(caught.value)


def refusal_of_rerun(arguments: list[str], tmp_path: Path) -> str:
    """A stored run of the spec ``tidemark run ARGUMENTS`` would run (its test.json), re-run."""
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    run_dir = RunDir(tmp_path / "stored-run")
    run_dir.path.mkdir()
    write_spec(run_cli.spec_from_arguments(parser.parse_args(arguments)), run_dir)
    rerun_parser = argparse.ArgumentParser()
    rerun_cli.add_arguments(rerun_parser)
    with pytest.raises(UsageError) as caught:
        rerun_cli.run(rerun_parser.parse_args([str(run_dir.path), "--store", str(tmp_path / "store")]))
    return str(caught.value)


def refusal_of_campaign(data: dict[str, Any]) -> str:
    """The refusal of planning the campaign ``data``, without the ``FILE: run KEY: `` it starts with."""
    with pytest.raises(CampaignError) as caught:
        plan_campaign({"name": "c", **data}, Path("c.toml"))
    where, _, message = str(caught.value).partition("__r0: ")
    assert where.startswith("c.toml: run "), str(caught.value)
    return message


@pytest.mark.parametrize(("arguments", "campaign", "message"), CASES)
def test_run_hunt_rerun_and_campaign_refuse_a_spec_alike(
    arguments: list[str],
    campaign: dict[str, Any],
    message: str,
    binary_built: None,
    nothing_starts: None,
    tmp_path: Path,
) -> None:
    refusals = {
        "run": refusal_of_run(arguments),
        "hunt": refusal_of_hunt(arguments, tmp_path / "hunts"),
        "rerun": refusal_of_rerun(arguments, tmp_path),
        "campaign": refusal_of_campaign(campaign),
    }
    assert refusals["run"].startswith(message), refusals
    assert set(refusals.values()) == {refusals["run"]}, refusals


def test_a_campaign_hunt_is_refused_as_tidemark_hunt_refuses_it(binary_built: None) -> None:
    data = {**TANSU_CAMPAIGN, "hunt": [{"name": "h", "budget": "1m", "nemesis": "kill,metadata-delay"}]}
    with pytest.raises(CampaignError, match=r"^c\.toml: hunt h: --nemesis metadata-delay cuts brokers off"):
        plan_campaign({"name": "c", **data}, Path("c.toml"))


def test_a_missing_binary_stops_a_campaign_before_anything_runs_as_it_stops_run(
    monkeypatch: pytest.MonkeyPatch, nothing_starts: None, tmp_path: Path
) -> None:
    monkeypatch.setattr(crate_image, "cached_binary", lambda pin: None)
    source = tmp_path / "c.toml"
    source.write_text("", encoding="utf-8")
    campaign = plan_campaign({"name": "c", **TANSU_CAMPAIGN, "matrix": {"nemesis": ["kill"]}}, source)
    with pytest.raises(CampaignError) as caught:
        campaign_run.run_campaign(campaign, tmp_path / "store", engine="pandas")
    assert str(caught.value) == f"{source}: {refusal_of_run([*TANSU, '--nemesis', 'kill'])}"
    assert "tidemark image build --target tansu" in str(caught.value)
    assert not (tmp_path / "store").exists(), "refused before anything is written"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"nisshi.storage": "s3"}, "--set nisshi.storage=s3: must be one of postgresql, sqlite"),
        (
            {"nisshi.storage": "sqlite", "postgresql.fsync": "off"},
            "--set postgresql.fsync: not a setting of the nisshi target on SQLite",
        ),
        ({"truncation.mode": "high-watermark"}, "--set truncation.mode: not a setting of the nisshi target"),
    ],
)
def test_a_setting_nisshi_does_not_have_is_refused_naming_it(settings: dict[str, str], message: str) -> None:
    from harness.run.spec import TestSpec
    from harness.targets.base import SpecRefused
    from harness.targets.registry import check_spec
    from workloads.queue import QueueSpec

    with pytest.raises(SpecRefused, match=f"^{re.escape(message)}"):
        check_spec(
            TestSpec(
                target="nisshi", node_count=1, settings=settings, workload=QueueSpec(replication_factor=1)
            )
        )
