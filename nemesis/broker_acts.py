"""What each node fault and heal does to one broker node: the per-node half of their mechanism.

:class:`nemesis.mechanism.Nemesis` records an op, tracks which nodes a fault is in effect on and
runs the act below on every node it names (in parallel, or one by one on heal-all's path);
this module only acts, through the cluster's :class:`~testbed.nodes.remote.Remote` s.  One
entry of :data:`NODE_ACTS` per node-shaped kind of :data:`nemesis.fault_kinds.REGISTRY` (faults
and heals alike); ``tests/nemesis/test_fault_kinds.py`` fails when one is missing.  A new node
fault joins with one method here and one line in :data:`NODE_ACTS`.

Every act raises on failure: :class:`~nemesis.outcomes.Refused` when certainly nothing happened
(a signal to a broker that is not running), anything else when what happened is unknown.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from nemesis.client_cut import ClientCut
from nemesis.disk_faults import CLEAR, disk_error_command, slow_disk_command
from nemesis.fault_kinds import (
    CLIENT_CUT,
    CLIENT_HEAL,
    CLOCK_DRIFT,
    CLOCK_HEAL,
    CLOCK_OFFSET_S,
    CLOCK_RATE_PCT,
    CLOCK_SKEW,
    CONTROLLER_KILL,
    CONTROLLER_POWER_LOSS,
    CONTROLLER_START,
    DISK_ERROR,
    DISK_ERROR_ERRNO,
    DISK_ERROR_OP,
    DISK_FILES,
    DISK_HEAL,
    KILL,
    METADATA_DELAY,
    METADATA_HEAL,
    ONE_WAY,
    ONE_WAY_HEAL,
    PACKET_LOSS,
    PACKET_LOSS_HEAL,
    PAUSE,
    POWER_LOSS,
    REQUEST_DELAY,
    REQUEST_DELAY_MS,
    REQUEST_DUPLICATE,
    REQUEST_HOLD,
    REQUEST_RELEASE,
    REQUEST_REORDER,
    REQUEST_REORDER_MS,
    REQUEST_RESET,
    RESUME,
    SHUTDOWN,
    SHUTDOWN_TIMEOUT_S,
    SLOW_DISK,
    SLOW_DISK_MS,
    SLOW_LINK,
    SLOW_LINK_HEAL,
    SLOW_LINK_RATE_KBIT,
    START,
)
from nemesis.membership import Membership
from nemesis.membership_kinds import DECOMMISSION, ELECT_PREFERRED, RECOMMISSION
from nemesis.metadata_delay import MetadataDelay
from nemesis.one_way import OneWay
from nemesis.outcomes import Refused
from nemesis.packet_loss import PacketLoss
from nemesis.request_faults import HELD_REQUESTS, RequestFaults
from nemesis.slow_link import SlowLink
from testbed.cluster.fake_clock import REAL_CLOCK
from testbed.cluster.protocol import (
    CONTROLLER_DAEMON,
    ClockControl,
    Cluster,
    ControllerProcess,
    DiskFaults,
    NodeControl,
    PowerLoss,
)
from testbed.nodes.remote import RemoteError

BROKER_DAEMON = "broker"
"""The Remote daemon name of the broker process on every broker node."""


class BrokerActs:
    """The acts on one broker node, bounded by ``remote_timeout`` per remote call and
    ``settle_timeout`` for a SIGKILLed broker to be gone.  Packet loss, slow links and client cuts run their scripts through
    the same remote exec as the metadata delay, on the same layout (``metadata.layout``)."""

    def __init__(
        self, cluster: NodeControl, metadata: MetadataDelay, remote_timeout: float, settle_timeout: float
    ) -> None:
        self.cluster = cluster
        self.metadata = metadata
        self.remote_timeout = remote_timeout
        self.settle_timeout = settle_timeout
        self.packet_loss = PacketLoss(metadata.layout, cluster.ip, self._run)
        self.one_way = OneWay(metadata.layout, cluster.ip, self._run)
        self.slow_link = SlowLink(metadata.layout, cluster.ip, self._run)
        self.client_cut = ClientCut(metadata.layout, cluster.ip, self._run)
        self.requests = RequestFaults(cluster)
        self._membership: Membership | None = None

    def _run(self, node: str, script: str) -> None:
        self.cluster.remote(node).exec(script, timeout=self.remote_timeout)

    def kill(self, node: str, daemon: str = BROKER_DAEMON) -> None:
        """SIGKILL the broker (or ``daemon``) and wait until it is gone (not merely signalled)."""
        self.signal(node, signal.SIGKILL, daemon)
        if not self._gone_within(node, self.settle_timeout, daemon):
            raise RemoteError(node, f"{daemon} still alive {self.settle_timeout:g} s after SIGKILL")

    def shutdown(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """SIGTERM the broker and wait until it has exited: a clean shutdown, whatever the broker
        does with it (the bundled one moves its leaderships away first).  An op saying
        ``"controlled": false`` sends SIGINT instead, the clean shutdown without that handover.
        One that has not exited within :data:`~nemesis.fault_kinds.SHUTDOWN_TIMEOUT_S` is
        SIGKILLed, and the op says so (``info``: the fault was a crash after all, and the history
        must not call it clean)."""
        controlled = (value or {}).get("controlled", True) is not False
        self.signal(node, signal.SIGTERM if controlled else signal.SIGINT)
        if self._gone_within(node, SHUTDOWN_TIMEOUT_S):
            return
        try:
            self.kill(node)
        except Refused:  # it exited on its own just after the wait: not "nothing happened"
            return
        raise RemoteError(node, f"broker still running {SHUTDOWN_TIMEOUT_S:g} s after SIGTERM: SIGKILLed")

    def _gone_within(self, node: str, timeout: float, daemon: str = BROKER_DAEMON) -> bool:
        remote = self.cluster.remote(node)
        deadline = time.monotonic() + timeout
        delay = 0.01
        while remote.is_alive(daemon, timeout=self.remote_timeout):
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)  # polling a condition, bounded by the deadline
            delay = min(delay * 2, 0.2)
        return True

    def power_loss(self, node: str, daemon: str = BROKER_DAEMON) -> None:
        """Kill the broker (or ``daemon``: the controller on its node), then drop every write its
        data directory (the controller's: its metadata directory) had not fsynced.

        A broker that is not running (it halted on a disk error, it crashed, an earlier fault
        killed it) still loses the machine's page cache: its writes that never reached the disk
        are dropped all the same.  Refusing there would make a halted broker's unsynced tail --
        exactly what a disk-error fault leaves behind -- immune to power loss.
        """
        with contextlib.suppress(Refused):  # not running: nothing to kill, the cache is still there to lose
            self.kill(node, daemon)  # the process must be gone before the cache is: no write may land after
        cluster = self.cluster
        if not isinstance(cluster, PowerLoss):  # Nemesis refuses the fault first; the kill did happen
            raise RuntimeError("this cluster's data directories are not on the lazy filesystem")
        cluster.drop_unsynced(node)

    def kill_controller(self, node: str) -> None:
        """SIGKILL the controller process on the controller node ``node`` and wait until it is gone."""
        self.kill(node, CONTROLLER_DAEMON)

    def power_off_controller(self, node: str) -> None:
        """:meth:`power_loss` of the controller process on the controller node ``node``."""
        self.power_loss(node, CONTROLLER_DAEMON)

    def start_controller(self, node: str) -> None:
        """Start the controller process where it is not running (``node`` is the controller node)."""
        cluster = self.cluster
        if not isinstance(cluster, ControllerProcess):  # Nemesis refuses the kind first
            raise RuntimeError("this cluster's controller node runs no controller process of the harness'")
        if not cluster.remote(node).is_alive(CONTROLLER_DAEMON, timeout=self.remote_timeout):
            cluster.start_controller()

    def controller_down(self, node: str | None) -> list[str]:
        """``[node]`` when it is a controller node whose process the harness runs and that process
        is not surely alive (it cannot be told: the start checks again), else ``[]``."""
        if node is None or not isinstance(self.cluster, ControllerProcess):
            return []
        return [] if self.surely_alive(node, CONTROLLER_DAEMON) else [node]

    def start(self, node: str) -> None:
        """Start the broker where it is not running."""
        if not self.cluster.remote(node).is_alive(BROKER_DAEMON, timeout=self.remote_timeout):
            self.cluster.start_broker(node)

    def stop(self, node: str) -> None:
        """SIGSTOP the broker's process group (Refused: it is not running)."""
        self.signal(node, signal.SIGSTOP)

    def cont(self, node: str) -> None:
        """SIGCONT the broker's process group (Refused: it is not running)."""
        self.signal(node, signal.SIGCONT)

    def resume_if_running(self, node: str) -> None:
        """SIGCONT the broker if it runs at all (heal-all's blanket resume)."""
        self.cluster.remote(node).signal(BROKER_DAEMON, signal.SIGCONT, timeout=self.remote_timeout)

    def signal(self, node: str, sig: signal.Signals, daemon: str = BROKER_DAEMON) -> None:
        if not self.cluster.remote(node).signal(daemon, sig, timeout=self.remote_timeout):
            raise Refused(f"{daemon} not running")

    def surely_alive(self, node: str, daemon: str = BROKER_DAEMON) -> bool:
        """The broker (or ``daemon``) answers as alive (False also when that cannot be told)."""
        try:
            return self.cluster.remote(node).is_alive(daemon, timeout=self.remote_timeout)
        except Exception:
            return False  # cannot tell: include it in the start, which checks again

    def delay_metadata(self, node: str) -> None:
        self.metadata.inject(node)

    def heal_metadata(self, node: str) -> None:
        self.metadata.heal(node)

    def lose_packets(self, node: str) -> None:
        self.packet_loss.inject(node)

    def heal_packet_loss(self, node: str) -> None:
        self.packet_loss.heal(node)

    def slow_links(self, node: str) -> None:
        self.slow_link.inject(node)

    def slow_links_at(self, node: str, value: Mapping[str, Any]) -> None:
        """``slow-link`` at the rate its op names (a scenario step's ``rate_kbit``), towards the
        peers it names (a step's ``peers``; none: every other node)."""
        peers = [str(peer) for peer in value.get("peers") or ()]
        self.slow_link.inject(node, int(value.get("rate_kbit") or SLOW_LINK_RATE_KBIT), peers)

    def heal_slow_link(self, node: str) -> None:
        self.slow_link.heal(node)

    def cut_clients(self, node: str) -> None:
        self.client_cut.inject(node)

    def heal_client_cut(self, node: str) -> None:
        self.client_cut.heal(node)

    def skew_clock(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """Jump the broker's wall clock to the offset its op names (default :data:`CLOCK_OFFSET_S`)
        off real time; a drift in effect goes on from there."""
        clocks = self._clock()
        offset = int((value or {}).get("offset_s") or CLOCK_OFFSET_S)
        clocks.set_clock(node, clocks.clock(node).jumped(offset, time.time()))

    def drift_clock(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """Run the broker's wall clock at the rate its op names (default :data:`CLOCK_RATE_PCT`) from
        the reading it has now: a slow or fast clock, no jump."""
        clocks = self._clock()
        rate = (value or {}).get("rate_pct")
        clocks.set_clock(
            node, clocks.clock(node).drifting(CLOCK_RATE_PCT if rate is None else int(rate), time.time())
        )

    def heal_clock(self, node: str) -> None:
        self._clock().set_clock(node, REAL_CLOCK)

    def _clock(self) -> ClockControl:
        cluster = self.cluster
        if not isinstance(cluster, ClockControl) or not cluster.fake_clock:  # Nemesis refuses first
            raise Refused("this cluster's brokers do not run under libfaketime")
        return cluster

    def break_disk(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``disk-error`` as its op names it (a step's ``op``, ``errno``, ``files``; else the defaults)."""
        value = value or {}
        command = disk_error_command(
            str(value.get("op") or DISK_ERROR_OP),
            str(value.get("errno") or DISK_ERROR_ERRNO),
            str(value.get("files") or DISK_FILES),
        )
        self._disks().lazyfs_control(node, command)

    def slow_disk(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``slow-disk`` as its op names it (a step's ``delay_ms``, ``files``; else the defaults)."""
        value = value or {}
        command = slow_disk_command(
            int(value.get("delay_ms") or SLOW_DISK_MS), str(value.get("files") or DISK_FILES)
        )
        self._disks().lazyfs_control(node, command)

    def heal_disk(self, node: str) -> None:
        """Clear the disk rules, then start the broker if it is not running (it halted on the error)."""
        self._disks().lazyfs_control(node, CLEAR)
        self.start(node)

    def _disks(self) -> DiskFaults:
        cluster = self.cluster
        if not isinstance(cluster, DiskFaults):  # Nemesis refuses first when the lazy filesystem is absent
            raise Refused("this cluster's data directories take no disk-fault rules")
        return cluster

    def deafen(self, node: str) -> None:
        """``one-way``: ``node`` stops hearing the other brokers (:mod:`nemesis.one_way`)."""
        self.one_way.inject(node)

    def heal_one_way(self, node: str) -> None:
        self.one_way.heal(node)

    def hold_requests(self, node: str) -> None:
        self.requests.hold(node)

    def hold_named_requests(self, node: str, value: Mapping[str, Any]) -> None:
        """``request-hold`` of the requests its op names (a scenario step's ``requests``)."""
        self.requests.hold(node, value.get("requests") or HELD_REQUESTS)

    def release_requests(self, node: str) -> None:
        self.requests.release(node)

    def delay_requests(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``request-delay`` of the milliseconds its op names (default :data:`REQUEST_DELAY_MS`)."""
        self.requests.delay(node, int((value or {}).get("delay_ms") or REQUEST_DELAY_MS))

    def reorder_requests(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``request-reorder`` up to the milliseconds its op names (default :data:`REQUEST_REORDER_MS`)."""
        self.requests.reorder(node, int((value or {}).get("delay_ms") or REQUEST_REORDER_MS))

    def duplicate_requests(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``request-duplicate`` of the requests its op names (default :data:`HELD_REQUESTS`)."""
        self.requests.duplicate(node, (value or {}).get("requests") or HELD_REQUESTS)

    def reset_requests(self, node: str, value: Mapping[str, Any] | None = None) -> None:
        """``request-reset`` of the requests its op names (default :data:`HELD_REQUESTS`)."""
        self.requests.reset(node, (value or {}).get("requests") or HELD_REQUESTS)

    def decommission(self, node: str) -> None:
        """``decommission``: reassign the broker's replicas away (:mod:`nemesis.membership`)."""
        self._members().decommission(node)

    def recommission(self, node: str) -> None:
        self._members().recommission(node)

    def elect_preferred(self, node: str) -> None:
        """``elect-preferred``: the broker's preferred leaderships moved back to it (:mod:`nemesis.membership`)."""
        self._members().elect_preferred(node)

    def _members(self) -> Membership:
        cluster = self.cluster
        if not isinstance(cluster, Cluster):  # Nemesis refuses first without a controller node
            raise Refused("this cluster offers no Kafka bootstrap to reassign through")
        if self._membership is None:
            self._membership = Membership(cluster, self.remote_timeout, self.settle_timeout * 3)
        return self._membership


NODE_ACTS: Final[Mapping[str, Callable[[BrokerActs, str], None]]] = MappingProxyType(
    {
        KILL: BrokerActs.kill,
        SHUTDOWN: BrokerActs.shutdown,
        START: BrokerActs.start,
        PAUSE: BrokerActs.stop,
        RESUME: BrokerActs.cont,
        POWER_LOSS: BrokerActs.power_loss,
        METADATA_DELAY: BrokerActs.delay_metadata,
        METADATA_HEAL: BrokerActs.heal_metadata,
        PACKET_LOSS: BrokerActs.lose_packets,
        PACKET_LOSS_HEAL: BrokerActs.heal_packet_loss,
        ONE_WAY: BrokerActs.deafen,
        ONE_WAY_HEAL: BrokerActs.heal_one_way,
        SLOW_LINK: BrokerActs.slow_links,
        SLOW_LINK_HEAL: BrokerActs.heal_slow_link,
        CLOCK_SKEW: BrokerActs.skew_clock,
        CLOCK_DRIFT: BrokerActs.drift_clock,
        CLOCK_HEAL: BrokerActs.heal_clock,
        CLIENT_CUT: BrokerActs.cut_clients,
        CLIENT_HEAL: BrokerActs.heal_client_cut,
        REQUEST_HOLD: BrokerActs.hold_requests,
        REQUEST_RELEASE: BrokerActs.release_requests,
        REQUEST_DELAY: BrokerActs.delay_requests,
        REQUEST_REORDER: BrokerActs.reorder_requests,
        REQUEST_DUPLICATE: BrokerActs.duplicate_requests,
        REQUEST_RESET: BrokerActs.reset_requests,
        DISK_ERROR: BrokerActs.break_disk,
        SLOW_DISK: BrokerActs.slow_disk,
        DISK_HEAL: BrokerActs.heal_disk,
        CONTROLLER_KILL: BrokerActs.kill_controller,
        CONTROLLER_POWER_LOSS: BrokerActs.power_off_controller,
        CONTROLLER_START: BrokerActs.start_controller,
        DECOMMISSION: BrokerActs.decommission,
        RECOMMISSION: BrokerActs.recommission,
        ELECT_PREFERRED: BrokerActs.elect_preferred,
    }
)
"""Node-shaped fault or heal kind -> what it does to one broker node."""

VALUE_ACTS: Final[Mapping[str, Callable[[BrokerActs, str, Mapping[str, Any]], None]]] = MappingProxyType(
    {
        REQUEST_HOLD: BrokerActs.hold_named_requests,
        REQUEST_DELAY: BrokerActs.delay_requests,
        REQUEST_REORDER: BrokerActs.reorder_requests,
        REQUEST_DUPLICATE: BrokerActs.duplicate_requests,
        REQUEST_RESET: BrokerActs.reset_requests,
        SLOW_LINK: BrokerActs.slow_links_at,
        CLOCK_SKEW: BrokerActs.skew_clock,
        CLOCK_DRIFT: BrokerActs.drift_clock,
        DISK_ERROR: BrokerActs.break_disk,
        SLOW_DISK: BrokerActs.slow_disk,
        SHUTDOWN: BrokerActs.shutdown,
    }
)
"""The node kinds whose act reads its op's value (what a step asked for), used instead of their
:data:`NODE_ACTS` entry when the nemesis injects them."""
