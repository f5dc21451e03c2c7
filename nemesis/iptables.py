"""Pure translation of a grudge into the iptables commands each node runs, and of a heal.

Every rule the nemesis adds lives in a chain of its own, reached by a single jump from ``INPUT``:

* :data:`CHAIN` (``TIDEMARK``) -- network partitions (:mod:`nemesis.plan`'s grudges);
* :data:`METADATA_CHAIN` (``TIDEMARK-META``) -- the ``metadata-delay`` fault: a broker drops
  every packet from the controller, so it stops learning metadata while replication goes on;
* :data:`LOSS_CHAIN` (``TIDEMARK-LOSS``) -- the ``packet-loss`` fault: a node drops a random
  fraction of the packets from its peers (``-m statistic --mode random``; this kernel has no
  ``netem``, see :mod:`nemesis.packet_loss`);
* :data:`CLIENT_CHAIN` (``TIDEMARK-CLIENT``) -- the ``client-cut`` fault: a node drops every TCP
  packet that is not from a peer nor to one of the nemesis' own control ports
  (:mod:`nemesis.client_cut`);
* :data:`ONE_WAY_CHAIN` (``TIDEMARK-ONEWAY``) -- the ``one-way`` fault: a node drops every TCP
  segment that carries data from the other brokers, and nothing else (:mod:`nemesis.one_way`).

That is what makes healing safe on any host -- a container we own or a user's machine over SSH:
a heal flushes *one of our* chains and nothing else, so rules that Docker, a host firewall or an
operator put in ``INPUT`` are never touched, a partition and its heal never undo a metadata delay
(nor the other way round), and a heal can run any number of times.

* :func:`partition_script` -- make sure the chain exists and ``INPUT`` jumps to it, empty it,
  then ``DROP`` every packet whose source is one of the given addresses. Applying a partition
  *replaces* the previous one on that node (the schedule runs one fault at a time).
* :func:`heal_script` -- empty the chain if it exists (the jump stays; an empty chain matches
  nothing). Fails loudly if iptables itself cannot run (no ``NET_ADMIN``), so a heal that did
  nothing is never reported as done.
* :func:`metadata_delay_script` / :func:`metadata_heal_script` -- the same two, on
  :data:`METADATA_CHAIN`, with the controller's address as the one dropped source.
* :func:`packet_loss_script` / :func:`packet_loss_heal_script` -- the same two, on
  :data:`LOSS_CHAIN`, each source's rule dropping a packet only with the given probability.
* :func:`remove_script` -- heal, then delete the jump and the chain, for *every* nemesis chain
  (:data:`CHAINS`): the node is left exactly as before the first fault (used by heal-all at the
  end of a run).

Each script is one ``/bin/sh`` program per node (``set -eu``), so a fault costs one remote
round trip per node and a failing step stops the script with iptables' own error message.
Only INPUT is filtered (as Jepsen does): dropping one direction already stops TCP both ways, and
the grudges of :mod:`nemesis.plan` are symmetric so both sides drop anyway. ``-w`` waits for the
xtables lock instead of failing when another iptables runs at the same moment. IPv4 only: the
cluster networks the harness creates are IPv4, and an IPv6 address is refused with a clear error
rather than silently not partitioned. Example (``metadata_delay_script("10.9.0.4")``)::

    set -eu
    iptables -w 10 -N TIDEMARK-META 2>/dev/null || iptables -w 10 -F TIDEMARK-META
    iptables -w 10 -C INPUT -j TIDEMARK-META 2>/dev/null || iptables -w 10 -I INPUT 1 -j TIDEMARK-META
    iptables -w 10 -A TIDEMARK-META -s 10.9.0.4/32 -j DROP
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable, Collection, Sequence

from nemesis.plan import Grudge

CHAIN = "TIDEMARK"
"""The chain of network partitions (the default of every function here)."""
METADATA_CHAIN = "TIDEMARK-META"
"""The chain of the ``metadata-delay`` fault: drops from the controller only."""
LOSS_CHAIN = "TIDEMARK-LOSS"
"""The chain of the ``packet-loss`` fault: random drops from the node's peers."""
CLIENT_CHAIN = "TIDEMARK-CLIENT"
"""The chain of the ``client-cut`` fault: TCP from anything but the node's peers dropped."""
ONE_WAY_CHAIN = "TIDEMARK-ONEWAY"
"""The chain of the ``one-way`` fault: data segments from the other brokers dropped, their ACKs not."""
CHAINS: tuple[str, ...] = (CHAIN, METADATA_CHAIN, LOSS_CHAIN, CLIENT_CHAIN, ONE_WAY_CHAIN)
"""Every chain the nemesis may create; :func:`remove_script` removes them all."""
IPTABLES = "iptables"
LOCK_WAIT_SECONDS = 10


