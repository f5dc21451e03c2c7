"""``slow-link`` for real, in network namespaces (``tests/nemesis/netns.py``, root only): a node's
packets to a peer go through the rate-limited class and are held back by it, TCP still works
(slow, not cut), the heal and heal-all leave the node's qdiscs exactly as they were, and a root
qdisc that is not the nemesis' own is neither replaced nor removed.

"Held back" is read off the kernel's own counters, not a clock: the shaped class's ``overlimits``
counts the packets that found no token and had to wait, and :data:`DATAGRAMS` datagrams of
:data:`DATAGRAM_BYTES` sent at once to a 64 kbit/s link (8 KB/s) exceed its 4 KiB burst at once.
"""

from __future__ import annotations

import re
import sys

from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.slow_link import HANDLE
from nemesis.spec import NemesisSpec
from nemesis.steps import FaultStep
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import NetnsCluster

DATAGRAMS = 40
DATAGRAM_BYTES = 1000
SEND = """
import socket, sys
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[2])):
    sender.sendto(b"x" * int(sys.argv[3]), (sys.argv[1], 9))
"""


def sh(netns: NetnsCluster, node: str, script: str) -> str:
    return str(netns.remote(node).exec(["sh", "-c", script], timeout=30).stdout_text)


def device_towards(netns: NetnsCluster, node: str, peer: str) -> str:
    route = sh(netns, node, f"ip -o -4 route get {netns.ip(peer)}")
    found = re.search(r" dev (\S+)", route)
    assert found, route
    return found.group(1)


def class_counters(netns: NetnsCluster, node: str, device: str, classid: str) -> dict[str, int]:
    """``Sent`` bytes and packets and ``overlimits`` of one htb class (KeyError: no such class)."""
    listing = sh(netns, node, f"tc -s class show dev {device}")
    block = listing.split(f"class htb {classid} ")[1].split("class htb ")[0]
    sent = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped \d+, overlimits (\d+)", block)
    assert sent, block
    return {"bytes": int(sent.group(1)), "packets": int(sent.group(2)), "overlimits": int(sent.group(3))}


def test_real_slow_link_holds_back_a_peer_s_packets_and_heals_leave_nothing(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    recorder, _ = recorded
    nemesis = Nemesis(
        NemesisSpec(faults=("slow-link",)), netns, recorder, NemesisConfig(leader_partitions=[("q", 0)])
    )
    netns.wait_for(lambda: netns.reachable("n1", "n2") and netns.reachable("n3", "n1"), "echo servers up")
    everyone = [*netns.brokers, *([netns.controller] if netns.controller else [])]
    before = {node: sh(netns, node, "tc qdisc show") for node in everyone}
    device = device_towards(netns, "n1", "n2")

    assert nemesis.apply(FaultStep("slow-link", ("n1",), rate_kbit=64)).type == "ok"
    assert f"qdisc htb {HANDLE}: root" in sh(netns, "n1", f"tc qdisc show dev {device}")
    sh(netns, "n1", f"{sys.executable} -c '{SEND}' {netns.ip('n2')} {DATAGRAMS} {DATAGRAM_BYTES}")
    slow = class_counters(netns, "n1", device, f"{HANDLE}:2")
    fast = class_counters(netns, "n1", device, f"{HANDLE}:1")
    assert slow["overlimits"] > 0, f"the shaper held nothing back: {slow}"
    assert slow["packets"] >= 1 and fast["bytes"] < DATAGRAM_BYTES, (slow, fast)
    assert netns.reachable("n1", "n2", timeout=10), "TCP n1 -> n2 still works: slow, not cut"
    assert sh(netns, "n2", "tc qdisc show") == before["n2"], "only the node named is slowed"

    assert nemesis.apply(FaultStep("slow-link-heal", ("n1",))).type == "ok"
    assert sh(netns, "n1", "tc qdisc show") == before["n1"], "the heal took the qdisc away"

    foreign = "tc qdisc add dev {dev} root tbf rate 1mbit burst 32k latency 100ms"
    n3_device = device_towards(netns, "n3", "n1")
    sh(netns, "n3", foreign.format(dev=n3_device))
    refused = nemesis.apply(FaultStep("slow-link", ("n3",)))
    assert refused.type != "ok" and "not ours" in str(refused.value.get("errors", {})), refused.value
    assert nemesis.apply(FaultStep("slow-link", ("n2",))).type == "ok"
    assert [(op.f, op.type) for op in nemesis.heal_all()][1:] == [("heal", "ok"), ("resume", "ok")]
    assert "qdisc tbf" in sh(netns, "n3", f"tc qdisc show dev {n3_device}"), "someone else's qdisc stays"
    sh(netns, "n3", f"tc qdisc del dev {n3_device} root")
    assert {node: sh(netns, node, "tc qdisc show") for node in everyone} == before, "heal-all left no qdisc"


def test_real_slow_link_of_the_controller_holds_back_only_the_peers_it_names(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    """The controller node's egress towards n1 only: its packets to n1 wait for the shaper's
    tokens, its packets to n2 pass through the unlimited class (recommission-late-metadata)."""
    recorder, _ = recorded
    nemesis = Nemesis(
        NemesisSpec(faults=("slow-link",)), netns, recorder, NemesisConfig(leader_partitions=[("q", 0)])
    )
    assert netns.controller is not None
    controller = netns.controller
    netns.wait_for(
        lambda: netns.reachable(controller, "n1") and netns.reachable(controller, "n2"), "echo servers up"
    )
    before = sh(netns, controller, "tc qdisc show")
    device = device_towards(netns, controller, "n1")
    assert device == device_towards(netns, controller, "n2"), "one device: only the filter tells them apart"

    step = FaultStep("slow-link", (controller,), rate_kbit=64, peers=("n1",))
    assert nemesis.apply(step).type == "ok"
    send = f"{sys.executable} -c '{SEND}' {{peer}} {DATAGRAMS} {DATAGRAM_BYTES}"
    sh(netns, controller, send.format(peer=netns.ip("n2")))
    to_n2 = class_counters(netns, controller, device, f"{HANDLE}:2")
    assert to_n2["packets"] == 0 and class_counters(netns, controller, device, f"{HANDLE}:1")["bytes"] >= (
        DATAGRAMS * DATAGRAM_BYTES
    ), "n2 is not a named peer: unlimited"
    sh(netns, controller, send.format(peer=netns.ip("n1")))
    to_n1 = class_counters(netns, controller, device, f"{HANDLE}:2")
    assert to_n1["overlimits"] > 0 and to_n1["packets"] >= 1, f"the shaper held nothing back: {to_n1}"
    assert netns.reachable(controller, "n1", timeout=10), "slow, not cut"

    assert nemesis.apply(FaultStep("slow-link-heal", (controller,))).type == "ok"
    assert sh(netns, controller, "tc qdisc show") == before, "the heal took the qdisc away"
