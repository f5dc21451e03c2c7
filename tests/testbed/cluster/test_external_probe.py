"""The probe of an external cluster (``--bootstrap``) before a run: bounded, one line, named.

Real sockets on 127.0.0.x throughout: a port bound but not listening (refused), the fake
broker of :mod:`tests.testbed.cluster.fake_kafka`, and the bundled broker as local
processes (the probe must pass against a cluster the harness can test).  The command-line
side (exit codes, stderr) is in ``tests/harness/cli/test_run_bootstrap_errors.py``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from testbed.cluster.external_probe import (
    BootstrapAddressError,
    ClusterMismatch,
    ExternalClusterError,
    parse_bootstrap,
    probe_cluster,
)
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from tests.testbed.cluster.fake_kafka import FakeKafka


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A 127.0.0.1 port bound but not listening: connections are refused."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        yield reserved.getsockname()[1]


def test_addresses_parse_as_kafka_clients_take_them() -> None:
    assert parse_bootstrap("a:1, b.example:9092,") == [("a", 1), ("b.example", 9092)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]


@pytest.mark.parametrize(
    ("bootstrap", "fragment"),
    [
        ("foo", "'foo' is not HOST:PORT"),
        (":9092", "':9092' is not HOST:PORT"),
        ("a:1,b", "'b' is not HOST:PORT"),
        ("a:0", "port 0 is out of range"),
        ("a:65536", "port 65536 is out of range"),
        ("a:-1", "port '-1' is not a number"),
        ("::1:9092", "an IPv6 address goes in brackets"),
        ("PLAINTEXT://a:9092", "without a listener name"),
        (" , ", "expected HOST:PORT"),
    ],
)
def test_malformed_addresses_are_named(bootstrap: str, fragment: str) -> None:
    with pytest.raises(BootstrapAddressError, match="--bootstrap") as caught:
        parse_bootstrap(bootstrap)
    assert fragment in str(caught.value)


def test_a_silent_listener_fails_within_the_timeout() -> None:
    with FakeKafka("silent") as fake:
        started = time.monotonic()
        with pytest.raises(ExternalClusterError) as caught:
            probe_cluster(fake.address, "t", 1, 1, timeout=0.5)
    assert time.monotonic() - started < 3
    assert str(caught.value) == (
        f"--bootstrap {fake.address}: no Kafka broker answered (no answer to ApiVersions within 0.5 s)"
    )


def test_every_address_is_asked_and_each_failure_named(refused_port: int) -> None:
    with FakeKafka() as fake:
        probe_cluster(f"127.0.0.1:{refused_port},{fake.address}", "t", 1, 1)  # one answering is enough
    with FakeKafka("close") as fake, pytest.raises(ExternalClusterError) as caught:
        probe_cluster(f"127.0.0.1:{refused_port},{fake.address}", "t", 1, 1)
    assert f"127.0.0.1:{refused_port}: connection refused; {fake.address}: the connection was closed" in str(
        caught.value
    )


def test_an_unreachable_controller_names_the_advertised_address(refused_port: int) -> None:
    with FakeKafka(advertised_port=refused_port) as fake, pytest.raises(ExternalClusterError) as caught:
        probe_cluster(fake.address, "t", 1, 1)
    assert f"names broker 1 at 127.0.0.1:{refused_port} as the controller" in str(caught.value)
    assert "check advertised.listeners" in str(caught.value)


def test_with_wait_a_broker_that_starts_late_is_waited_for() -> None:
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        fakes: list[FakeKafka] = []

        def start_late() -> None:
            time.sleep(1.0)
            reserved.close()
            fakes.append(FakeKafka(port=port).__enter__())

        starter = threading.Thread(target=start_late)
        starter.start()
        try:
            with pytest.raises(ExternalClusterError, match="connection refused"):
                probe_cluster(f"127.0.0.1:{port}")  # no wait: refused is an answer
            started = time.monotonic()
            probe_cluster(f"127.0.0.1:{port}", wait=10)
            assert time.monotonic() - started < 5
        finally:
            starter.join()
            for fake in fakes:
                fake.__exit__(None, None, None)


def test_the_bundled_broker_passes_and_an_impossible_replication_factor_is_a_mismatch(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture imported above
) -> None:
    cluster = start_cluster(2)
    probe_cluster(cluster.bootstrap(), "probed", 2, 2)
    with pytest.raises(ClusterMismatch, match=r"INVALID_REPLICATION_FACTOR \(38\)"):
        probe_cluster(cluster.bootstrap(), "too-wide", 2, 3)