def iptables_command(*arguments: str) -> str:
    """One ``iptables`` invocation that waits for the xtables lock, as shell text."""
    return shlex.join([IPTABLES, "-w", str(LOCK_WAIT_SECONDS), *arguments])


def drop_rule(source: str, chain: str = CHAIN) -> str:
    """The command appending ``DROP`` of every packet from ``source`` (an IPv4 address) to ``chain``."""
    return iptables_command("-A", chain, "-s", f"{checked_ipv4(source)}/32", "-j", "DROP")


def random_drop_rule(source: str, probability: float, chain: str = LOSS_CHAIN) -> str:
    """The command appending to ``chain`` a ``DROP`` of each packet from ``source`` with ``probability``.

    Each packet is drawn on its own (``--mode random``), so a TCP segment and its retransmission
    are lost independently: the connection stays up, only slower.
    """
    return iptables_command(
        "-A",
        chain,
        "-s",
        f"{checked_ipv4(source)}/32",
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        checked_probability(probability),
        "-j",
        "DROP",
    )


def checked_probability(probability: float) -> str:
    """``probability`` as iptables' ``--probability`` text; ValueError unless 0 < p <= 1.

    0 would install rules that drop nothing (a fault that is none), and iptables itself refuses
    anything outside [0, 1]; refusing here says so before a node is touched.
    """
    if isinstance(probability, bool) or not 0.0 < float(probability) <= 1.0:
        raise ValueError(f"a loss probability must be > 0 and <= 1, not {probability!r}")
    return repr(float(probability))


def partition_commands(sources: Collection[str], chain: str = CHAIN) -> list[str]:
    """Commands that leave ``chain`` dropping exactly the traffic from ``sources`` (sorted, deduplicated)."""
    return [
        # Create the chain, or empty it if it exists (only -N's "already exists" is silenced:
        # if iptables cannot run at all, -F fails too and reports why).
        f"{iptables_command('-N', chain)} 2>/dev/null || {iptables_command('-F', chain)}",
        f"{iptables_command('-C', 'INPUT', '-j', chain)} 2>/dev/null || {iptables_command('-I', 'INPUT', '1', '-j', chain)}",
        *(drop_rule(source, chain) for source in sorted({checked_ipv4(source) for source in sources})),
    ]


def heal_commands(chain: str = CHAIN) -> list[str]:
    """Commands that stop every drop of ``chain`` on a node; idempotent; fail if iptables cannot run."""
    return [f"{iptables_command('-S', 'INPUT')} >/dev/null", _flush_if_exists(chain)]


def remove_commands(chains: Sequence[str] = CHAINS) -> list[str]:
    """Commands that heal, then delete every jump to and each of ``chains``; idempotent."""
    commands = [f"{iptables_command('-S', 'INPUT')} >/dev/null"]
    for chain in chains:
        commands += [
            _flush_if_exists(chain),
            f"while {iptables_command('-D', 'INPUT', '-j', chain)} 2>/dev/null; do :; done",
            f"if {iptables_command('-S', chain)} >/dev/null 2>&1; then {iptables_command('-X', chain)}; fi",
        ]
    return commands


def _flush_if_exists(chain: str) -> str:
    return f"if {iptables_command('-S', chain)} >/dev/null 2>&1; then {iptables_command('-F', chain)}; fi"


def script(commands: list[str]) -> str:
    """The commands as one ``sh -c`` program that stops at the first failure."""
    return "\n".join(["set -eu", *commands]) + "\n"


def partition_script(sources: Collection[str], chain: str = CHAIN) -> str:
    """One node's program: ``chain`` drops exactly the traffic from ``sources`` (replacing what it dropped)."""
    return script(partition_commands(sources, chain))


def heal_script(chain: str = CHAIN) -> str:
    """One node's program: ``chain`` drops nothing any more (other chains untouched)."""
    return script(heal_commands(chain))


def remove_script(chains: Sequence[str] = CHAINS) -> str:
    """One node's program: no nemesis chain (by default: none of :data:`CHAINS`) nor jump to it is left."""
    return script(remove_commands(chains))


def metadata_delay_script(controller: str) -> str:
    """One broker's program: drop every packet from ``controller`` (an IPv4 address), in :data:`METADATA_CHAIN`."""
    return partition_script([controller], METADATA_CHAIN)


def metadata_heal_script() -> str:
    """One broker's program: stop the metadata delay (flush :data:`METADATA_CHAIN`); partitions untouched."""
    return heal_script(METADATA_CHAIN)


