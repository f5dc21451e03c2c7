"""The ``metadata-delay`` fault: chosen brokers stop hearing from the controller (KIP-320 zombies).

The bundled brokers learn leadership and ISR changes only from the controller: a heartbeat RPC
over TCP to the controller node's address, whose replies carry the metadata. Dropping, on a
broker, every incoming packet whose source is the controller's address loses those replies and
every reconnect, while broker<->broker replication goes on untouched. The controller soon fences
the broker (its session times out) and moves leadership away, but the broker keeps acting on its
old metadata -- a zombie leader or follower, the case KIP-320's epoch fencing exists for.

The drop lives in its own chain (:data:`nemesis.iptables.METADATA_CHAIN`), so a ``partition``
and its ``heal`` (which replace and flush the partition chain) neither undo a metadata delay nor
are undone by it. The heal flushes that chain only: "late" is a delay healed after its duration,
"not at all" one never healed within the run (heal-all at the end still removes the chain).

This module is the fault's per-node mechanism. :class:`nemesis.mechanism.Nemesis` records it like
the other node faults: ops ``metadata-delay`` and its heal ``metadata-heal`` (``nemesis.spec.HEALS``),
value ``{"nodes": [...]}`` plus ``target``/``leader_of`` when the schedule chose the nodes.
"""

from __future__ import annotations

from collections.abc import Callable

from nemesis import iptables
from nemesis.plan import Layout, PlanError, metadata_source
from nemesis.spec import METADATA_DELAY


class MetadataDelay:
    """How a metadata delay is put on and taken off one broker node.

    ``layout`` names the controller (:func:`nemesis.plan.metadata_source`), ``ip_of`` maps a node
    to its IPv4 address on the cluster network, and ``run(node, script)`` runs a shell program on
    a node, raising when it did not succeed (the nemesis' remote exec). Nothing is looked up or
    run until :meth:`inject` or :meth:`heal` is called.
    """

    def __init__(self, layout: Layout, ip_of: Callable[[str], str], run: Callable[[str, str], None]) -> None:
        self.layout = layout
        self.ip_of = ip_of
        self.run = run

    def controller_address(self) -> str:
        """The controller's IPv4 address; PlanError saying why when there is no controller or no usable address."""
        controller = metadata_source(self.layout)
        try:
            return iptables.node_ipv4(controller, self.ip_of)
        except ValueError as error:
            raise PlanError(f"{METADATA_DELAY}: {error}") from None

    def inject(self, node: str) -> None:
        """Make ``node`` drop every packet from the controller (replacing an earlier delay on it).

        Raises PlanError, before touching ``node``, when the controller's address is unusable.
        """
        self.run(node, iptables.metadata_delay_script(self.controller_address()))

    def heal(self, node: str) -> None:
        """Let ``node`` hear from the controller again; idempotent; a partition on it is left in place."""
        self.run(node, iptables.metadata_heal_script())
