"""The bundled broker (``broker_impl``) run on cluster nodes through Remotes.

Given one Remote per node -- Docker exec or SSH, the same code either way -- this writes
the controller's and brokers' properties files, starts them as named daemons
(``controller``, ``broker``), waits until the cluster answers over the Kafka protocol,
and offers the :mod:`testbed.cluster.protocol` abilities the nemesis and runner use: remotes,
addresses, (re)starting a broker, and who leads a partition.  After a run it stops the
brokers cleanly, dumps every replica with ``python -m broker_impl.dump`` and fetches
the logs: everything in :data:`LOG_DIR` -- the process logs and the controller's and brokers'
event logs (``event.log.dir`` points there, outside the lazy filesystem, so that a simulated
power loss does not take the evidence of what happened before it; ``docs/events.md``).

Settings: ``--set KEY=VALUE`` pairs go to whichever process accepts the key (the
controller, the brokers, or both), checked against broker_impl's declared keys, so a
typo fails before anything starts.  Harness defaults differ from Kafka's in the
failure-detection knobs only (heartbeat 250 ms, broker session 3 s, replica lag 5 s),
so that faults play out within a short test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from broker_impl import config as broker_config
from testbed.cluster.fake_clock import DAEMON_ENV as FAKE_CLOCK_ENV
from testbed.cluster.fake_clock import REAL_CLOCK, NodeClock, set_clock_script
from testbed.cluster.kafka_admin import (
    ClusterUnavailable,
    PartitionInfo,
    all_partitions_led,
    broker_answers,
    leader_node,
    node_named,
    wait_until,
)
from testbed.cluster.lazyfs_mount import LazyMount, not_mounted
from testbed.cluster.protocol import CONTROLLER_DAEMON
from testbed.cluster.request_proxy.control import ProxyControl
from testbed.nodes.remote import CommandFailed, Remote, RemoteError

logger = logging.getLogger(__name__)

PYTHON = "/opt/tidemark/venv/bin/python"
CONFIG_DIR = "/etc/tidemark"
DATA_DIR = "/var/lib/tidemark/data"
BACKING_DIR = "/var/lib/tidemark/backing"
"""With the lazy filesystem, DATA_DIR is its mount and this is where durable bytes live."""
METADATA_DIR = "/var/lib/tidemark/metadata"
METADATA_BACKING_DIR = "/var/lib/tidemark/metadata-backing"
"""With the lazy filesystem, METADATA_DIR (the controller's) is its mount and this holds its durable bytes."""
LOG_DIR = "/var/log/tidemark"
"""Process logs and event logs; :meth:`BundledCluster.collect_logs` fetches all of it."""
KAFKA_PORT = 9092
BROKER_BEHIND_PROXY_PORT = 9094
"""Where a broker listens when a request proxy owns :data:`KAFKA_PORT` (:class:`ProxiedBundledCluster`)."""
PROXY_CONTROL_PORT = 9095
CONTROLLER_PORT = 9093

HARNESS_BROKER_DEFAULTS = {
    "broker.heartbeat.interval.ms": "250",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    # The harness creates its topic with the workload's partitions and replication factor.  A
    # stray client (a producer of an earlier run in the same process, retrying against an
    # address Docker has since given to this cluster) must not auto-create it first with one
    # replica -- seen once in 140 benchmark runs.
    "auto.create.topics.enable": "false",
}
HARNESS_CONTROLLER_DEFAULTS = {"broker.session.timeout.ms": "3000"}


NODE_SPECIFIC_KEYS = frozenset(
    {
        "node.id",
        "listeners",
        "advertised.listeners",
        "log.dirs",
        "controller.quorum.bootstrap.servers",
        "metadata.log.dir",
        "event.log.dir",
    }
)
"""Keys the harness sets per node; ``--set`` may not change them."""


class SettingsError(ValueError):
    """A ``--set`` key or value that neither the controller nor the brokers accept."""


def effective_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Every controller and broker setting in force on a bundled cluster, as text, sorted by key.

    broker_impl's declared defaults (Kafka's, and ``truncation.mode=leader-epoch``), then the
    harness's failure-detection defaults, then ``settings`` (``--set``) -- the same layering
    :meth:`BundledCluster.configure` writes into the properties files.  Node-specific keys
    (addresses, directories, ids) are left out.  This is the one place that knows the
    defaults the run actually had; the test spec records its answer in ``test.json``, and
    every later reader (checker expectations, reports, scenario expectations) reads that.
    Raises :class:`SettingsError` for a key or value neither process accepts.
    """
    split_settings(settings)  # reject unknown keys and bad values first
    values: dict[str, str] = {}
    for key in (*broker_config.CONTROLLER_KEYS, *broker_config.BROKER_KEYS):
        if key.name not in NODE_SPECIFIC_KEYS and key.default is not None:
            values.setdefault(key.name, _setting_text(key.default))
    values.update(HARNESS_CONTROLLER_DEFAULTS)
    values.update(HARNESS_BROKER_DEFAULTS)
    values.update(settings)
    return dict(sorted(values.items()))


def _setting_text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def split_settings(settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(controller settings, broker settings); raises SettingsError naming the bad key."""
    controller: dict[str, str] = {}
    brokers: dict[str, str] = {}
    for key, value in settings.items():
        accepted = False
        for keys, target in (
            (broker_config.CONTROLLER_KEYS, controller),
            (broker_config.BROKER_KEYS, brokers),
        ):
            if key in {k.name for k in keys}:
                try:
                    broker_config.apply_overrides({}, {key: value}, f"--set {key}", keys)
                except broker_config.ConfigError as error:
                    raise SettingsError(str(error)) from None
                target[key] = value
                accepted = True
        if not accepted or key in NODE_SPECIFIC_KEYS:
            raise SettingsError(
                f"--set {key}: not a setting the harness lets you change"
                if accepted
                else f"--set {key}: unknown broker or controller setting"
            )
    return controller, brokers