def packet_loss_script(sources: Collection[str], probability: float) -> str:
    """One node's program: :data:`LOSS_CHAIN` drops each packet from ``sources`` with ``probability``
    (replacing the loss it had); partitions and metadata delays untouched."""
    chain_and_jump = partition_commands((), LOSS_CHAIN)
    addresses = sorted({checked_ipv4(source) for source in sources})
    return script([*chain_and_jump, *(random_drop_rule(source, probability) for source in addresses)])


def packet_loss_heal_script() -> str:
    """One node's program: stop the packet loss (flush :data:`LOSS_CHAIN`); other chains untouched."""
    return heal_script(LOSS_CHAIN)


def client_cut_script(peers: Collection[str], control_ports: Collection[int]) -> str:
    """One node's program: :data:`CLIENT_CHAIN` drops every TCP packet whose source is not one of
    ``peers`` and whose destination port is not one of ``control_ports`` (replacing the cut it had)."""
    commands = partition_commands((), CLIENT_CHAIN)
    for peer in sorted({checked_ipv4(peer) for peer in peers}):
        commands.append(iptables_command("-A", CLIENT_CHAIN, "-s", f"{peer}/32", "-j", "RETURN"))
    for port in sorted(set(control_ports)):
        commands.append(
            iptables_command("-A", CLIENT_CHAIN, "-p", "tcp", "--dport", str(port), "-j", "RETURN")
        )
    commands.append(iptables_command("-A", CLIENT_CHAIN, "-p", "tcp", "-j", "DROP"))
    return script(commands)


TCP_PAYLOAD = "0>>22&0x3C@12>>26&0x3C@0>>0=0:0xFFFFFFFF"
"""iptables' ``u32`` test that holds for a TCP segment with at least 4 bytes of data: it skips the
IP header (its IHL) and the TCP header (its data offset) and reads the first 4 bytes after them,
which only a segment that has them can give.  A handshake, a bare ACK or a FIN does not match --
so a node that drops these segments still lets its peer's acknowledgements in and the peer still
receives what the node sends.  (A segment of 1-3 data bytes would slip through; a Kafka message
is never that short: its size prefix alone is 4 bytes.)"""


def one_way_script(sources: Collection[str]) -> str:
    """One node's program: :data:`ONE_WAY_CHAIN` drops every TCP segment carrying data from
    ``sources`` (replacing what it dropped) -- the node stops hearing them, they still hear it."""
    commands = partition_commands((), ONE_WAY_CHAIN)
    for source in sorted({checked_ipv4(source) for source in sources}):
        commands.append(
            iptables_command("-A", ONE_WAY_CHAIN, "-s", f"{source}/32", "-p", "tcp")
            + " "
            + shlex.join(["-m", "u32", "--u32", TCP_PAYLOAD, "-j", "DROP"])
        )
    return script(commands)


def one_way_heal_script() -> str:
    """One node's program: the node hears its peers again (flush :data:`ONE_WAY_CHAIN`); other chains untouched."""
    return heal_script(ONE_WAY_CHAIN)


def client_heal_script() -> str:
    """One node's program: clients reach the node again (flush :data:`CLIENT_CHAIN`); other chains untouched."""
    return heal_script(CLIENT_CHAIN)


def partition_scripts(grudge: Grudge, ip_of: Callable[[str], str]) -> dict[str, str]:
    """For every node of ``grudge``: the script making it drop traffic from its grudge's addresses.

    A node whose set is empty gets a script that only empties the chain, so the whole cluster ends
    in exactly the state the grudge describes. ``ip_of`` maps a node name to its IPv4 address on
    the cluster network; a bad address raises ValueError naming the node.
    """
    addresses: dict[str, str] = {}

    def address(node: str) -> str:
        if node not in addresses:
            addresses[node] = node_ipv4(node, ip_of)
        return addresses[node]

    return {
        node: partition_script([address(source) for source in sorted(grudge[node])])
        for node in sorted(grudge)
    }


def node_ipv4(node: str, ip_of: Callable[[str], str]) -> str:
    """``ip_of(node)`` checked to be IPv4 (normalised); ValueError naming the node otherwise."""
    try:
        return checked_ipv4(ip_of(node))
    except ValueError as error:
        raise ValueError(f"address of node {node}: {error}") from None


def checked_ipv4(text: str) -> str:
    """``text`` if it is a plain IPv4 address (normalised), else ValueError saying why."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address") from None
    if address.version != 4:
        raise ValueError(f"{text!r} is IPv6; the nemesis partitions IPv4 cluster networks only")
    return str(address)
