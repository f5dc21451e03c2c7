"""DockerRemote against real containers: the shared Remote contract plus Docker-only failure modes."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from testbed.cluster.docker_cluster import DockerCluster
from testbed.nodes.docker_remote import DockerRemote, _extract_archive, connect_docker
from testbed.nodes.remote import CommandFailed, ContainerBacked, RemoteError, RemoteTimeout
from tests.testbed.nodes.remote_contract import RemoteContract


@pytest.fixture(scope="module")
def cluster(docker_client: docker.DockerClient, image: str) -> Iterator[DockerCluster]:
    with DockerCluster(docker_client, image, brokers=1) as started:
        yield started


@pytest.fixture
def remote(cluster: DockerCluster) -> DockerRemote:
    return cluster.remote("n1")


@pytest.fixture
def docker_remote(cluster: DockerCluster) -> DockerRemote:
    return cluster.remote("n1")


@pytest.mark.docker
class TestDockerRemoteContract(RemoteContract):
    pass


@pytest.mark.docker
def test_it_is_container_backed(remote: DockerRemote, cluster: DockerCluster) -> None:
    assert isinstance(remote, ContainerBacked)
    assert remote.container_id == cluster.nodes["n1"].container_id


@pytest.mark.docker
def test_a_removed_container_is_a_remote_error_not_a_command_failure(
    docker_client: docker.DockerClient, image: str, tmp_path: Path
) -> None:
    container = docker_client.containers.run(
        image, detach=True, labels={"tidemark": "1", "tidemark.run": "remote-test"}
    )
    remote = DockerRemote(docker_client, container.id, node="doomed")
    try:
        assert remote.exec("echo alive").stdout_text == "alive\n"
    finally:
        container.remove(force=True)
    with pytest.raises(RemoteError) as failure:
        remote.exec("echo alive")
    assert type(failure.value) is RemoteError and "doomed" in str(failure.value)
    with pytest.raises(RemoteError) as failure:
        remote.get("/etc/hostname", tmp_path / "hostname")
    assert type(failure.value) is RemoteError  # the container is gone, not the file


@pytest.mark.docker
def test_a_paused_container_gives_a_remote_error_not_a_hang(
    docker_client: docker.DockerClient, cluster: DockerCluster
) -> None:
    remote = cluster.remote("controller")
    container = docker_client.containers.get(remote.container_id)
    container.pause()
    try:
        with pytest.raises(RemoteError) as failure:  # the engine refuses to exec in a paused container
            remote.exec("echo never", timeout=1)
        assert not isinstance(failure.value, CommandFailed)
    finally:
        container.unpause()
    assert remote.exec("echo back").stdout_text == "back\n"


@pytest.mark.docker
def test_a_quiet_command_outlives_the_clients_http_timeout(cluster: DockerCluster) -> None:
    """The engine client's read timeout (1 s here) must not cut a command that prints nothing for longer."""
    impatient = connect_docker(timeout=1)
    try:
        remote = DockerRemote(impatient, cluster.nodes["n1"].container_id, node="n1")
        assert remote.exec("sleep 3; echo done", timeout=10).stdout_text == "done\n"
        with pytest.raises(RemoteTimeout):
            remote.exec("sleep 5", timeout=0.5)
    finally:
        impatient.close()


def _archive(*members: tuple[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    buffer.seek(0)
    return buffer


def test_archive_members_cannot_escape_the_target(tmp_path: Path) -> None:
    target = tmp_path / "inside"
    with pytest.raises(RemoteError, match="unexpected archive member"):
        _extract_archive(
            _archive(("logs/ok.txt", b"ok"), ("logs/../../escaped", b"x")), "logs", target, "n1", "/logs"
        )
    assert not (tmp_path / "escaped").exists()
    with pytest.raises(RemoteError, match="unexpected archive member"):
        _extract_archive(_archive(("other/file", b"x")), "logs", target, "n1", "/logs")
