"""``one-way``: a broker stops hearing the other brokers while they still hear it.

Its plan without any node (the script: its own chain, one ``u32`` data-segment rule per other
broker, never the controller; its op and heal through the nemesis on fake nodes), and its effect
for real in network namespaces (``tests/nemesis/netns.py``, root only): data the deaf node sends
arrives, data sent to it does not -- though the connection is accepted, since handshakes pass --,
the controller is still heard, the heal restores it and heal-all leaves no rule nor chain.
"""

from __future__ import annotations

import concurrent.futures
import sys
from typing import Any

import pytest

from nemesis import iptables
from nemesis.fault_kinds import kind_of
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.one_way import OneWay
from nemesis.plan import Layout
from nemesis.spec import NemesisSpec
from nemesis.steps import FaultStep
from testbed.record import faults as record
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import NetnsCluster
from tests.nemesis.test_mechanism import EchoBrokers, FakeCluster

SINK_PORT = 9556
RECEIVE = f"""
import socket, sys
server = socket.create_server(("0.0.0.0", {SINK_PORT}))
server.settimeout(float(sys.argv[1]))
try:
    connection, _ = server.accept()
    connection.settimeout(float(sys.argv[1]))
    print(connection.recv(64).decode())
except OSError:
    print("<nothing>")
"""
SEND = f"""
import socket, sys, time
deadline = time.monotonic() + 5
while True:
    try:
        connection = socket.create_connection((sys.argv[1], {SINK_PORT}), timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
connection.sendall(sys.argv[2].encode())
time.sleep(float(sys.argv[3]))
"""


def test_the_script_drops_data_segments_of_the_other_brokers_only() -> None:
    layout = Layout(brokers=("n1", "n2", "n3"), controller="c")
    addresses = {"n1": "10.9.0.1", "n2": "10.9.0.2", "n3": "10.9.0.3", "c": "10.9.0.4"}
    ran: list[tuple[str, str]] = []
    one_way = OneWay(layout, addresses.__getitem__, lambda node, script: ran.append((node, script)))
    one_way.inject("n2")
    ((node, script),) = ran
    assert node == "n2" and "TIDEMARK-ONEWAY" in script
    drops = [line for line in script.splitlines() if "-j DROP" in line]
    assert [line.split("-s ")[1].split("/")[0] for line in drops] == ["10.9.0.1", "10.9.0.3"]
    assert all(iptables.TCP_PAYLOAD in line and "-p tcp -m u32" in line for line in drops)
    assert "10.9.0.4" not in script, "the controller is still heard"
    one_way.heal("n2")
    assert ran[-1] == ("n2", iptables.one_way_heal_script())
    assert iptables.ONE_WAY_CHAIN in iptables.CHAINS, "heal-all removes its chain"


def test_the_kind_is_declared_once_with_its_heal_and_colour(recorded: tuple[Recorder, list[Op]]) -> None:
    kind = kind_of("one-way")
    assert kind.heal == "one-way-heal" and record.HEALS["one-way"] == "one-way-heal"
    cluster = FakeCluster()
    nemesis = Nemesis(
        NemesisSpec(faults=("one-way",)), cluster, recorded[0], NemesisConfig(leader_partitions=[("q", 0)])
    )
    assert nemesis.apply(FaultStep("one-way", ("n1",))).type == "ok"
    assert nemesis.active_faults() == ["one-way n1"]
    assert "u32" in cluster.remotes["n1"].scripts[-1]
    assert next(op.f for op in nemesis.heal_all() if op.type == "ok") == "one-way-heal"
    assert nemesis.active_faults() == []


def deliver(handle: Any, python: str, source: str, target: str, text: str, wait: float = 3.0) -> str:
    """What ``target`` receives when ``source`` connects to it and sends ``text`` ("<nothing>" when
    the data never arrives within ``wait`` s)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        received = pool.submit(
            handle.remote(target).exec, [python, "-c", RECEIVE, str(wait)], timeout=wait + 10
        )
        handle.remote(source).exec(
            [python, "-c", SEND, handle.ip(target), text, str(wait)], timeout=wait + 15
        )
        return str(received.result().stdout_text).strip()


def show_one_way_heal_and_heal_all(
    handle: Any, python: str, controller: str, recorded: tuple[Recorder, list[Op]]
) -> None:
    """The whole real check, on nodes n1, n2 and a controller that run ``python``."""
    recorder, ops = recorded
    nemesis = Nemesis(
        NemesisSpec(faults=("one-way",)), handle, recorder, NemesisConfig(leader_partitions=[("q", 0)])
    )

    def rules() -> dict[str, str]:
        return {
            node: handle.remote(node).exec(["iptables", "-w", "10", "-S"]).stdout_text
            for node in ("n1", controller)
        }

    before = rules()
    assert deliver(handle, python, "n2", "n1", "before") == "before"
    assert nemesis.apply(FaultStep("one-way", ("n1",))).type == "ok"
    assert deliver(handle, python, "n1", "n2", "n1-speaks") == "n1-speaks", (
        "the others still hear the deaf node"
    )
    assert deliver(handle, python, "n2", "n1", "n2-speaks") == "<nothing>", (
        "the deaf node hears no other broker"
    )
    assert deliver(handle, python, controller, "n1", "controller") == "controller", (
        "the controller is still heard"
    )
    assert nemesis.apply(FaultStep("one-way-heal", ("n1",))).type == "ok"
    assert deliver(handle, python, "n2", "n1", "healed") == "healed"
    assert nemesis.apply(FaultStep("one-way", ("n1",))).type == "ok"
    nemesis.heal_all()
    assert rules() == before, "heal-all left no rule nor chain"
    assert [op.f for op in ops if op.type == "ok"][:3] == ["one-way", "one-way-heal", "one-way"]


def test_a_deaf_node_is_heard_but_does_not_hear_and_the_heal_restores_it(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    show_one_way_heal_and_heal_all(netns, sys.executable, "c", recorded)


@pytest.mark.docker
def test_the_same_in_containers_of_the_node_image(
    docker_client: Any, image: str, recorded: tuple[Recorder, list[Op]]
) -> None:
    from testbed.cluster.docker_cluster import DockerCluster

    with DockerCluster(docker_client, image, brokers=3, fuse=False) as cluster:
        handle = EchoBrokers(cluster)
        show_one_way_heal_and_heal_all(handle, handle.python, "controller", recorded)
