"""The ``slow-link`` fault: a node's links to its peers shrink to a narrow rate (``tc`` ``htb``).

A degraded network of the other kind than :mod:`nemesis.packet_loss`: nothing is lost, every
packet the node sends to another node of the cluster (brokers and the controller) waits for a
token of a rate limit of ``rate_kbit`` kilobits per second, so bulk transfers -- a follower
catching up, a leader answering fetches -- take seconds where they took milliseconds, while small
messages (heartbeats, ISR proposals) still pass.  It is Kafka's own system tests'
``DegradedNetworkFaultSpec`` rate limit; this kernel has no ``netem`` (latency and reordering are
the request proxy's job), but ``htb`` and ``tbf`` are there.

**How.**  The node's egress device towards each peer (``ip route get``) gets a root ``htb``
qdisc of handle :data:`HANDLE` with two classes: the default one unlimited, and
``HANDLE:2`` limited to the rate, which a ``u32`` filter per peer address sends the peer's
packets to.  Only egress can be shaped without an ``ifb`` device, so the fault is on the
*sender*: slowing a follower's catch-up means slowing its leader.  Clients (on the host) and
the nemesis' control channel are not shaped, as with packet loss: a heal is never slowed by
the fault it heals.

**Whose qdisc.**  The heal deletes a root qdisc only when it is ours (``htb`` of handle
:data:`HANDLE`), and the fault refuses a device whose root qdisc is someone else's (anything
but the kernel's defaults), so an operator's traffic control on an SSH node is never replaced
or removed.  On the Docker clusters the qdisc lives in the container's network namespace and
goes with it.

**Why 256 kbit/s by default.**  The workload's replication stream is about 20 KB/s (200
records/s of ~100 bytes): at 256 kbit/s (32 KB/s) a follower in steady state keeps up, but one
that fell behind catches up at a few hundred records per second and a partition's leader move
makes the new followers lag for seconds -- the window where ISR-join and truncation bugs live.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

from nemesis import iptables
from nemesis.fault_kinds import SLOW_LINK_RATE_KBIT, checked_rate
from nemesis.plan import Layout, PlanError

HANDLE: Final = "7d1"
"""The major handle of the nemesis' root qdisc (hex), how its heal knows the qdisc is its own."""
DEFAULT_ROOT_QDISCS: Final[tuple[str, ...]] = ("noqueue", "pfifo_fast", "fq_codel", "mq", "fq", "pfifo")
"""Root qdiscs a kernel or distribution puts there by itself: replacing one loses nothing."""


def slow_link_script(peers: Collection[str], rate_kbit: int) -> str:
    """One node's program: its packets to ``peers`` (IPv4 addresses) leave at ``rate_kbit`` at most.

    Replaces a slow link the node had (its own qdisc is deleted first); fails naming the device
    when a device's root qdisc belongs to someone else, or naming the peer when there is no route.
    """
    rate = checked_rate(rate_kbit)
    addresses = sorted({iptables.checked_ipv4(peer) for peer in peers})
    if not addresses:
        raise ValueError("a slow link needs at least one peer")
    lines = [
        "set -eu",
        "pairs=''",
        f"for peer in {' '.join(addresses)}; do",
        "  dev=$(ip -o -4 route get \"$peer\" | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')",
        '  [ -n "$dev" ] || { echo "slow-link: no route to $peer" >&2; exit 1; }',
        '  pairs="$pairs$dev $peer\n"',
        "done",
        'for dev in $(printf "$pairs" | cut -d" " -f1 | sort -u); do',
        '  root=$(tc qdisc show dev "$dev" root | head -n 1)',
        '  case "$root" in',
        f'    "qdisc htb {HANDLE}: "*) tc qdisc del dev "$dev" root ;;',
        *(f'    "qdisc {kind} "*) ;;' for kind in DEFAULT_ROOT_QDISCS),
        '    *) echo "slow-link: $dev has a root qdisc that is not ours: $root" >&2; exit 1 ;;',
        "  esac",
        f'  tc qdisc add dev "$dev" root handle {HANDLE}: htb default 1',
        f'  tc class add dev "$dev" parent {HANDLE}: classid {HANDLE}:1 htb rate 10gbit quantum 60000',
        f'  tc class add dev "$dev" parent {HANDLE}: classid {HANDLE}:2 htb rate {rate}kbit ceil {rate}kbit'
        " burst 4k quantum 1514",
        "done",
        'printf "$pairs" | while read -r dev peer; do',
        f'  tc filter add dev "$dev" parent {HANDLE}: protocol ip prio 1 u32 match ip dst "$peer/32"'
        f" flowid {HANDLE}:2",
        "done",
    ]
    return "\n".join(lines)


def slow_link_heal_script() -> str:
    """One node's program: delete the nemesis' root qdisc on every device that has one (idempotent;
    a node without ``tc`` has none); other qdiscs untouched."""
    return "\n".join(
        [
            "set -eu",
            "command -v tc >/dev/null 2>&1 || exit 0",
            "for dev in $(ip -o link show | sed -n 's/^[0-9]*: \\([^:@]*\\)[:@].*/\\1/p'); do",
            f'  if tc qdisc show dev "$dev" root 2>/dev/null | grep -q "^qdisc htb {HANDLE}: "; then',
            '    tc qdisc del dev "$dev" root',
            "  fi",
            "done",
        ]
    )


class SlowLink:
    """How a slow link is put on and taken off one node (the same shape as
    :class:`nemesis.packet_loss.PacketLoss`): ``layout`` names the peers, ``ip_of`` their addresses,
    ``run(node, script)`` runs a program on a node and raises when it did not succeed."""

    def __init__(self, layout: Layout, ip_of: Callable[[str], str], run: Callable[[str, str], None]) -> None:
        self.layout = layout
        self.ip_of = ip_of
        self.run = run

    def script(self, node: str, rate_kbit: int = SLOW_LINK_RATE_KBIT, peers: Sequence[str] = ()) -> str:
        """The program that slows ``node``'s links to ``peers`` (none: every other node of the
        cluster); PlanError when a peer is no other node of it, or an address or the rate is unusable."""
        others = [peer for peer in self.layout.all_nodes if peer != node]
        strangers = sorted(set(peers) - set(others))
        if strangers:
            raise PlanError(f"slow-link: {', '.join(strangers)} is no peer of {node} in this cluster")
        try:
            chosen = [peer for peer in others if peer in peers] if peers else others
            return slow_link_script([iptables.node_ipv4(peer, self.ip_of) for peer in chosen], rate_kbit)
        except ValueError as error:
            raise PlanError(f"slow-link: {error}") from None

    def inject(self, node: str, rate_kbit: int = SLOW_LINK_RATE_KBIT, peers: Sequence[str] = ()) -> None:
        """Slow ``node``'s links to ``peers`` (none: every other node) to ``rate_kbit``, replacing
        an earlier slow link of the node's."""
        self.run(node, self.script(node, rate_kbit, peers))

    def heal(self, node: str) -> None:
        """Give ``node`` its full links back; idempotent; iptables faults stay."""
        self.run(node, slow_link_heal_script())
