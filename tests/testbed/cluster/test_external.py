"""Runs against a cluster the harness did not start (``--bootstrap``), fault-free and with
faults over SSH through an inventory -- with real processes and real containers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.spec import NemesisSpec
from testbed.cluster.bundled import BundledCluster
from testbed.cluster.docker_cluster import CONTROLLER, DockerCluster
from testbed.cluster.external import InventoryError, load_inventory
from testbed.cluster.image import IMAGE_PYTHON
from testbed.record.history import read_history
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from workloads.queue import QueueSpec


def test_fault_free_run_against_a_local_cluster_is_valid_with_the_replica_checks_not_applicable(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture imported above
    tmp_path: Path,
) -> None:
    cluster = start_cluster(3)
    spec = TestSpec(
        name="external", time_limit=5, bootstrap=cluster.bootstrap(), workload=QueueSpec(rate=100)
    )
    outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    assert outcome.verdict is True, outcome.results["incomplete"]
    assert "external cluster" in outcome.results["not_applicable"]["replica-divergence"]
    assert outcome.results["anomalies"] == {}
    ops, _ = read_history(outcome.run_dir / "history.jsonl")
    assert sum(op.type == "ok" and op.f == "send" for op in ops) > 100


def test_inventory_errors_name_file_node_and_key(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text('[nodes.a]\nhost = "10.0.0.1"\nbroker_id = 1\n')
    with pytest.raises(InventoryError, match=r"inventory.toml: nodes.a: start is required"):
        load_inventory(path)
    path.write_text('[nodes.a]\nhost = "h"\nbroker_id = 1\nstart = ["x"]\ncolour = "red"\n')
    with pytest.raises(InventoryError, match="unknown keys colour"):
        load_inventory(path)


@pytest.mark.docker
@pytest.mark.slow
def test_kill_faults_over_ssh_inventory(image: str, docker_client: object, tmp_path: Path) -> None:
    with DockerCluster(docker_client, image, brokers=3) as containers:  # type: ignore[arg-type]
        bundled = BundledCluster(
            containers.remotes(),
            {n: containers.ip(n) for n in containers.node_names},
            containers.broker_names,
            CONTROLLER,
            {},
        )
        bundled.configure()
        bundled.start()
        inventory = tmp_path / "inventory.toml"
        lines = [
            "[defaults]",
            'user = "root"',
            f'key = "{containers.ssh_key_path}"',
            f'known_hosts = "{containers.known_hosts_path}"',
            f'start = ["{IMAGE_PYTHON}", "-m", "broker_impl.broker", "--config", "/etc/tidemark/broker.properties"]',
            'logs = ["/var/log/tidemark/broker.log"]',
        ]
        for index, name in enumerate(containers.broker_names, start=1):
            lines += [f"[nodes.{name}]", f'host = "{containers.ip(name)}"', f"broker_id = {index}"]
        inventory.write_text("\n".join(lines) + "\n")
        spec = TestSpec(
            name="external-ssh",
            time_limit=15,
            bootstrap=bundled.bootstrap,
            inventory=str(inventory),
            workload=QueueSpec(rate=100),
            nemesis=NemesisSpec(faults=("kill",), interval_seconds=4, seed=1),
        )
        outcome = run_test(spec, tmp_path / "store")
    assert outcome.results is not None, outcome.problems
    ops, _ = read_history(outcome.run_dir / "history.jsonl")
    kills = [op for op in ops if op.f == "kill" and op.type == "ok"]
    assert kills, "the nemesis must have killed a broker over SSH"
    assert outcome.results["anomalies"] == {}, json.dumps(outcome.results["anomalies"])[:2000]
    assert outcome.verdict is True, outcome.results["incomplete"]  # divergence: not applicable
    assert (outcome.run_dir / "nodes" / "n1" / "broker.log").exists()
