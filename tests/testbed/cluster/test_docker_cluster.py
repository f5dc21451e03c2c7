"""DockerCluster with real containers: layout, capabilities, and teardown on every way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import docker
import pytest
from docker.models.networks import NetworkCollection

from testbed.cluster.docker_cluster import (
    CONTROLLER,
    ClusterError,
    DockerCluster,
    new_run_id,
)
from testbed.cluster.docker_labels import owner_label, remove_orphans, remove_run
from testbed.cluster.image import IMAGE_PYTHON, source_root
from tests.testbed.nodes.remote_contract import wait_until

pytestmark = pytest.mark.docker


def leftovers(client: docker.DockerClient, run_id: str) -> list[str]:
    label = {"label": f"tidemark.run={run_id}"}
    containers = client.containers.list(all=True, filters=label, sparse=True)
    networks = client.networks.list(filters=label)
    return [f"container {container.id[:12]}" for container in containers] + [
        f"network {network.name}" for network in networks
    ]


@pytest.fixture(scope="module")
def cluster(docker_client: docker.DockerClient, image: str) -> Iterator[DockerCluster]:
    with DockerCluster(docker_client, image, brokers=3) as started:
        yield started


def test_nodes_are_a_controller_and_n_brokers_labelled_with_the_run(
    cluster: DockerCluster, docker_client: docker.DockerClient
) -> None:
    assert cluster.node_names == [CONTROLLER, "n1", "n2", "n3"]
    assert cluster.broker_names == ["n1", "n2", "n3"]
    assert len({cluster.ip(name) for name in cluster.node_names}) == 4
    for name in cluster.node_names:
        container = docker_client.containers.get(cluster.nodes[name].container_id)
        assert container.labels["tidemark"] == "1"
        assert container.labels["tidemark.run"] == cluster.run_id
        assert container.labels["tidemark.node"] == name
        assert container.attrs["Config"]["Hostname"] == name
    network = docker_client.networks.get(cluster.network_name)
    assert network.attrs["Labels"] == {
        "tidemark": "1",
        "tidemark.run": cluster.run_id,
        "tidemark.owner": owner_label(),
    }


def test_containers_get_only_the_capabilities_they_need_and_never_privileged(
    cluster: DockerCluster, docker_client: docker.DockerClient
) -> None:
    host_config = docker_client.containers.get(cluster.nodes["n1"].container_id).attrs["HostConfig"]
    assert host_config["Privileged"] is False
    assert sorted(host_config["CapAdd"]) == ["NET_ADMIN", "SYS_ADMIN"]
    assert [device["PathOnHost"] for device in host_config["Devices"]] == ["/dev/fuse"]


def test_nodes_reach_each_other_by_name_on_the_private_network(cluster: DockerCluster) -> None:
    resolved = cluster.remote("n1").exec(["getent", "hosts", CONTROLLER]).stdout_text.split()[0]
    assert resolved == cluster.ip(CONTROLLER)


def connects(cluster: DockerCluster, source: str, target: str) -> bool:
    probe = f"import socket; socket.create_connection(('{cluster.ip(target)}', 22), timeout=0.5).close()"
    return cluster.remote(source).exec([IMAGE_PYTHON, "-c", probe], check=False).exit_code == 0


def test_iptables_works_in_the_containers(cluster: DockerCluster) -> None:
    """NET_ADMIN is what partitions need: a DROP rule on n2 cuts n1 off, deleting it heals."""
    rule = ["INPUT", "-s", cluster.ip("n1"), "-j", "DROP"]
    assert connects(cluster, "n1", "n2")
    cluster.remote("n2").exec(["iptables", "-A", *rule])
    try:
        assert not connects(cluster, "n1", "n2")
        assert connects(cluster, "n3", "n2")
    finally:
        cluster.remote("n2").exec(["iptables", "-D", *rule])
    assert connects(cluster, "n1", "n2")


HELLO_FS = """
import errno, stat, sys, mfusepy
class Hello(mfusepy.Operations):
    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path == "/hello":
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": 6}
        raise mfusepy.FuseOSError(errno.ENOENT)
    def readdir(self, path, fh):
        return [".", "..", "hello"]
    def read(self, path, size, offset, fh):
        return b"hello\\n"[offset:offset + size]
