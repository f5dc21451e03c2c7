"""The local cluster launcher's command line, run as users run it: a subprocess per command.

``up`` must print exactly one JSON line describing a cluster that really runs, ``down``
must leave no process behind -- checked by scanning ``/proc`` for anything whose command
line mentions the cluster directory, not by trusting the pids the launcher recorded --
and every bad argument must end with exit code 2 and one clear line, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_impl.localcluster import ClusterError, LocalCluster, api_versions_answer

from .client_support import produce_all, read_partition

REPOSITORY = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


def localcluster(*arguments: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_impl.localcluster", *arguments],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def processes_mentioning(directory: Path) -> dict[int, str]:
    """Live (non-zombie) processes whose command line contains ``directory``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(directory) in command and state != "Z":
            found[int(entry.name)] = command
    return found


def reap_children() -> None:
    """Collect exit statuses of brokers this test process restarted itself (Popen children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@pytest.fixture
def cluster_directory(tmp_path: Path) -> Iterator[Path]:
    """A directory for one CLI cluster; whatever the test did, nothing keeps running after it."""
    directory = tmp_path / "cluster"
    yield directory
    if (directory / "cluster.json").exists():
        try:
            LocalCluster(directory).down()
        finally:
            reap_children()
    leftovers = processes_mentioning(directory)
    for pid in leftovers:  # only processes started for this very directory
        os.kill(pid, 9)
    assert not leftovers, f"processes left behind: {leftovers}"


# ---- the happy path ---------------------------------------------------------------------------


def test_up_create_topic_and_down(cluster_directory: Path) -> None:
    started = localcluster("up", "--brokers", "3", "--dir", str(cluster_directory))
    assert started.returncode == 0, started.stderr
    lines = started.stdout.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert set(summary) == {"bootstrap", "brokers", "controller"}
    assert sorted(summary["brokers"]) == ["1", "2", "3"]
    addresses = [summary["brokers"][node]["address"] for node in ("1", "2", "3")]
    assert summary["bootstrap"] == ",".join(addresses)
    assert [address.rsplit(":", 1)[0] for address in addresses] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    running = processes_mentioning(cluster_directory)
    for node, entry in summary["brokers"].items():
        assert "broker_impl.broker" in running[entry["pid"]], node
        assert Path(entry["data"]).is_dir()
        assert api_versions_answer(entry["address"])
    assert "broker_impl.controller" in running[summary["controller"]["pid"]]
    assert len(running) == 4

    created = localcluster(
        "create-topic",
        "--dir",
        str(cluster_directory),
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
    )
    assert created.returncode == 0, created.stderr
    cluster = LocalCluster(cluster_directory)
    partitions = cluster.describe()["topics"]["orders"]["partitions"]
    assert len(partitions) == 2
    assert all(state["leader"] >= 0 and sorted(state["replicas"]) == [1, 2, 3] for state in partitions)
    assert produce_all(summary["bootstrap"], "orders", [b"hello"]) == [0]
    assert [read_partition(summary["bootstrap"], "orders", index) for index in (0, 1)] in (
        [[(0, b"hello")], []],
        [[], [(0, b"hello")]],
    )

    # A broker restarted through the Python API gets a new pid; `down` must stop it too.
    # While it is down, clients bootstrap from the brokers that run (kafka-python 3 would keep
    # drawing the dead one); back up, it is listed again.
    cluster.kill("2")
    assert cluster.bootstrap() == ",".join([addresses[0], addresses[2]])
    restarted = cluster.start("2")
    cluster.wait_ready()
    assert restarted != summary["brokers"]["2"]["pid"]
    assert cluster.bootstrap() == ",".join(addresses)

    stopped = localcluster("down", "--dir", str(cluster_directory))
    assert stopped.returncode == 0, stopped.stderr
    reap_children()
    assert processes_mentioning(cluster_directory) == {}


def test_set_routes_each_key_to_the_processes_that_know_it(cluster_directory: Path) -> None:
    started = localcluster(
        "up",
        "--brokers",
        "1",
        "--dir",
        str(cluster_directory),
        "--set",
        "min.insync.replicas=1",
        "--set",
        "broker.session.timeout.ms=4000",
        "--set",
        "truncation.mode=high-watermark",
    )
    assert started.returncode == 0, started.stderr
    broker = (cluster_directory / "broker-1" / "broker.properties").read_text().splitlines()
    controller = (cluster_directory / "controller" / "controller.properties").read_text().splitlines()
    assert "truncation.mode=high-watermark" in broker
    assert "min.insync.replicas=1" in broker
    assert "min.insync.replicas=1" in controller
    assert "broker.session.timeout.ms=4000" in controller
    assert not any(line.startswith("broker.session.timeout.ms") for line in broker)
    assert not any(line.startswith("truncation.mode") for line in controller)


# ---- bad arguments: exit code 2, one clear line -------------------------------------------------


def assert_clean_failure(finished: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert finished.returncode == 2, finished.stderr
    assert "Traceback" not in finished.stderr, finished.stderr
    assert finished.stderr.startswith("localcluster: "), finished.stderr
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
    for fragment in fragments:
        assert fragment in finished.stderr


def test_unknown_set_key_fails_cleanly_before_starting_anything(cluster_directory: Path) -> None:
    finished = localcluster("up", "--brokers", "1", "--dir", str(cluster_directory), "--set", "no.such.key=1")
    assert_clean_failure(finished, "--set no.such.key: not a broker or controller setting")
    assert processes_mentioning(cluster_directory) == {}


def test_bad_set_value_fails_cleanly_naming_key_and_value(cluster_directory: Path) -> None:
    """The value is checked by the same parser as the config files, before any process
    starts -- not discovered as a broker that never comes up (a timeout that names
    nothing)."""
    finished = localcluster(
        "up",
        "--brokers",
        "1",
        "--dir",
        str(cluster_directory),
        "--set",
        "min.insync.replicas=zero",
        "--timeout",
        "10",
    )
    assert_clean_failure(finished, "min.insync.replicas", "'zero'")
    assert "timed out" not in finished.stderr
    assert processes_mentioning(cluster_directory) == {}


def test_set_without_a_value(cluster_directory: Path) -> None:
    finished = localcluster("up", "--dir", str(cluster_directory), "--set", "flush.ms")
    assert_clean_failure(finished, "--set 'flush.ms': expected KEY=VALUE")


def test_down_without_a_cluster(tmp_path: Path) -> None:
    assert_clean_failure(localcluster("down", "--dir", str(tmp_path)), f"no cluster in {tmp_path}")


def test_zero_brokers(cluster_directory: Path) -> None:
    assert_clean_failure(
        localcluster("up", "--brokers", "0", "--dir", str(cluster_directory)), "--brokers must be at least 1"
    )


def test_create_topic_errors_are_clean(cluster_directory: Path) -> None:
    assert localcluster("up", "--brokers", "1", "--dir", str(cluster_directory)).returncode == 0
    too_many = localcluster("create-topic", "--dir", str(cluster_directory), "t", "--replication-factor", "2")
    assert_clean_failure(too_many, "replication factor 2 > 1 live brokers")
    assert localcluster("create-topic", "--dir", str(cluster_directory), "t").returncode == 0
    assert_clean_failure(localcluster("create-topic", "--dir", str(cluster_directory), "t"), "exists")


# ---- the Python API's cleanup contract ------------------------------------------------------------


def test_down_after_a_refused_up_is_harmless(tmp_path: Path) -> None:
    """Fixtures call down() in teardown whatever happened -- also when up() refused its
    arguments before starting anything."""
    cluster = LocalCluster(tmp_path / "refused")
    with pytest.raises(ClusterError, match=r"no\.such\.key"):
        cluster.up(1, {"no.such.key": "1"})
    cluster.down()
    assert processes_mentioning(tmp_path / "refused") == {}


# ---- an owner that dies without its teardown ---------------------------------------------------


def test_a_cluster_started_in_process_ends_when_its_owner_is_killed(cluster_directory: Path) -> None:
    """A test run or bench SIGKILLed mid-way leaves no controller or broker behind -- a paused one
    included (its orphaned process group gets SIGHUP and SIGCONT from the kernel); the CLI's
    ``up`` above is the detached case and outlives its command."""
    # SIGHUP as a terminal session has it: a suite started under nohup (SIGHUP ignored, which
    # children inherit) would otherwise see the paused broker resume on the kernel's SIGCONT and
    # stop by its owner watch instead -- gone all the same, but by the other path.
    owner_code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
        "from broker_impl.localcluster import LocalCluster\n"
        f"cluster = LocalCluster({str(cluster_directory)!r})\n"
        "cluster.up(2, {})\n"
        "cluster.pause('2')\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], cwd=REPOSITORY, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "up\n"
        started = {pid for pid in processes_mentioning(cluster_directory) if pid != owner.pid}
        assert len(started) == 3, started  # the controller and two brokers
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while processes_mentioning(cluster_directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(cluster_directory) == {}
    logs = "".join(path.read_text() for path in sorted(cluster_directory.glob("*/process.log")))
    assert logs.count("is gone: stopping") == 2, "the running two stop cleanly; the paused one by SIGHUP"
