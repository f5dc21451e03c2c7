"""Configuration files: Kafka key names, Kafka defaults, and errors that say where.

A typo in a harness configuration must never fall back silently to a default: the run
would test something else than what its report claims.  So every error is checked for
the file, the line and the key it names -- in the parser and in the real processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker_impl import config
from broker_impl.config import BROKER_KEYS, CONTROLLER_KEYS, NEVER, ConfigError

REPOSITORY = Path(__file__).resolve().parents[2]

MINIMAL_BROKER = """\
# a broker
node.id=1
listeners=PLAINTEXT://127.0.0.1:9092
controller.quorum.bootstrap.servers=127.0.0.1:9093
log.dirs=/tmp/data
"""


def write(tmp_path: Path, text: str, name: str = "broker.properties") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- errors name the file, the line and the key ------------------------------------------


def test_unknown_key_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL_BROKER + "\nmin.insync.replica=2\n")
    with pytest.raises(ConfigError) as caught:
        config.load(path, BROKER_KEYS)
    assert str(caught.value) == f"{path}:7: unknown key 'min.insync.replica'"


def test_bad_value_names_file_line_key_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "node.id=1\n# comment\n\nmin.insync.replicas=two\n")
    with pytest.raises(ConfigError) as caught:
        config.load(path, BROKER_KEYS)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: bad value 'two' for min.insync.replicas")


@pytest.mark.parametrize(
    ("keys", "line", "fragment"),
    [
        (BROKER_KEYS, "min.insync.replicas=0", "must be > 0"),
        (BROKER_KEYS, "replica.fetch.wait.max.ms=-1", "must be >= 0"),
        (CONTROLLER_KEYS, "unclean.leader.election.enable=yes", "expected true or false"),
        (BROKER_KEYS, "truncation.mode=epoch", "expected high-watermark or leader-epoch"),
        (BROKER_KEYS, "leader.epoch.lookup=once", "expected iterative or single"),
        (BROKER_KEYS, "isr.join.offset=hw", "expected epoch-start or high-watermark"),
        (BROKER_KEYS, "leader.epoch.fencing.enable=off", "expected true or false"),
        (BROKER_KEYS, "min.insync.replicas.strict=1", "expected true or false"),
        (CONTROLLER_KEYS, "eligible.leader.replicas.enable=no", "expected true or false"),
        (BROKER_KEYS, "listeners=PLAINTEXT://a:1,PLAINTEXT://b:2", "only one listener"),
        (BROKER_KEYS, "listeners=PLAINTEXT://host", "expected NAME://host:port"),
        (BROKER_KEYS, "flush.messages=1.5", "expected an integer"),
    ],
)
def test_each_value_check_reports_why(
    tmp_path: Path, keys: tuple[config.Key, ...], line: str, fragment: str
) -> None:
    path = write(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as caught:
        config.parse_properties(path.read_text(), str(path), keys)
    key = line.split("=", 1)[0]
    assert f"{path}:1: bad value" in str(caught.value)
    assert key in str(caught.value)
    assert fragment in str(caught.value)


def test_line_without_equals_sign_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^f\.properties:2: expected key=value, got 'node\.id 1'$"):
        config.parse_properties("# x\nnode.id 1\n", "f.properties", BROKER_KEYS)


def test_missing_required_key_names_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nlog.dirs=/tmp/d\n")
    with pytest.raises(ConfigError) as caught:
        config.load(path, BROKER_KEYS)
    assert str(caught.value) == f"{path}: required key 'controller.quorum.bootstrap.servers' is missing"


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.properties", BROKER_KEYS)


# ---- defaults are Kafka's ------------------------------------------------------------------


def test_broker_defaults_are_kafkas(tmp_path: Path) -> None:
    values = config.load(write(tmp_path, MINIMAL_BROKER), BROKER_KEYS)
    assert values["flush.messages"] == NEVER == 2**63 - 1
    assert values["flush.ms"] == NEVER
    assert values["replica.lag.time.max.ms"] == 30000
    assert values["replica.high.watermark.checkpoint.interval.ms"] == 5000
    assert values["replica.fetch.wait.max.ms"] == 500
    assert values["min.insync.replicas"] == 1
    assert values["truncation.mode"] == "leader-epoch"
    assert values["advertised.listeners"] is None  # optional: the broker falls back to listeners
    assert values["listeners"] == ("127.0.0.1", 9092)
    assert values["controller.quorum.bootstrap.servers"] == ("127.0.0.1", 9093)
    assert values["node.id"] == 1


def test_controller_defaults_are_kafkas() -> None:
    values = config.parse_properties("listeners=CONTROLLER://127.0.0.1:9093\n", "c", CONTROLLER_KEYS)
    assert values["broker.session.timeout.ms"] == 9000
    assert values["unclean.leader.election.enable"] is False
    assert values["metadata.log.dir"] is None


def test_every_declared_key_gets_its_default_when_absent() -> None:
    values = config.parse_properties("", "empty", BROKER_KEYS)
    assert values == {key.name: key.default for key in BROKER_KEYS}


# ---- values and overrides -------------------------------------------------------------------


def test_values_are_parsed_and_trimmed() -> None:
    values = config.parse_properties(
        "  unclean.leader.election.enable = TRUE \nlisteners=:9093\ncluster.id=a=b\n! bang comment\n",
        "c",
        CONTROLLER_KEYS,
    )
    assert values["unclean.leader.election.enable"] is True
    assert values["listeners"] == ("0.0.0.0", 9093)
    assert values["cluster.id"] == "a=b"  # only the first '=' separates


def test_overrides_replace_file_values_with_the_same_checks() -> None:
    values = config.parse_properties("min.insync.replicas=1\n", "b", BROKER_KEYS)
    config.apply_overrides(
        values, {"min.insync.replicas": "2", "truncation.mode": "high-watermark"}, "--set", BROKER_KEYS
    )
    assert values["min.insync.replicas"] == 2
    assert values["truncation.mode"] == "high-watermark"
    with pytest.raises(ConfigError, match=r"^--set: unknown key 'min\.isr'$"):
        config.apply_overrides(values, {"min.isr": "2"}, "--set", BROKER_KEYS)
    with pytest.raises(ConfigError, match=r"^--set: bad value 'x' for flush\.ms"):
        config.apply_overrides(values, {"flush.ms": "x"}, "--set", BROKER_KEYS)
    assert values["min.insync.replicas"] == 2  # a rejected override changes nothing


def test_key_routing_for_launchers() -> None:
    assert config.broker_keys_accepting("flush.messages")
    assert not config.broker_keys_accepting("broker.session.timeout.ms")
    assert config.controller_keys_accepting("broker.session.timeout.ms")
    assert not config.controller_keys_accepting("flush.messages")


def test_rendered_file_parses_back_to_the_same_settings() -> None:
    settings = {
        "node.id": "4",
        "listeners": "PLAINTEXT://127.0.0.5:9000",
        "log.dirs": "/d",
        "controller.quorum.bootstrap.servers": "127.0.0.1:1",
        "auto.create.topics.enable": False,
    }
    values = config.parse_properties(config.render(settings), "r", BROKER_KEYS)
    assert values["node.id"] == 4
    assert values["listeners"] == ("127.0.0.5", 9000)
    assert values["auto.create.topics.enable"] is False


# ---- the real processes refuse bad files with exit code 2 -------------------------------------


@pytest.mark.parametrize(
    ("module", "text", "line"),
    [
        ("broker_impl.broker", MINIMAL_BROKER + "flush.mesages=1\n", 6),
        ("broker_impl.controller", "listeners=CONTROLLER://127.0.0.1:1\nsession.timeout=5\n", 2),
    ],
)
def test_processes_exit_2_naming_file_line_and_key(tmp_path: Path, module: str, text: str, line: int) -> None:
    path = write(tmp_path, text)
    finished = subprocess.run(
        [sys.executable, "-m", module, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
    )
    assert finished.returncode == 2
    key = text.splitlines()[line - 1].split("=")[0]
    assert f"{path}:{line}: unknown key {key!r}" in finished.stderr
    assert "Traceback" not in finished.stderr
