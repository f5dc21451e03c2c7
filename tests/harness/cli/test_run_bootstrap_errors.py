"""``tidemark run --bootstrap`` against clusters that cannot be tested fails in one line.

Each case runs the real command as a subprocess against real sockets on 127.0.0.1: a
port nothing listens on, a listener that is not Kafka, and a fake Kafka broker
(:mod:`tests.testbed.cluster.fake_kafka`) that offers protocol versions the clients
cannot use or refuses the run's topic.  The promise: exit 254 (bad arguments) or 2
(unknown: nothing was tested), one line on stderr naming the address and what failed,
never a traceback -- and no run directory for a run that never started.  A cluster that
passes the probe but fails the run's set-up (a leftover topic of another shape, here on
the bundled broker as local processes) ends the same way, its run directory kept.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_UNKNOWN
from tests.harness.cli.commands import one_line_error, tidemark
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from tests.testbed.cluster.fake_kafka import OLD_KAFKA_RANGES, FakeKafka


def tidemark_run(bootstrap: str, store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return tidemark(
        "run", "--bootstrap", bootstrap, "--time-limit", "2", "--store", str(store), *extra, timeout=120
    )


@pytest.fixture
def refused_address() -> Iterator[str]:
    """A 127.0.0.1 port bound but not listening: connecting to it is refused, and nobody else gets it."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{reserved.getsockname()[1]}"


def test_nothing_listening_is_unknown_in_one_line_without_a_run_directory(
    refused_address: str, tmp_path: Path
) -> None:
    result = tidemark_run(refused_address, tmp_path / "store")
    line = one_line_error(result, EXIT_UNKNOWN, f"--bootstrap {refused_address}", "connection refused")
    assert line.startswith("tidemark run: "), line
    assert not (tmp_path / "store").exists(), "a run that never started leaves no run directory"


@pytest.mark.parametrize(
    ("bootstrap", "fragment"),
    [
        ("foo", "'foo' is not HOST:PORT"),
        ("127.0.0.1:70000", "port 70000 is out of range (1-65535)"),
        ("127.0.0.1:x", "port 'x' is not a number"),
        ("", "expected HOST:PORT"),
    ],
)
def test_a_malformed_bootstrap_is_a_bad_argument(bootstrap: str, fragment: str, tmp_path: Path) -> None:
    result = tidemark_run(bootstrap, tmp_path / "store")
    one_line_error(result, EXIT_BAD_ARGUMENTS, "--bootstrap", fragment)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("behaviour", "fragment"),
    [
        ("close", "the connection was closed before an answer to ApiVersions"),
        ("garbage", "the answer to ApiVersions is not Kafka"),
    ],
)
def test_a_listener_that_is_not_kafka_is_unknown(behaviour: str, fragment: str, tmp_path: Path) -> None:
    with FakeKafka(behaviour) as fake:
        result = tidemark_run(fake.address, tmp_path / "store")
    one_line_error(result, EXIT_UNKNOWN, f"--bootstrap {fake.address}", "no Kafka broker answered", fragment)


def test_a_broker_with_unsupported_protocol_versions_is_unknown(tmp_path: Path) -> None:
    with FakeKafka(ranges=OLD_KAFKA_RANGES) as fake:
        result = tidemark_run(fake.address, tmp_path / "store")
    one_line_error(
        result,
        EXIT_UNKNOWN,
        f"--bootstrap {fake.address}",
        "protocol versions",
        "Produce v0-2 (need v3-10)",
        "CreateTopics v0-1",
    )
    assert [request.api.key for request in fake.requests] == [18], "nothing asked after ApiVersions"


@pytest.mark.parametrize(
    ("code", "message", "fragment"),
    [
        (44, "replication factor must be at least 4", "POLICY_VIOLATION (44): replication factor must be"),
        (31, None, "CLUSTER_AUTHORIZATION_FAILED (31)"),
    ],
)
def test_a_cluster_that_refuses_the_topic_is_unknown(
    code: int, message: str | None, fragment: str, tmp_path: Path
) -> None:
    with FakeKafka(create_topics_error=(code, message)) as fake:
        result = tidemark_run(fake.address, tmp_path / "store")
    one_line_error(result, EXIT_UNKNOWN, f"--bootstrap {fake.address}", "refuses to create topic", fragment)
    creates = [request for request in fake.requests if request.api.key == 19]
    assert len(creates) == 1 and creates[0].body.validate_only, "only asked, never created"
    assert not (tmp_path / "store").exists()


def test_a_replication_factor_the_cluster_cannot_host_is_a_bad_argument(tmp_path: Path) -> None:
    refusal = (38, "Replication factor: 3 larger than available brokers: 1.")
    with FakeKafka(create_topics_error=refusal) as fake:
        result = tidemark_run(fake.address, tmp_path / "store", "--replication-factor", "3")
    one_line_error(
        result,
        EXIT_BAD_ARGUMENTS,
        f"--bootstrap {fake.address}",
        "INVALID_REPLICATION_FACTOR (38)",
        "--replication-factor",
    )


def test_a_set_up_failure_after_the_probe_is_unknown_and_keeps_the_run_directory(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture imported above
    tmp_path: Path,
) -> None:
    cluster = start_cluster(2)
    cluster.create_topic("tidemark", 3, 1)  # left by someone else, one replica per partition
    result = tidemark_run(cluster.bootstrap(), tmp_path / "store", "--replication-factor", "2")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_UNKNOWN, (result.returncode, result.stderr)
    progress, error = result.stderr.splitlines()
    assert progress.startswith("run directory: "), result.stderr
    assert error.startswith(f"tidemark run: error: --bootstrap {cluster.bootstrap()}: topic tidemark"), error
    assert "existed before the harness created it" in error
    run_dir = Path(progress.removeprefix("run directory: "))
    assert (run_dir / "test.json").is_file() and (run_dir / "history.jsonl").is_file()
