"""How :class:`TansuCluster` maps the Cluster protocol onto two tiers, checked with recording fake
remotes (no Docker, no processes): which nodes the nemesis sees, who "leads", which node is
dumped, and that a signal to the PostgreSQL server reaches every PostgreSQL process."""

from __future__ import annotations

import functools
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.targets.tansu import TansuTarget
from nemesis.nemesis_config import cluster_abilities
from nemesis.request_faults import RequestProxies
from testbed.cluster.protocol import (
    ControlledCluster,
    LogFiles,
    PowerLoss,
    ReplicaDumps,
    replica_nodes,
)
from testbed.cluster.tansu import POSTGRES_NODE, TANSU_NODE_ID, ProxiedTansuCluster, TansuCluster, supervised
from testbed.nodes.remote import ExecResult


class FakeRemote:
    """Records every call with what the tests check of it (the options are the Remote's own, not
    checked here); ``signal`` reports the daemon running, ``exec`` succeeds, no daemon is alive."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.calls: list[tuple[str, object]] = []

    def exec(self, command: object, **_options: Any) -> ExecResult:
        self.calls.append(("exec", command))
        return ExecResult(0, b"", b"")

    def put(self, source: object, remote_path: str, **_options: Any) -> None:
        self.calls.append(("put", remote_path))

    def get(self, remote_path: str, local_path: Path, **_options: Any) -> None:
        self.calls.append(("get", remote_path))

    def start_daemon(self, name: str, argv: Sequence[str], **_options: Any) -> int:
        self.calls.append(("start_daemon", list(argv)))
        return 1

    def signal(self, name: str, sig: signal.Signals, **_options: Any) -> bool:
        self.calls.append(("signal", (name, sig)))
        return True

    def is_alive(self, name: str, **_options: Any) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.fixture
def remotes() -> dict[str, FakeRemote]:
    return {name: FakeRemote(name) for name in ("pg", "n1", "n2")}


@pytest.fixture
def cluster(remotes: dict[str, FakeRemote]) -> TansuCluster:
    ips = {"pg": "10.9.0.2", "n1": "10.9.0.3", "n2": "10.9.0.4"}
    return TansuCluster(remotes, ips, ["n1", "n2"], POSTGRES_NODE, {"postgresql.fsync": "off"})


def test_the_nemesis_sees_both_tiers_and_postgresql_leads_every_partition(cluster: TansuCluster) -> None:
    assert isinstance(cluster, ControlledCluster)
    assert (
        isinstance(cluster, ReplicaDumps) and isinstance(cluster, LogFiles) and isinstance(cluster, PowerLoss)
    )
    assert cluster.brokers == ["n1", "n2", "pg"]
    assert cluster.controller is None
    assert cluster.bootstrap == "10.9.0.3:9092,10.9.0.4:9092"
    assert cluster.node_ids == {"n1": TANSU_NODE_ID, "n2": TANSU_NODE_ID}
    assert cluster.leader_of("queue", 0) == "pg"
    assert replica_nodes(cluster) == ["pg"]


def test_a_broker_starts_as_the_broker_daemon_pointing_at_postgresql(
    cluster: TansuCluster, remotes: dict[str, FakeRemote]
) -> None:
    cluster.start_broker("n2")
    ((_kind, argv),) = [call for call in remotes["n2"].calls if call[0] == "start_daemon"]
    assert argv == supervised(
        [
            "/usr/local/bin/tansu",
            "broker",
            "--cluster-id=tidemark",
            "--listener-url=tcp://0.0.0.0:9092",
            "--advertised-listener-url=tcp://10.9.0.4:9092",
            "--storage-engine=postgres://postgres@10.9.0.2:5432/postgres",
        ],
        "tansu",
    )
    assert argv[:2] == ["sh", "-c"], "under the supervisor loop that starts tansu again when it exits"


def test_with_request_proxies_each_broker_listens_behind_its_proxy_and_postgresql_has_none(
    remotes: dict[str, FakeRemote],
) -> None:
    ips = {"pg": "10.9.0.2", "n1": "10.9.0.3", "n2": "10.9.0.4"}
    proxied = ProxiedTansuCluster(remotes, ips, ["n1", "n2"], POSTGRES_NODE, {})
    plain = TansuCluster(remotes, ips, ["n1", "n2"], POSTGRES_NODE, {})
    assert isinstance(proxied, RequestProxies) and not isinstance(plain, RequestProxies)
    assert "request-proxy" in cluster_abilities(proxied) and "request-proxy" not in cluster_abilities(plain)
    proxied.start_broker("n1")
    (proxy, broker) = [argv for kind, argv in remotes["n1"].calls if kind == "start_daemon"]
    assert proxy[proxy.index("--listen") + 1] == "0.0.0.0:9092"  # the port clients are told
    assert proxy[proxy.index("--upstream") + 1] == "127.0.0.1:9094"
    assert "--listener-url=tcp://0.0.0.0:9094" in broker[-6:]
    assert "--advertised-listener-url=tcp://10.9.0.3:9092" in broker[-6:]
    assert proxied.bootstrap == "10.9.0.3:9092,10.9.0.4:9092"
    assert proxied.request_proxy("n2").address == "10.9.0.4:9095"
    with pytest.raises(ValueError, match="pg runs PostgreSQL"):
        proxied.request_proxy("pg")
    chosen = TansuTarget().docker_clusters(True)
    assert isinstance(chosen, functools.partial) and chosen.keywords["cluster_class"] is ProxiedTansuCluster
    assert TansuTarget().docker_clusters(False).keywords["cluster_class"] is TansuCluster  # type: ignore[attr-defined]


def test_a_signal_to_the_postgresql_server_reaches_every_postgresql_process(
    cluster: TansuCluster, remotes: dict[str, FakeRemote]
) -> None:
    assert cluster.remote("pg").signal("broker", signal.SIGSTOP)
    assert remotes["pg"].calls == [
        ("signal", ("broker", signal.SIGSTOP)),  # the postmaster first: it forks no more
        ("exec", ["pkill", "--signal=STOP", "-u", "postgres"]),
    ]
    cluster.remote("n1").signal("broker", signal.SIGSTOP)
    assert remotes["n1"].calls == [("signal", ("broker", signal.SIGSTOP))]  # a broker is one process group


def test_stopping_the_brokers_terminates_every_tansu_broker_and_leaves_postgresql_running(
    cluster: TansuCluster, remotes: dict[str, FakeRemote]
) -> None:
    cluster.stop_brokers(timeout=1)
    for broker in ("n1", "n2"):  # a paused broker must run again to act on SIGTERM
        assert remotes[broker].calls == [
            ("signal", ("broker", signal.SIGCONT)),
            ("signal", ("broker", signal.SIGTERM)),
        ]
    assert remotes["pg"].calls == []  # the dump reads it after the run


def test_only_postgresql_has_a_log_to_dump_or_power_to_lose(
    cluster: TansuCluster, remotes: dict[str, FakeRemote], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="n1 is a tansu broker: it holds no replica"):
        cluster.dump_replica("n1", tmp_path / "dump.jsonl")
    cluster.drop_unsynced("n1")  # nothing on disk: a no-op
    assert remotes["n1"].calls == []
    assert cluster.postgres.settings["postgresql.fsync"] == "off"


def test_the_docker_cluster_names_its_one_non_broker_node_as_asked() -> None:
    from testbed.cluster.docker_cluster import DockerCluster

    nodes = DockerCluster(None, "image", brokers=2, controller=POSTGRES_NODE)  # type: ignore[arg-type]
    assert nodes.node_names == ["pg", "n1", "n2"]
    assert DockerCluster(None, "image", brokers=2).node_names == ["controller", "n1", "n2"]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="controller node name 'n1'"):
        DockerCluster(None, "image", brokers=2, controller="n1")  # type: ignore[arg-type]
