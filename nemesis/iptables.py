"""Pure translation of a grudge into the iptables commands each node runs, and of a heal.

Every rule the nemesis adds lives in one dedicated chain, :data:`CHAIN` (``TIDEMARK``), reached
by a single jump from ``INPUT``. That is what makes healing safe on any host -- a container we
own or a user's machine over SSH: a heal flushes *our* chain and nothing else, so rules that
Docker, a host firewall or an operator put in ``INPUT`` are never touched, and a heal can run
any number of times.

* :func:`partition_script` -- make sure the chain exists and ``INPUT`` jumps to it, empty it,
  then ``DROP`` every packet whose source is one of the given addresses. Applying a partition
  *replaces* the previous one on that node (the schedule runs one fault at a time).
* :func:`heal_script` -- empty the chain if it exists (the jump stays; an empty chain matches
  nothing). Fails loudly if iptables itself cannot run (no ``NET_ADMIN``), so a heal that did
  nothing is never reported as done.
* :func:`remove_script` -- heal, then delete the jump and the chain: the node is left exactly
  as before the first partition (used by heal-all at the end of a run).

Each script is one ``/bin/sh`` program per node (``set -eu``), so a partition costs one remote
round trip per node and a failing step stops the script with iptables' own error message.
Only INPUT is filtered (as Jepsen does): dropping one direction already stops TCP both ways, and
the grudges of :mod:`nemesis.plan` are symmetric so both sides drop anyway. ``-w`` waits for the
xtables lock instead of failing when another iptables runs at the same moment. IPv4 only: the
cluster networks the harness creates are IPv4, and an IPv6 address is refused with a clear error
rather than silently not partitioned.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable, Collection

from nemesis.plan import Grudge

CHAIN = "TIDEMARK"
IPTABLES = "iptables"
LOCK_WAIT_SECONDS = 10


def iptables_command(*arguments: str) -> str:
    """One ``iptables`` invocation that waits for the xtables lock, as shell text."""
    return shlex.join([IPTABLES, "-w", str(LOCK_WAIT_SECONDS), *arguments])


def drop_rule(source: str) -> str:
    """The command appending ``DROP`` of every packet from ``source`` (an IPv4 address) to the chain."""
    return iptables_command("-A", CHAIN, "-s", f"{checked_ipv4(source)}/32", "-j", "DROP")


def partition_commands(sources: Collection[str]) -> list[str]:
    """Commands that leave the node dropping exactly the traffic from ``sources`` (sorted, deduplicated)."""
    return [
        # Create the chain, or empty it if it exists (only -N's "already exists" is silenced:
        # if iptables cannot run at all, -F fails too and reports why).
        f"{iptables_command('-N', CHAIN)} 2>/dev/null || {iptables_command('-F', CHAIN)}",
        f"{iptables_command('-C', 'INPUT', '-j', CHAIN)} 2>/dev/null || {iptables_command('-I', 'INPUT', '1', '-j', CHAIN)}",
        *(drop_rule(source) for source in sorted({checked_ipv4(source) for source in sources})),
    ]


def heal_commands() -> list[str]:
    """Commands that stop all nemesis drops on a node; idempotent; fail if iptables cannot run."""
    return [
        f"{iptables_command('-S', 'INPUT')} >/dev/null",
        f"if {iptables_command('-S', CHAIN)} >/dev/null 2>&1; then {iptables_command('-F', CHAIN)}; fi",
    ]


def remove_commands() -> list[str]:
    """Commands that heal and then delete the chain and every jump to it; idempotent."""
    return [
        *heal_commands(),
        f"while {iptables_command('-D', 'INPUT', '-j', CHAIN)} 2>/dev/null; do :; done",
        f"if {iptables_command('-S', CHAIN)} >/dev/null 2>&1; then {iptables_command('-X', CHAIN)}; fi",
    ]


def script(commands: list[str]) -> str:
    """The commands as one ``sh -c`` program that stops at the first failure."""
    return "\n".join(["set -eu", *commands]) + "\n"


def partition_script(sources: Collection[str]) -> str:
    return script(partition_commands(sources))


def heal_script() -> str:
    return script(heal_commands())


def remove_script() -> str:
    return script(remove_commands())


def partition_scripts(grudge: Grudge, ip_of: Callable[[str], str]) -> dict[str, str]:
    """For every node of ``grudge``: the script making it drop traffic from its grudge's addresses.

    A node whose set is empty gets a script that only empties the chain, so the whole cluster ends
    in exactly the state the grudge describes. ``ip_of`` maps a node name to its IPv4 address on
    the cluster network; a bad address raises ValueError naming the node.
    """
    addresses: dict[str, str] = {}

    def address(node: str) -> str:
        if node not in addresses:
            raw = ip_of(node)
            try:
                addresses[node] = checked_ipv4(raw)
            except ValueError as error:
                raise ValueError(f"address of node {node}: {error}") from None
        return addresses[node]

    return {
        node: partition_script([address(source) for source in sorted(grudge[node])])
        for node in sorted(grudge)
    }


def checked_ipv4(text: str) -> str:
    """``text`` if it is a plain IPv4 address (normalised), else ValueError saying why."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address") from None
    if address.version != 4:
        raise ValueError(f"{text!r} is IPv6; the nemesis partitions IPv4 cluster networks only")
    return str(address)