def data_dir_mount(remote: Remote, data_dir: str = DATA_DIR, backing: str = BACKING_DIR) -> LazyMount:
    """The lazy filesystem over a broker node's data directory; the durable bytes live in
    ``backing``.  Every target whose broker keeps its files on its node mounts it this way (one
    mount per node: the controller node's is its metadata directory)."""
    return LazyMount(
        remote, python=PYTHON, backing=backing, mountpoint=data_dir, log_path=f"{LOG_DIR}/lazyfs.log"
    )


def stop_daemons(
    remotes: Mapping[str, Remote],
    nodes: Sequence[str],
    daemon: str,
    timeout: float,
    *,
    what: str,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> None:
    """Stop ``daemon`` (``what``, for the log) on each of ``nodes`` the way a run ends: SIGCONT (a
    paused one would not act on ``stop_signal``) and ``stop_signal`` to all first, so they shut
    down in parallel; then each gets ``timeout`` s to exit before SIGKILL.  Best effort: a node
    that cannot be signalled is logged and the rest still stopped.  Every target that runs its
    brokers as node daemons stops them with this (the tansu target too)."""
    for name in nodes:
        try:
            remotes[name].signal(daemon, signal.SIGCONT, timeout=5)
            remotes[name].signal(daemon, stop_signal, timeout=5)
        except RemoteError as error:
            logger.warning("%s: could not stop %s: %s", name, what, error)
    for name in nodes:
        try:
            wait_until(
                lambda name=name: not remotes[name].is_alive(daemon),  # type: ignore[misc]
                timeout,
                f"{what} on {name} to stop",
            )
        except (TimeoutError, RemoteError):
            with contextlib.suppress(RemoteError):
                remotes[name].signal(daemon, signal.SIGKILL, timeout=5)


class BundledCluster:
    """broker_impl on ``brokers`` (node names) plus ``controller``, reached through remotes."""

    def __init__(
        self,
        remotes: Mapping[str, Remote],
        ips: Mapping[str, str],
        brokers: Sequence[str],
        controller: str,
        settings: Mapping[str, str],
        *,
        power_loss_filesystem: bool = False,
        fake_clock: bool = False,
    ) -> None:
        self._remotes = dict(remotes)
        self._ips = dict(ips)
        self.brokers = list(brokers)
        self.controller: str | None = controller
        self.controller_settings, self.broker_settings = split_settings(settings)
        self.node_ids = {name: index for index, name in enumerate(self.brokers, start=1)}
        self.data_dir = DATA_DIR
        self.power_loss_filesystem = power_loss_filesystem
        self.fake_clock = fake_clock
        """The brokers run under libfaketime, their wall clocks the nemesis' (:mod:`testbed.cluster.fake_clock`)."""
        self._clocks: dict[str, NodeClock] = {}

    listen_port = KAFKA_PORT
    """The port each broker listens on; it always advertises :data:`KAFKA_PORT`."""

    # ---- NodeControl ----------------------------------------------------------------------

    def remote(self, node: str) -> Remote:
        return self._remotes[node]

    def ip(self, node: str) -> str:
        return self._ips[node]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self._ips[name]}:{KAFKA_PORT}" for name in self.brokers)

    def node_of(self, broker_id: int) -> str | None:
        return node_named(self.node_ids, broker_id)

    def leader_of(self, topic: str, partition: int) -> str | None:
        return leader_node(self.bootstrap, self.node_ids, topic, partition)

    def answers(self, node: str) -> bool:
        """Whether ``node``'s broker accepts a Kafka connection and answers ApiVersions."""
        return broker_answers(f"{self._ips[node]}:{KAFKA_PORT}")

    def start_broker(self, node: str) -> None:
        remote = self._remotes[node]
        if remote.is_alive("broker"):
            return
        if self.power_loss_filesystem:
            self._lazy_mount(node).ensure()
        if self.fake_clock and self.clock(node).rate_pct != 100:
            self.set_clock(node, self.clock(node))  # a drift is anchored at a process' start: this one's
        remote.start_daemon(
            "broker",
            [PYTHON, "-m", "broker_impl.broker", "--config", f"{CONFIG_DIR}/broker.properties"],
            log_path=f"{LOG_DIR}/broker.log",
            env=FAKE_CLOCK_ENV if self.fake_clock else None,
        )

    def start_controller(self) -> None:
        """Start the controller where it is not running: it loads its metadata (``metadata.json``,
        fsynced at every change) and the brokers' heartbeats find it again."""
        assert self.controller is not None
        controller = self._remotes[self.controller]
        if controller.is_alive(CONTROLLER_DAEMON):
            return
        if self.power_loss_filesystem:
            self._lazy_mount(self.controller).ensure()
        controller.start_daemon(
            CONTROLLER_DAEMON,
            [PYTHON, "-m", "broker_impl.controller", "--config", f"{CONFIG_DIR}/controller.properties"],
            log_path=f"{LOG_DIR}/controller.log",
        )

    def clock(self, node: str) -> NodeClock:
        """:class:`~testbed.cluster.protocol.ClockControl`: ``node``'s wall clock as last set."""
        return self._clocks.get(node, REAL_CLOCK)

    def set_clock(self, node: str, clock: NodeClock) -> None:
        """:class:`~testbed.cluster.protocol.ClockControl`: ``node``'s broker's wall clock follows
        ``clock`` within libfaketime's reload (a second or two), anchored at the running broker's
        start; :meth:`start_broker` anchors it again at each restart, so the node's clock goes on."""
        if not self.fake_clock:
            raise RuntimeError("this cluster's brokers do not run under libfaketime (fake_clock=False)")
        self._remotes[node].exec(["sh", "-c", set_clock_script(clock)], timeout=10)
        self._clocks[node] = clock

    # ---- the lazy filesystem (power loss) ------------------------------------------------

    def _lazy_mount(self, node: str) -> LazyMount:
        """The lazy filesystem of ``node``: a broker's data directory, or the controller node's
        metadata directory (``controller-power-loss``: the controller must fsync what it publishes)."""
        if node == self.controller and node not in self.brokers:
            return data_dir_mount(self._remotes[node], METADATA_DIR, backing=METADATA_BACKING_DIR)
        return data_dir_mount(self._remotes[node], self.data_dir)

    def drop_unsynced(self, node: str) -> None:
        """Power loss of ``node``'s data directory -- of its metadata directory on the controller
        node (the broker, or the controller, must already be dead)."""
        if not self.power_loss_filesystem:
            raise not_mounted(node)
        self._lazy_mount(node).drop()

    def lazyfs_control(self, node: str, command: str) -> None:
        """:class:`~testbed.cluster.protocol.DiskFaults`: one command to ``node``'s lazy filesystem."""
        if not self.power_loss_filesystem:
            raise not_mounted(node)
        self._lazy_mount(node).control(*command.split())

    # ---- lifecycle ------------------------------------------------------------------------

    def configure(self) -> None:
        controller_settings = {
            "listeners": f"CONTROLLER://0.0.0.0:{CONTROLLER_PORT}",
            "metadata.log.dir": METADATA_DIR,
            "event.log.dir": LOG_DIR,
            **HARNESS_CONTROLLER_DEFAULTS,
            **self.controller_settings,
        }
        assert self.controller is not None
        self._remotes[self.controller].put(
            broker_config.render(controller_settings).encode(), f"{CONFIG_DIR}/controller.properties"
        )
        for name in self.brokers:
            settings = {
                "node.id": str(self.node_ids[name]),
                "listeners": f"PLAINTEXT://0.0.0.0:{self.listen_port}",
                "advertised.listeners": f"PLAINTEXT://{self._ips[name]}:{KAFKA_PORT}",
                "controller.quorum.bootstrap.servers": f"{self._ips[self.controller]}:{CONTROLLER_PORT}",
                "log.dirs": self.data_dir,
                "event.log.dir": LOG_DIR,
                **HARNESS_BROKER_DEFAULTS,
                **self.broker_settings,
            }
            remote = self._remotes[name]
            remote.exec(["mkdir", "-p", CONFIG_DIR, LOG_DIR, self.data_dir], timeout=10)
            remote.put(broker_config.render(settings).encode(), f"{CONFIG_DIR}/broker.properties")
            if self.fake_clock:
                self.set_clock(name, REAL_CLOCK)  # real time until a clock fault says otherwise

    def start(self, ready_timeout: float = 30.0) -> None:
        assert self.controller is not None
        self._remotes[self.controller].exec(["mkdir", "-p", LOG_DIR, METADATA_DIR], timeout=10)
        self.start_controller()
        for name in self.brokers:
            self.start_broker(name)
        wait_until(lambda: self._all_brokers_listed(), ready_timeout, "every broker to register and answer")

    def _all_brokers_listed(self) -> bool:
        from kafka import KafkaAdminClient

        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000)
        except Exception:
            return False
        try:
            cluster = admin.describe_cluster()
            return len(cluster.get("brokers", [])) >= len(self.brokers)
        except Exception:
            return False
        finally:
            admin.close()

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> list[PartitionInfo]:
        return wait_until(
            lambda: all_partitions_led(self.bootstrap, topic, partitions),
            timeout,
            f"a leader for every partition of {topic}",
        )

    def stop_brokers(self, timeout: float = 15.0) -> None:
        """Clean shutdown of every broker that runs, so the dumps read settled logs: SIGINT, the
        clean shutdown without the controlled one, which would move the leaderships among brokers
        that are all stopping (:mod:`broker_impl.controlled_shutdown`)."""
        stop_daemons(
            self._remotes, self.brokers, "broker", timeout, what="the broker", stop_signal=signal.SIGINT
        )

    def dump_replica(self, node: str, target: Path) -> None:
        """Write ``python -m broker_impl.dump`` of ``node``'s data dir to ``target``."""
        result = self._remotes[node].exec([PYTHON, "-m", "broker_impl.dump", self.data_dir], timeout=120)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(result.stdout)

    def replica_log_end(self, node: str, topic: str, partition: int) -> int | None:
        """:class:`~testbed.cluster.protocol.LiveReplicas`: ``python -m broker_impl.dump --summary``
        of ``node``'s data dir while the broker runs (read-only; a torn tail is not counted).

        Raises :class:`~testbed.cluster.kafka_admin.ClusterUnavailable` -- no answer this time, a
        wait polls again -- when the dump fails: the broker rewrites its files while they are read
        (a follower's truncation removes a segment between the dump listing it and reading it)."""
        summary = self._replica_summary(node, topic, partition)
        return None if summary is None else int(summary["log_end_offset"])

    def replica_checkpointed_high_watermark(self, node: str, topic: str, partition: int) -> int | None:
        """:class:`~testbed.cluster.protocol.LiveReplicas`: the ``high_watermark`` of the same
        summary as :meth:`replica_log_end` (the dump takes it from the HW checkpoint file)."""
        summary = self._replica_summary(node, topic, partition)
        return None if summary is None else int(summary["high_watermark"])

    def _replica_summary(self, node: str, topic: str, partition: int) -> dict[str, Any] | None:
        """The dump's summary line of ``node``'s replica of ``topic``/``partition`` (None: no
        replica there)."""
        try:
            result = self._remotes[node].exec(
                [PYTHON, "-m", "broker_impl.dump", "--summary", self.data_dir], timeout=30
            )
        except CommandFailed as error:
            raise ClusterUnavailable(f"{node}'s replica could not be read: {error}") from None
        for line in result.stdout_text.splitlines():
            summary: dict[str, Any] = json.loads(line)
            if summary["topic"] == topic and summary["partition"] == partition:
                return summary
        return None

    def collect_logs(self, node: str, target: Path) -> None:
        """Everything in ``node``'s :data:`LOG_DIR` into ``target`` (``nodes/<node>/`` of the
        run): ``broker.log`` or ``controller.log``, and the event log
        (:data:`broker_impl.events.BROKER_EVENTS_FILE` / ``CONTROLLER_EVENTS_FILE``)."""
        target.mkdir(parents=True, exist_ok=True)
        self._remotes[node].get(LOG_DIR, target, timeout=60)


