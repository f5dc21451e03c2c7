"""The ``packet-loss`` fault: chosen nodes drop a random fraction of the packets from their peers.

A degraded network, not a cut: each packet from another node of the cluster (brokers and the
controller) is dropped with probability :data:`LOSS_PROBABILITY`, drawn per packet by iptables'
``statistic`` match (``--mode random``).  This machine's kernel has no ``netem`` qdisc, so the
loss is done where partitions are done already, in a chain of its own
(:data:`nemesis.iptables.LOSS_CHAIN`): a ``partition``'s heal or a ``metadata-heal`` never
undo it, its heal (``packet-loss-heal``) undoes nothing else, and heal-all's chain removal
(:func:`nemesis.iptables.remove_script`) takes it away with the others.  On the Docker clusters
the rules live in the node's own network namespace and go with the container.

**Whose packets.**  Only the node's peers, by source address, as a partition does: replication,
fetches and controller heartbeats suffer; the clients (on the host) and the nemesis' own control
channel (``docker exec`` or SSH) do not, so a heal is never slowed by the loss it heals.
Client-side faults are the client faults' job.

**Why 0.3.**  TCP hides light loss: at 5 % a retransmission costs one RTO now and then and the
run looks fault-free.  From about 50 % on, runs of drops (0.5^4 = 6 %) back the RTO off to
seconds and the link behaves like a partition, which the nemesis has already.  At 30 % a
segment is lost every third send and two in a row 9 % of the time (RTO 200 ms, then 400 ms):
fetches and heartbeats stall for hundreds of milliseconds to seconds, enough to push a follower
out of the ISR or time a session out now and then, while the connection stays up -- the grey
zone between "healthy" and "partitioned" where timeout and ISR bugs live.  The registry
declares it as the kind's parameter and every op records it (``"probability"``).

This module is the fault's per-node mechanism, as :mod:`nemesis.metadata_delay` is for its fault:
:class:`nemesis.broker_acts.BrokerActs` calls :meth:`PacketLoss.inject` and :meth:`PacketLoss.heal`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nemesis import iptables
from nemesis.fault_kinds import PACKET_LOSS_PROBABILITY
from nemesis.plan import Layout, PlanError

LOSS_PROBABILITY: Final[float] = PACKET_LOSS_PROBABILITY
"""The probability each packet from a peer is dropped (the registry's default; see above)."""


class PacketLoss:
    """How packet loss is put on and taken off one node.

    ``layout`` names the cluster's nodes (the peers are all of them but the node), ``ip_of`` maps
    a node to its IPv4 address on the cluster network, and ``run(node, script)`` runs a shell
    program on a node, raising when it did not succeed.  Nothing is run until :meth:`inject`
    or :meth:`heal` is called.
    """

    def __init__(
        self,
        layout: Layout,
        ip_of: Callable[[str], str],
        run: Callable[[str, str], None],
        probability: float = LOSS_PROBABILITY,
    ) -> None:
        iptables.checked_probability(probability)  # a bad probability is refused before any node
        self.layout = layout
        self.ip_of = ip_of
        self.run = run
        self.probability = probability

    def script(self, node: str) -> str:
        """The program that makes ``node`` lose packets from its peers; PlanError when an address is unusable."""
        peers = [peer for peer in self.layout.all_nodes if peer != node]
        try:
            sources = [iptables.node_ipv4(peer, self.ip_of) for peer in peers]
        except ValueError as error:
            raise PlanError(f"packet-loss: {error}") from None
        return iptables.packet_loss_script(sources, self.probability)

    def inject(self, node: str) -> None:
        """Make ``node`` drop each packet from its peers with :attr:`probability` (replacing an earlier loss)."""
        self.run(node, self.script(node))

    def heal(self, node: str) -> None:
        """Stop the loss on ``node``; idempotent; partitions and metadata delays stay."""
        self.run(node, iptables.packet_loss_heal_script())
