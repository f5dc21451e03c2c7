"""``packet-loss`` for real: packets from a peer are lost at about the declared rate, TCP between
the nodes still works (degraded, not cut), its heal empties the loss chain, and heal-all leaves
every node's rules exactly as they were.  Once in network namespaces (``tests/nemesis/netns.py``,
root only) and once in containers of the node image (marker ``docker``).

The rate is measured with the rule's own packet counter: a peer sends :data:`DATAGRAMS` UDP
datagrams to the lossy node, and the ``DROP`` rule for that peer's address counts what it drew.
The echo servers talk to no one of their own accord, so nothing else reaches the rule;
at p = 0.3 the count is 300 +/- 14.5 (one standard deviation), and the bounds below are 7
deviations wide on each side.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import pytest

from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.packet_loss import LOSS_PROBABILITY
from nemesis.spec import NemesisSpec
from nemesis.steps import FaultStep
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import NetnsCluster
from tests.nemesis.test_mechanism import EchoBrokers, wait_until

DATAGRAMS = 1000
SEND = """
import socket, sys
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[2])):
    sender.sendto(b"x", (sys.argv[1], 9))
"""
LOSS_BOUNDS = (200, 400)
"""Dropped of :data:`DATAGRAMS` at p = 0.3: mean 300, standard deviation 14.5."""


class EchoHandle(Protocol):
    """What both clusters of echo servers offer (:class:`NetnsCluster`, :class:`EchoBrokers`)."""

    brokers: list[str]
    controller: str | None

    def remote(self, node: str) -> Any: ...

    def ip(self, node: str) -> str: ...

    def reachable(self, source: str, target: str, timeout: float = ...) -> bool: ...


def rules(handle: EchoHandle, node: str) -> str:
    return str(handle.remote(node).exec(["iptables", "-w", "10", "-S"]).stdout_text)


def dropped_from(handle: EchoHandle, node: str, source: str) -> int:
    """The packet count of ``node``'s loss rule for ``source`` (0 when there is none)."""
    listing = handle.remote(node).exec(["iptables", "-w", "10", "-L", "TIDEMARK-LOSS", "-v", "-n", "-x"])
    for line in str(listing.stdout_text).splitlines():
        fields = line.split()  # pkts bytes target prot [opt] in out source destination ...
        if "DROP" in fields and source in fields:
            return int(fields[0])
    return 0


def send_datagrams(handle: EchoHandle, python: str, source: str, target: str) -> None:
    handle.remote(source).exec([python, "-c", SEND, handle.ip(target), str(DATAGRAMS)], timeout=60)


def show_loss_heal_and_heal_all(handle: EchoHandle, python: str, nemesis: Nemesis, ops: list[Op]) -> None:
    """The whole real check, on any cluster of echo servers whose first two brokers are n1, n2."""
    everyone = [*handle.brokers, *([handle.controller] if handle.controller else [])]
    before = {node: rules(handle, node) for node in everyone}
    assert nemesis.apply(FaultStep("packet-loss", ("n1",))).type == "ok"
    send_datagrams(handle, python, "n2", "n1")
    dropped = dropped_from(handle, "n1", handle.ip("n2"))
    assert LOSS_BOUNDS[0] <= dropped <= LOSS_BOUNDS[1], f"{dropped} of {DATAGRAMS} at p = {LOSS_PROBABILITY}"
    wait_until(
        lambda: handle.reachable("n2", "n1", timeout=5), 60, "TCP n2 -> n1 through the loss (not a cut)"
    )
    assert "TIDEMARK-LOSS" not in rules(handle, "n2"), "only the node named loses packets"

    assert nemesis.apply(FaultStep("packet-loss-heal", ("n1",))).type == "ok"
    assert "-A TIDEMARK-LOSS" not in rules(handle, "n1"), "the heal emptied the loss chain"
    send_datagrams(handle, python, "n2", "n1")
    assert dropped_from(handle, "n1", handle.ip("n2")) == 0

    assert nemesis.apply(FaultStep("packet-loss", ("n1", "n3"))).type == "ok"
    assert "statistic" in rules(handle, "n3")
    assert [(op.f, op.type) for op in nemesis.heal_all()] == [
        ("packet-loss-heal", "ok"),
        ("heal", "ok"),
        ("resume", "ok"),
    ]
    assert {node: rules(handle, node) for node in everyone} == before, "heal-all left no rule nor chain"
    assert all(op.type in ("invoke", "ok") for op in ops)
    assert [op.f for op in ops if op.type == "ok"] == [
        "packet-loss",
        "packet-loss-heal",
        "packet-loss",
        "packet-loss-heal",
        "heal",
        "resume",
    ]


def test_real_packet_loss_in_network_namespaces(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    recorder, ops = recorded
    nemesis = Nemesis(
        NemesisSpec(faults=("packet-loss",)), netns, recorder, NemesisConfig(leader_partitions=[("q", 0)])
    )
    netns.wait_for(lambda: netns.reachable("n2", "n1") and netns.reachable("n1", "n3"), "echo servers up")
    show_loss_heal_and_heal_all(netns, sys.executable, nemesis, ops)


@pytest.mark.docker
def test_real_packet_loss_in_containers_of_the_node_image(
    docker_client: Any, image: str, recorded: tuple[Recorder, list[Op]]
) -> None:
    from testbed.cluster.docker_cluster import DockerCluster

    recorder, ops = recorded
    with DockerCluster(docker_client, image, brokers=3, fuse=False) as cluster:
        handle = EchoBrokers(cluster)
        for node in handle.brokers:
            handle.start_broker(node)
        wait_until(
            lambda: handle.reachable("n2", "n1") and handle.reachable("n1", "n3"), 20, "echo servers up"
        )
        nemesis = Nemesis(
            NemesisSpec(faults=("packet-loss",)),
            handle,
            recorder,
            NemesisConfig(leader_partitions=[("q", 0)]),
        )
        show_loss_heal_and_heal_all(handle, handle.python, nemesis, ops)