class ProxiedBundledCluster(BundledCluster):
    """A bundled cluster whose brokers clients reach only through a request proxy each.

    The proxy (:mod:`testbed.cluster.request_proxy`, a daemon ``request-proxy`` on the broker's
    node) owns :data:`KAFKA_PORT`, which every broker advertises, and forwards to the broker on
    :data:`BROKER_BEHIND_PROXY_PORT` on the same node; its control channel is
    :data:`PROXY_CONTROL_PORT`, its actions go to ``request-proxy.jsonl`` in the node's log
    directory (collected with the other logs).  Replica fetches and transaction markers go through
    the proxies too, as clients' requests do in a single-listener Kafka; partitions still cut
    what they cut, since iptables filters by peer address.  It offers the ``request-proxy``
    ability (:class:`nemesis.request_faults.RequestProxies`) -- only this class does, so a plain
    bundled cluster is never asked to hold a request it has no proxy for.  The proxy outlives
    kills, pauses and power loss of its broker: it is the network, not the process.
    """

    listen_port = BROKER_BEHIND_PROXY_PORT

    def request_proxy(self, node: str) -> ProxyControl:
        return request_proxy_control(self.ip(node))

    def start_broker(self, node: str) -> None:
        start_request_proxy(self.remote(node))
        super().start_broker(node)