mfusepy.FUSE(Hello(), sys.argv[1], foreground=True)
"""


def test_a_fuse_filesystem_mounts_in_the_containers(cluster: DockerCluster) -> None:
    """SYS_ADMIN and /dev/fuse are what the power-loss filesystem needs."""
    remote = cluster.remote("n3")
    remote.put(HELLO_FS.encode(), "/opt/hello_fs.py")
    remote.exec(["mkdir", "-p", "/mnt/hello"])
    remote.start_daemon(
        "hello-fs", [IMAGE_PYTHON, "/opt/hello_fs.py", "/mnt/hello"], log_path="/tmp/hello-fs.log"
    )
    try:
        wait_until(
            lambda: remote.exec(["cat", "/mnt/hello/hello"], check=False).stdout_text == "hello\n",
            10,
            "FUSE file readable",
        )
    finally:
        remote.exec(["fusermount3", "-u", "/mnt/hello"], check=False)
        remote.signal("hello-fs", signal.SIGKILL)


def test_a_missing_image_fails_start_and_leaves_nothing(docker_client: docker.DockerClient) -> None:
    cluster = DockerCluster(docker_client, "tidemark:no-such-image", brokers=1)
    with pytest.raises(ClusterError, match="did not start"):
        cluster.start()
    assert leftovers(docker_client, cluster.run_id) == []


def test_leaving_the_block_removes_everything_also_on_an_exception(
    docker_client: docker.DockerClient, image: str
) -> None:
    with DockerCluster(docker_client, image, brokers=1) as normal:
        work_dir = normal.work_dir
        assert leftovers(docker_client, normal.run_id) != []
    assert leftovers(docker_client, normal.run_id) == []
    assert not work_dir.exists()

    with pytest.raises(RuntimeError, match="boom"), DockerCluster(docker_client, image, brokers=1) as failing:
        raise RuntimeError("boom")
    assert leftovers(docker_client, failing.run_id) == []


# -- a separate harness process, interrupted -----------------------------------------------------

HARNESS = """
import sys, threading
from testbed.cluster.docker_cluster import DockerCluster
from testbed.nodes.docker_remote import connect_docker
owned = len(sys.argv) < 5 or sys.argv[4] == "owned"
with DockerCluster(connect_docker(), sys.argv[1], brokers=int(sys.argv[2]), run_id=sys.argv[3], owned=owned):
    print("READY", flush=True)
    threading.Event().wait()
