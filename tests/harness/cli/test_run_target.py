"""``tidemark run --target tansu``: what it records in the spec, and the combinations refused in one
line (exit 254, before anything starts)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from harness.cli import run as run_cli
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS
from harness.run.spec import TestSpec
from testbed.cluster import crate_image
from tests.harness.cli.commands import one_line_error, spec_of, tidemark


@pytest.fixture
def binary_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(crate_image, "cached_binary", lambda pin: tmp_path / "tansu")


def test_bundled_is_the_default_target() -> None:
    spec = spec_of()
    assert spec.target == "bundled"
    assert spec.to_dict()["target"] == "bundled"
    assert "truncation.mode" in spec.broker_config()


def test_the_tansu_target_records_postgresql_settings_and_survives_a_round_trip() -> None:
    spec = spec_of(
        "--target", "tansu", "--nodes", "2", "--replication-factor", "1", "--set", "postgresql.fsync=false"
    )
    document = spec.to_dict()
    assert document["target"] == "tansu"
    assert document["broker_config"] == {
        "acks": "all",
        "postgresql.fsync": "off",
        "postgresql.synchronous_commit": "on",
    }
    assert TestSpec.from_dict(document) == spec


def test_an_accepted_tansu_spec_passes_the_checks(binary_built: None) -> None:
    run_cli.check_spec(spec_of("--target", "tansu", "--nemesis", "kill,pause,partition,power-loss"))


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (
            ["--bootstrap", "h:9092"],
            "--target tansu starts its own brokers and PostgreSQL: not with --bootstrap",
        ),
        (["--nemesis", "metadata-delay"], "--nemesis metadata-delay cuts brokers off a controller node"),
        (["--partition-scope", "all"], "--partition-scope all: with --target tansu"),
        (
            ["--set", "truncation.mode=high-watermark"],
            "--set truncation.mode: not a setting of the tansu target",
        ),
        (["--set", "postgresql.fsync=maybe"], "--set postgresql.fsync=maybe: expected one of on, off"),
    ],
)
def test_what_tansu_cannot_do_is_refused_naming_the_flag(
    arguments: list[str], fragment: str, binary_built: None
) -> None:
    with pytest.raises(UsageError, match=re.escape(fragment)):
        run_cli.check_spec(spec_of("--target", "tansu", *arguments))


def test_a_missing_binary_names_the_command_that_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crate_image, "cached_binary", lambda pin: None)
    with pytest.raises(UsageError, match=r"tidemark image build --target tansu"):
        run_cli.check_spec(spec_of("--target", "tansu"))


def test_tansu_settings_are_refused_for_the_bundled_broker() -> None:
    with pytest.raises(UsageError, match=r"--set postgresql\.fsync: unknown broker or controller setting"):
        run_cli.check_spec(spec_of("--set", "postgresql.fsync=off"))


def test_the_refusal_is_one_line_and_exit_254_from_the_command(tmp_path: Path) -> None:
    result = tidemark(
        "run", "--target", "tansu", "--bootstrap", "127.0.0.1:9", "--store", str(tmp_path), timeout=60
    )
    one_line_error(result, EXIT_BAD_ARGUMENTS, "--target tansu starts its own brokers and PostgreSQL")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- a scenario's target


def spec_run_would_start(monkeypatch: pytest.MonkeyPatch, *arguments: str) -> TestSpec:
    """The spec ``tidemark run ARGUMENTS`` would start, caught where the run would begin."""
    started: list[TestSpec] = []

    def run_and_report(spec: TestSpec, *rest: object, **named: object) -> int:
        started.append(spec)
        return 0

    monkeypatch.setattr(run_cli, "run_and_report", run_and_report)
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    assert run_cli.run(parser.parse_args(list(arguments))) == 0
    (spec,) = started
    return spec


def test_a_tansu_scenario_runs_on_tansu_without_target(
    monkeypatch: pytest.MonkeyPatch, binary_built: None
) -> None:
    spec = spec_run_would_start(
        monkeypatch, "--scenario", "tansu-pg-power-loss", "--set", "postgresql.fsync=off"
    )
    assert (spec.target, spec.node_count, spec.power_loss_filesystem) == ("tansu", 2, True)
    assert spec.broker_config()["postgresql.fsync"] == "off"
    again = spec_run_would_start(monkeypatch, "--scenario", "tansu-pg-power-loss", "--target", "tansu")
    assert again.target == "tansu"


def test_a_scenario_without_a_target_runs_on_the_one_asked_for(
    monkeypatch: pytest.MonkeyPatch, binary_built: None, tmp_path: Path
) -> None:
    path = tmp_path / "anywhere.toml"
    path.write_text(
        'name = "anywhere"\nnode_count = 2\n[workload]\nreplication_factor = 1\n'
        '[[step]]\nsleep = 1\nwhy = "w"\n',
        encoding="utf-8",
    )
    assert spec_run_would_start(monkeypatch, "--scenario", str(path), "--target", "tansu").target == "tansu"
    assert spec_run_would_start(monkeypatch, "--scenario", str(path)).target == "bundled"


def test_a_target_that_conflicts_with_the_scenarios_is_one_line_naming_both(tmp_path: Path) -> None:
    result = tidemark(
        "run",
        "--scenario",
        "tansu-pg-power-loss",
        "--target",
        "bundled",
        "--store",
        str(tmp_path),
        timeout=60,
    )
    line = one_line_error(
        result, EXIT_BAD_ARGUMENTS, "--target bundled", "tansu-pg-power-loss", 'target = "tansu"'
    )
    assert "tansu-pg-power-loss.toml" in line
    assert list(tmp_path.iterdir()) == []


def test_a_scenario_file_with_a_bad_target_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "m"\ntarget = "kafka"\n[[step]]\nsleep = 1\nwhy = "w"\n', encoding="utf-8")
    result = tidemark("run", "--scenario", str(path), "--store", str(tmp_path / "store"), timeout=60)
    one_line_error(
        result, EXIT_BAD_ARGUMENTS, f"{path}: target: expected one of bundled, tansu, nisshi, not 'kafka'"
    )