REQUEST_PROXY_DAEMON = "request-proxy"


def request_proxy_control(ip: str) -> ProxyControl:
    """The control channel of the request proxy on the node at ``ip`` (:func:`start_request_proxy`)."""
    return ProxyControl(f"{ip}:{PROXY_CONTROL_PORT}")


def start_request_proxy(remote: Remote) -> None:
    """The request proxy on ``remote``'s node, unless it runs: it owns :data:`KAFKA_PORT` and
    forwards to :data:`BROKER_BEHIND_PROXY_PORT` on the node, controlled on
    :data:`PROXY_CONTROL_PORT`, its actions logged to ``request-proxy.jsonl`` in :data:`LOG_DIR`.
    Every target whose brokers run on Tidemark's node image starts it so (:class:`ProxiedBundledCluster`,
    :class:`testbed.cluster.shared_store.RequestProxiedStore`); the broker must listen behind it."""
    if remote.is_alive(REQUEST_PROXY_DAEMON):
        return
    remote.exec(["mkdir", "-p", LOG_DIR], timeout=10)
    remote.start_daemon(
        REQUEST_PROXY_DAEMON,
        [
            PYTHON,
            "-m",
            "testbed.cluster.request_proxy",
            "--listen",
            f"0.0.0.0:{KAFKA_PORT}",
            "--upstream",
            f"127.0.0.1:{BROKER_BEHIND_PROXY_PORT}",
            "--control",
            f"0.0.0.0:{PROXY_CONTROL_PORT}",
            "--log",
            f"{LOG_DIR}/request-proxy.jsonl",
        ],
        log_path=f"{LOG_DIR}/request-proxy.log",
    )
