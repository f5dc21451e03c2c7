"""The ``client-cut`` fault: a broker its clients cannot reach while its peers still can.

Kafka's clients and its replicas reach a broker through the same listener, so a network fault
between the clients and one broker is not a partition of the cluster: replication, the
controller's heartbeats and ISR changes go on, the broker keeps leading, and only the producers
and consumers lose it -- they must find out through metadata (a leader they cannot reach stays
the leader) and retry elsewhere.  Jepsen's client faults and Kafka's system tests' "clients cut
from one broker" are this.  Safety must hold (an acknowledged write was acknowledged by the
leader, reachable or not); what it exercises is the clients' retries and the harness' honesty
about requests that never came back (their ops end ``info``).

**How.**  A chain of its own (:data:`nemesis.iptables.CLIENT_CHAIN`) on the broker's node lets
through every packet from a peer (brokers and the controller, by address) and every TCP packet to
one of :data:`CONTROL_PORTS` (SSH, the request proxy's control channel: the nemesis' own
channels, so a heal is never cut by the fault it heals), and drops every other TCP packet --
the clients' Kafka connections (direct or through the request proxy) and the harness' own
metadata queries to that broker, which are client requests too.  Established connections are
cut as well: a client blocked mid-request sees its request time out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nemesis import iptables
from nemesis.plan import Layout, PlanError
from testbed.cluster.bundled import PROXY_CONTROL_PORT

SSH_PORT: Final = 22
CONTROL_PORTS: Final[tuple[int, ...]] = (SSH_PORT, PROXY_CONTROL_PORT)
"""Ports the cut never closes: the nemesis reaches a node through them (SSH transport, request proxy)."""


class ClientCut:
    """How a client cut is put on and taken off one node (the shape of
    :class:`nemesis.packet_loss.PacketLoss`): ``layout`` names the peers, ``ip_of`` their
    addresses, ``run(node, script)`` runs a program on a node and raises when it did not succeed."""

    def __init__(self, layout: Layout, ip_of: Callable[[str], str], run: Callable[[str, str], None]) -> None:
        self.layout = layout
        self.ip_of = ip_of
        self.run = run

    def script(self, node: str) -> str:
        """The program that cuts ``node`` from its clients; PlanError when an address is unusable."""
        peers = [peer for peer in self.layout.all_nodes if peer != node]
        try:
            addresses = [iptables.node_ipv4(peer, self.ip_of) for peer in peers]
        except ValueError as error:
            raise PlanError(f"client-cut: {error}") from None
        return iptables.client_cut_script(addresses, CONTROL_PORTS)

    def inject(self, node: str) -> None:
        self.run(node, self.script(node))

    def heal(self, node: str) -> None:
        """Let the clients back to ``node``; idempotent; partitions and other faults stay."""
        self.run(node, iptables.client_heal_script())
