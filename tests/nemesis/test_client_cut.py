"""``client-cut``: its declaration, the iptables program (peers and the nemesis' control ports let
through, every other TCP packet dropped), its ops and heal-all, without containers; and for real in
network namespaces: a non-peer cannot reach the node while a peer can, and the heal undoes it."""

from __future__ import annotations

import shlex

from harness.report import plots
from nemesis import iptables
from nemesis.broker_acts import NODE_ACTS
from nemesis.client_cut import CONTROL_PORTS, ClientCut
from nemesis.fault_kinds import kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.plan import Layout
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from nemesis.steps import FaultStep
from testbed.cluster.bundled import PROXY_CONTROL_PORT
from testbed.record import faults as record
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import NetnsCluster
from tests.nemesis.test_mechanism import FakeCluster


def test_client_cut_is_declared_once_with_its_heal_colour_and_mechanism() -> None:
    kind = kind_of("client-cut")
    assert kind.heal == "client-heal" and kind_of("client-heal").nodes == "optional"
    assert plots.fault_colour("client-cut") == kind.colour
    assert {"client-cut", "client-heal"} <= set(MECHANISMS) & set(NODE_ACTS)
    assert record.HEALS["client-cut"] == "client-heal"
    assert "client-cut" in NEMESIS_CHOICES and "client-heal" not in NEMESIS_CHOICES
    assert iptables.CLIENT_CHAIN in iptables.CHAINS, "heal-all removes its chain with the others"


def test_peers_and_control_ports_pass_and_every_other_tcp_packet_is_dropped() -> None:
    assert CONTROL_PORTS == (22, PROXY_CONTROL_PORT)
    lines = iptables.client_cut_script(["10.9.0.3", "10.9.0.2", "10.9.0.3"], (9095, 22)).splitlines()
    rules = [shlex.split(line)[3:] for line in lines if " -A " in line]
    assert rules == [
        ["-A", "TIDEMARK-CLIENT", "-s", "10.9.0.2/32", "-j", "RETURN"],
        ["-A", "TIDEMARK-CLIENT", "-s", "10.9.0.3/32", "-j", "RETURN"],
        ["-A", "TIDEMARK-CLIENT", "-p", "tcp", "--dport", "22", "-j", "RETURN"],
        ["-A", "TIDEMARK-CLIENT", "-p", "tcp", "--dport", "9095", "-j", "RETURN"],
        ["-A", "TIDEMARK-CLIENT", "-p", "tcp", "-j", "DROP"],
    ], "the DROP comes last: a peer's packet returns before it"
    assert iptables.client_heal_script() == iptables.heal_script("TIDEMARK-CLIENT")


def test_client_cut_and_its_heal_are_nemesis_ops(recorded: tuple[Recorder, list[Op]]) -> None:
    _, ops = recorded
    cluster = FakeCluster()
    nemesis = Nemesis(
        NemesisSpec(faults=("client-cut",)), cluster, recorded[0], NemesisConfig(leader_partitions=[("q", 0)])
    )
    assert nemesis.apply(FaultStep("client-cut", ("n1",))).type == "ok"
    assert cluster.remotes["n1"].scripts == [
        iptables.client_cut_script(["10.9.0.2", "10.9.0.3", "10.9.0.4"], CONTROL_PORTS)
    ]
    healed = nemesis.heal_all()
    assert [(op.f, op.type) for op in healed] == [("client-heal", "ok"), ("heal", "ok"), ("resume", "ok")]
    first = next(op for op in ops if op.type == "ok")
    assert (first.f, first.value) == ("client-cut", {"nodes": ["n1"]})
    assert nemesis.active_faults() == []


def test_real_client_cut_keeps_peers_and_drops_everyone_else(netns: NetnsCluster) -> None:
    netns.wait_for(lambda: netns.reachable("n3", "n1") and netns.reachable("n2", "n1"), "echo servers up")
    before = netns.remote("n1").exec(["iptables", "-w", "10", "-S"]).stdout_text

    def run(node: str, script: str) -> None:
        netns.remote(node).exec(["sh", "-c", script], timeout=30)

    # n3 stands for a client: the cut's layout makes only n2 and the controller n1's peers.
    cut = ClientCut(Layout(("n1", "n2"), netns.controller), netns.ip, run)
    cut.inject("n1")
    assert not netns.reachable("n3", "n1", timeout=2), "a client cannot reach the cut broker"
    assert netns.reachable("n2", "n1"), "its peers still can"
    assert not netns.reachable("n1", "n3", timeout=2), "nor the broker a client: TCP needs both ways"
    cut.heal("n1")
    assert netns.reachable("n3", "n1", timeout=5)
    run("n1", iptables.remove_script())
    assert netns.remote("n1").exec(["iptables", "-w", "10", "-S"]).stdout_text == before