"""


def start_harness(image: str, brokers: int, run_id: str, *, owned: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(HARNESS),
            image,
            str(brokers),
            run_id,
            "owned" if owned else "detached",
        ],
        cwd=source_root(),
        env={**os.environ, "PYTHONPATH": str(source_root())},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def run_id(docker_client: docker.DockerClient) -> Iterator[str]:
    """A fresh run id whose containers and network are removed after the test, whatever happened."""
    chosen = new_run_id()
    yield chosen
    remove_run(docker_client, chosen)


@pytest.mark.parametrize(
    ("sig", "exit_code"), [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, 128 + signal.SIGTERM)]
)
def test_a_signal_to_the_harness_removes_its_cluster(
    docker_client: docker.DockerClient, image: str, run_id: str, sig: signal.Signals, exit_code: int
) -> None:
    harness = start_harness(image, 2, run_id)
    assert harness.stdout is not None
    assert harness.stdout.readline() == "READY\n", harness.stderr.read() if harness.stderr else ""
    assert len(leftovers(docker_client, run_id)) == 4  # 3 containers and the network
    harness.send_signal(sig)
    _, stderr = harness.communicate(timeout=60)
    # SIGINT: an unhandled KeyboardInterrupt ends Python by SIGINT; SIGTERM: SystemExit(143) after teardown
    assert harness.returncode == exit_code, stderr
    assert leftovers(docker_client, run_id) == []


def test_sigint_while_the_cluster_starts_removes_what_was_created(
    docker_client: docker.DockerClient, image: str, run_id: str
) -> None:
    harness = start_harness(image, 5, run_id)
    wait_until(
        lambda: docker_client.networks.list(filters={"label": f"tidemark.run={run_id}"}) != [],
        30,
        "network created",
    )
    harness.send_signal(signal.SIGINT)
    stdout, stderr = harness.communicate(timeout=60)
    assert "READY" not in stdout, "the interrupt came after start-up; this test needs it during start-up"
    assert "KeyboardInterrupt" in stderr
    assert leftovers(docker_client, run_id) == []


def test_sigint_during_network_creation_waits_for_the_network_then_removes_it(
    docker_client: docker.DockerClient, image: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal arrives while the daemon is asked for the network: it must not cut the call short.

    Cut short, the daemon could finish creating the network after teardown looked for it,
    and the network would be left behind (one CI run saw exactly that).
    """
    created: list[str] = []
    create = NetworkCollection.create

    def interrupted_create(self: NetworkCollection, name: str, **options: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # "during" the request
        network = create(self, name, **options)
        created.append(name)
        return network

    # client.networks is a new collection object on every access: patch the class.
    monkeypatch.setattr(NetworkCollection, "create", interrupted_create)
    cluster = DockerCluster(docker_client, image, brokers=1, run_id=run_id)
    with pytest.raises(KeyboardInterrupt):
        cluster.start()
    assert created == [f"tidemark-{run_id}"], "the interrupt cut the network creation short"
    assert leftovers(docker_client, run_id) == []


def test_a_second_sigint_does_not_cut_teardown_short(
    docker_client: docker.DockerClient, image: str, run_id: str
) -> None:
    harness = start_harness(image, 3, run_id)
    assert harness.stdout is not None and harness.stdout.readline() == "READY\n"
    harness.send_signal(signal.SIGINT)
    wait_until(lambda: len(leftovers(docker_client, run_id)) < 5, 30, "teardown under way")
    harness.send_signal(signal.SIGINT)
    harness.communicate(timeout=60)
    assert leftovers(docker_client, run_id) == []


def test_a_killed_harness_leaves_a_cluster_that_cluster_down_removes(
    docker_client: docker.DockerClient, image: str, run_id: str
) -> None:
    harness = start_harness(image, 1, run_id)
    assert harness.stdout is not None and harness.stdout.readline() == "READY\n"
    harness.kill()  # SIGKILL: no cleanup is possible in the process itself
    harness.communicate(timeout=30)
    listed = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "cluster", "ls"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run_id in listed.stdout
    down = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "cluster", "down", "--run", run_id],
        capture_output=True,
        text=True,
        check=True,
    )
    assert down.stdout.strip() == "removed 2 containers and 1 networks"
    assert leftovers(docker_client, run_id) == []


def test_the_cluster_of_a_sigkilled_harness_is_removed_by_the_next_start(
    docker_client: docker.DockerClient, image: str, run_id: str
) -> None:
    """SIGKILL (or the OOM killer) leaves the harness no chance to tear down: the next cluster
    start finds the run by its owner label, sees the owner process gone, and removes it -- and
    leaves alone a cluster meant to outlive its process (``tidemark cluster up``)."""
    detached_run = new_run_id()
    try:
        for chosen, owned in ((run_id, True), (detached_run, False)):
            harness = start_harness(image, 1, chosen, owned=owned)
            assert harness.stdout is not None and harness.stdout.readline() == "READY\n"
            harness.kill()
            harness.communicate(timeout=30)  # reaped: its pid is gone
            assert len(leftovers(docker_client, chosen)) == 3
        with DockerCluster(docker_client, image, brokers=1):
            assert leftovers(docker_client, run_id) == []
            assert len(leftovers(docker_client, detached_run)) == 3
        assert remove_orphans(docker_client) == []
    finally:
        remove_run(docker_client, detached_run)
