"""The ``one-way`` fault: chosen brokers stop hearing the other brokers, while those still hear them.

A symmetric partition cuts a node off both ways; many replication bugs need a cut that is not
symmetric (Jepsen's one-way partitions; "a leader that hears the controller but not its
followers").  Dropping a peer's packets outright cannot make one for TCP: the answer to the
handshake -- or the acknowledgements of every segment -- would be lost too, and both directions
stop.  So the node drops only the peer's segments that carry *data*
(:data:`nemesis.iptables.TCP_PAYLOAD`, iptables' ``u32`` match, in the chain
:data:`nemesis.iptables.ONE_WAY_CHAIN`): handshakes and acknowledgements pass, so whatever the node
sends still arrives and is acknowledged, and whatever the peer sends -- a request, or the answer to
the node's own request -- is lost (retransmitted, then given up).  With Kafka's request-response
protocol: a *deaf leader* (target ``leader``) receives no Fetch from its followers, so they fall
out of its ISR, while its own requests to the controller go on (the controller is not a source:
it is the node's metadata, cut by ``metadata-delay`` instead); *deaf followers* (target
``followers``) send their Fetches, which the leader receives and answers into the void -- the
leader sees followers that ask and never advance.

Sources are the other brokers only: the controller, the clients and the nemesis' control channel
are heard as before, so a heal is never blocked by the fault it heals.  A heal (``one-way-heal``)
flushes the chain; partitions, packet loss and metadata delays stay as they are.

This module is the fault's per-node mechanism, as :mod:`nemesis.packet_loss` is for its fault:
:class:`nemesis.broker_acts.BrokerActs` calls :meth:`OneWay.inject` and :meth:`OneWay.heal`.
"""

from __future__ import annotations

from collections.abc import Callable

from nemesis import iptables
from nemesis.plan import Layout, PlanError


class OneWay:
    """How a one-way cut is put on and taken off one broker node.

    ``layout`` names the cluster's brokers (the sources are all of them but the node), ``ip_of``
    maps a node to its IPv4 address on the cluster network, and ``run(node, script)`` runs a shell
    program on a node, raising when it did not succeed.
    """

    def __init__(self, layout: Layout, ip_of: Callable[[str], str], run: Callable[[str, str], None]) -> None:
        self.layout = layout
        self.ip_of = ip_of
        self.run = run

    def script(self, node: str) -> str:
        """The program that makes ``node`` deaf to the other brokers; PlanError when an address is unusable."""
        peers = [peer for peer in self.layout.brokers if peer != node]
        try:
            sources = [iptables.node_ipv4(peer, self.ip_of) for peer in peers]
        except ValueError as error:
            raise PlanError(f"one-way: {error}") from None
        return iptables.one_way_script(sources)

    def inject(self, node: str) -> None:
        """Make ``node`` stop hearing the other brokers (replacing an earlier one-way cut on it)."""
        self.run(node, self.script(node))

    def heal(self, node: str) -> None:
        """``node`` hears the other brokers again; idempotent; other faults stay."""
        self.run(node, iptables.one_way_heal_script())
