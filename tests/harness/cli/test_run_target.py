"""``tidemark run --target tansu``: what it records in the spec, and the combinations refused in one
line (exit 254, before anything starts)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import run as run_cli
from harness.cli.errors import UsageError
from harness.cluster import tansu_image
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS
from harness.run.spec import TestSpec
from tests.harness.cli.commands import one_line_error, spec_of, tidemark


@pytest.fixture
def binary_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tansu_image, "cached_binary", lambda pin=tansu_image.TANSU_PIN: tmp_path / "tansu")


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
    monkeypatch.setattr(tansu_image, "cached_binary", lambda pin=tansu_image.TANSU_PIN: None)
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
