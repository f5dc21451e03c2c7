"""SshRemote against the containers' real sshd: the Remote contract, host-key checking, deadlines, reconnects."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from testbed.cluster.docker_cluster import DockerCluster
from testbed.nodes.docker_remote import DockerRemote
from testbed.nodes.remote import CommandFailed, HostKeyError, Reconnectable, RemoteError, RemoteTimeout
from testbed.nodes.ssh_remote import SshKeyPair, SshRemote, write_known_hosts
from tests.testbed.nodes.remote_contract import RemoteContract, unique, wait_until

pytestmark = pytest.mark.docker

# Every sshd process except the listener serves one connection: killing them kills the client's transport.
KILL_SSH_SESSIONS = (
    'for pid in $(pgrep -x sshd); do [ "$pid" = "$(cat /run/sshd.pid)" ] || kill -9 "$pid"; done'
)


@pytest.fixture(scope="module")
def cluster(docker_client: docker.DockerClient, image: str) -> Iterator[DockerCluster]:
    with DockerCluster(docker_client, image, brokers=2) as started:
        yield started


@pytest.fixture
def remote(cluster: DockerCluster) -> Iterator[SshRemote]:
    ssh = cluster.ssh_remote("n1")
    yield ssh
    ssh.close()


@pytest.fixture
def docker_remote(cluster: DockerCluster) -> DockerRemote:
    return cluster.remote("n1")


class TestSshRemoteContract(RemoteContract):
    pass


def ssh_to(
    cluster: DockerCluster,
    name: str,
    *,
    known_hosts: Path | None = None,
    key_path: Path | None = None,
    connect_timeout: float = 10.0,
) -> SshRemote:
    return SshRemote(
        cluster.ip(name),
        node=name,
        key_path=key_path or cluster.ssh_key_path,
        known_hosts=known_hosts or cluster.known_hosts_path,
        connect_timeout=connect_timeout,
    )


def client_port(remote: SshRemote) -> str:
    return remote.exec('echo "$SSH_CONNECTION"').stdout_text.split()[1]


def test_an_unknown_host_is_refused_before_any_command_runs(
    cluster: DockerCluster, docker_remote: DockerRemote, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    marker = f"/tmp/{unique('unknown-host')}"
    with pytest.raises(HostKeyError, match="not in"):
        ssh_to(cluster, "n1", known_hosts=empty).exec(["touch", marker])
    assert docker_remote.exec(["test", "-e", marker], check=False).exit_code == 1


def test_a_host_presenting_another_key_is_refused(
    cluster: DockerCluster, docker_remote: DockerRemote, tmp_path: Path
) -> None:
    other_key = cluster.remote("n2").exec(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout_text
    wrong = tmp_path / "known_hosts"
    write_known_hosts(wrong, [(cluster.ip("n1"), 22, other_key)])
    marker = f"/tmp/{unique('wrong-key')}"
    with pytest.raises(HostKeyError, match="differs"):
        ssh_to(cluster, "n1", known_hosts=wrong).exec(["touch", marker])
    assert docker_remote.exec(["test", "-e", marker], check=False).exit_code == 1


def test_a_client_key_not_authorized_is_refused(cluster: DockerCluster, tmp_path: Path) -> None:
    stranger = SshKeyPair.generate(tmp_path / "stranger")
    with pytest.raises(RemoteError, match="authentication") as failure:
        ssh_to(cluster, "n1", key_path=stranger.private_key_path).exec("true")
    assert not isinstance(failure.value, HostKeyError)


def test_every_node_has_its_own_host_key(cluster: DockerCluster) -> None:
    lines = cluster.known_hosts_path.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(
        cluster.ip(name) for name in cluster.node_names
    )
    assert len({line.split()[2] for line in lines}) == len(cluster.node_names)


def test_a_frozen_node_makes_calls_time_out_not_hang(
    cluster: DockerCluster, docker_client: docker.DockerClient
) -> None:
    """With every process of the node frozen the command cannot even start: the client-side deadline must act."""
    connected = ssh_to(cluster, "n2")
    fresh = ssh_to(cluster, "n2", connect_timeout=1)
    container = docker_client.containers.get(cluster.nodes["n2"].container_id)
    assert connected.exec("echo warm").stdout_text == "warm\n"
    container.pause()
    try:
        started = time.monotonic()
        with pytest.raises(RemoteTimeout):
            connected.exec("echo frozen", timeout=1)
        assert time.monotonic() - started < 20  # bounded: timeout plus kill grace and slack
        with pytest.raises(RemoteError):
            fresh.exec("echo frozen", timeout=1)  # the connection itself cannot be set up
    finally:
        container.unpause()
        connected.close()
        fresh.close()
    assert ssh_to(cluster, "n2").exec("echo thawed").stdout_text == "thawed\n"


def test_a_dead_transport_is_replaced_on_the_next_call(
    remote: SshRemote, docker_remote: DockerRemote
) -> None:
    before = client_port(remote)
    docker_remote.exec(KILL_SSH_SESSIONS)
    assert client_port(remote) != before  # a new TCP connection, made without the caller noticing


def test_a_connection_lost_mid_command_is_an_error_and_never_rerun(
    remote: SshRemote, docker_remote: DockerRemote
) -> None:
    counter = f"/tmp/{unique('runs')}"
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            remote.exec(f"echo run >> {counter}; sleep 20", timeout=30)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    wait_until(
        lambda: docker_remote.exec(["cat", counter], check=False).stdout_text == "run\n",
        10,
        "command started",
    )
    docker_remote.exec(KILL_SSH_SESSIONS)
    worker.join(15)
    assert not worker.is_alive()
    assert isinstance(outcome[0], RemoteError)
    assert not isinstance(outcome[0], RemoteTimeout | CommandFailed)
    assert docker_remote.exec(["cat", counter]).stdout_text == "run\n"


def test_reconnect_opens_a_new_connection(remote: SshRemote) -> None:
    assert isinstance(remote, Reconnectable)
    before = client_port(remote)
    remote.reconnect()
    assert client_port(remote) != before


def test_a_daemon_started_over_ssh_outlives_the_session(
    cluster: DockerCluster, docker_remote: DockerRemote
) -> None:
    name = unique("nohup")
    ssh = cluster.ssh_remote("n1")
    ssh.start_daemon(name, ["sleep", "600"], log_path=f"/tmp/{name}.log")
    ssh.close()
    try:
        wait_until(
            lambda: docker_remote.exec("pgrep -c -x sshd", check=False).stdout_text.strip() == "1",
            10,
            "session ended",
        )
        assert docker_remote.is_alive(name)
    finally:
        docker_remote.signal(name, signal.SIGKILL)
