"""Run a controller and brokers as local processes on 127.0.0.x -- no Docker needed.

``python -m broker_impl.localcluster up --brokers 3 --dir DIR [--set KEY=VALUE ...]``
starts everything, waits until every broker is registered and answers Kafka requests,
and prints one JSON line ``{"bootstrap": ..., "brokers": {...}, "controller": {...}}``.
``down --dir DIR`` stops everything it started; ``create-topic --dir DIR NAME
--partitions P --replication-factor R`` creates a topic and waits for its leaders.

Broker ``i`` listens on ``127.0.0.(1+i)``; the controller on ``127.0.0.1``.  The state
lives in ``DIR/cluster.json`` so that ``down`` (or a test's fixture) finds the pids.
:class:`LocalCluster` is the same as a Python API, used by tests and benchmarks to kill,
pause and restart individual nodes.

``up(..., proxied=True)`` (``up --proxied``) makes each broker advertise a second address on its
host, ``advertised.listeners``, where nothing listens until the caller starts something there
-- a request proxy (:mod:`testbed.cluster.request_proxy`) forwarding to the broker's own
``address``.  Clients then reach the broker only through it; so do the other brokers' replica
fetchers and the coordinators' markers, which also connect to the advertised address, as in a
Kafka cluster with one listener.  The readiness checks and :meth:`LocalCluster.bootstrap` use
the brokers' own addresses, :meth:`LocalCluster.client_bootstrap` the advertised ones.  The
cluster is not usable (no replication, no markers) until every proxy is up.

Local defaults differ from Kafka's in one place: heartbeats every 250 ms and a 3 s
broker session, so failover in tests takes seconds, not the production 9 s.  Each node's
event log (:mod:`broker_impl.events`) lives beside its ``process.log`` in the node's
directory; :meth:`LocalCluster.events_path` names it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import config as configuration
from . import wire
from .events import BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE
from .owner_watch import OWNER_ENV

LOCAL_BROKER_DEFAULTS = {"broker.heartbeat.interval.ms": "250", "replica.fetch.backoff.ms": "200"}
LOCAL_CONTROLLER_DEFAULTS = {"broker.session.timeout.ms": "3000"}


class ClusterError(Exception):
    """A cluster did not come up, or an operation on it failed; the message says which."""


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class LocalCluster:
    def __init__(self, directory: Path, detached: bool = False) -> None:
        """``detached``: the processes started here outlive this process (the CLI's ``up``);
        otherwise they stop once it is gone, however it ended (:mod:`broker_impl.owner_watch`)."""
        self.directory = Path(directory).resolve()
        self.detached = detached
        self.state_path = self.directory / "cluster.json"
        self.state: dict[str, Any] = (
            json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        )

    # ---- lifecycle ----------------------------------------------------------------------

    def up(
        self,
        brokers: int,
        overrides: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        proxied: bool = False,
    ) -> dict[str, Any]:
        """Start a controller and ``brokers`` brokers and wait until they answer; :meth:`summary`.
        ``proxied``: each broker advertises an address of its own for a proxy (module docstring)."""
        overrides = dict(overrides or {})
        for key in overrides:
            if not (configuration.broker_keys_accepting(key) or configuration.controller_keys_accepting(key)):
                raise ClusterError(f"--set {key}: not a broker or controller setting")
        for keys in (configuration.BROKER_KEYS, configuration.CONTROLLER_KEYS):
            names = {key.name for key in keys}
            configuration.apply_overrides(
                {}, {k: v for k, v in overrides.items() if k in names}, "--set", keys
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        controller_port = free_port("127.0.0.1")
        controller_dir = self.directory / "controller"
        controller_dir.mkdir(exist_ok=True)
        controller_settings = {
            "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
            "metadata.log.dir": str(controller_dir / "metadata"),
            **LOCAL_CONTROLLER_DEFAULTS,
            **{k: v for k, v in overrides.items() if configuration.controller_keys_accepting(k)},
            "event.log.dir": str(controller_dir),
        }
        (controller_dir / "controller.properties").write_text(configuration.render(controller_settings))
        self.state = {
            "controller": {"address": f"127.0.0.1:{controller_port}", "dir": str(controller_dir)},
            "brokers": {},
        }
        for node in range(1, brokers + 1):
            host = f"127.0.0.{1 + node}"
            node_dir = self.directory / f"broker-{node}"
            node_dir.mkdir(exist_ok=True)
            settings = {
                "node.id": str(node),
                "listeners": f"PLAINTEXT://{host}:{free_port(host)}",
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
                "log.dirs": str(node_dir / "data"),
                **LOCAL_BROKER_DEFAULTS,
                **{
                    k: v
                    for k, v in overrides.items()
                    if configuration.broker_keys_accepting(k) and k != "node.id"
                },
                "event.log.dir": str(node_dir),
            }
            if proxied:
                settings["advertised.listeners"] = f"PLAINTEXT://{host}:{free_port(host)}"
            (node_dir / "broker.properties").write_text(configuration.render(settings))
            self.state["brokers"][str(node)] = {
                "address": settings["listeners"].split("://")[1],
                "dir": str(node_dir),
                "data": settings["log.dirs"],
                **({"advertised": settings["advertised.listeners"].split("://")[1]} if proxied else {}),
            }
        self._save()
        self.start("controller")
        for node in self.state["brokers"]:
            self.start(node)
        self.wait_ready(timeout)
        return self.summary()

    def _save(self) -> None:
        self.state_path.write_text(json.dumps(self.state, indent=1))

    def _entry(self, node: str) -> dict[str, Any]:
        if node == "controller":
            entry: dict[str, Any] = self.state["controller"]
        elif node in self.state.get("brokers", {}):
            entry = self.state["brokers"][node]
        else:
            raise ClusterError(f"no node {node!r} in {self.state_path}")
        return entry

    def start(self, node: str) -> int:
        """Start (or restart) a node's process; returns its pid."""
        entry = self._entry(node)
        module, config_name = (
            ("broker_impl.controller", "controller.properties")
            if node == "controller"
            else ("broker_impl.broker", "broker.properties")
        )
        directory = Path(entry["dir"])
        log = open(directory / "process.log", "ab")  # noqa: SIM115 -- handed to the child
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--config", str(directory / config_name)],
            stdout=log,
            stderr=subprocess.STDOUT,
            # A group of its own: a signal or a terminal's Ctrl-C aimed at one process reaches no
            # other.  Detached, a session of its own too (it outlives the terminal); owned, the
            # owner's session, so that its death orphans the group (see broker_impl.owner_watch).
            start_new_session=self.detached,
            process_group=None if self.detached else 0,
            cwd=Path(__file__).resolve().parent.parent,
            env=None if self.detached else {**os.environ, OWNER_ENV: str(os.getpid())},
        )
        log.close()
        entry["pid"] = process.pid
        self._save()
        return process.pid

    def pid(self, node: str) -> int:
        return int(self._entry(node)["pid"])

    def events_path(self, node: str) -> Path:
        """The event log of ``node`` (a broker id as text, or ``"controller"``)."""
        name = CONTROLLER_EVENTS_FILE if node == "controller" else BROKER_EVENTS_FILE
        return Path(self._entry(node)["dir"]) / name

    def signal(self, node: str, signal_number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(node), signal_number)

    def kill(self, node: str) -> None:
        """SIGKILL and reap: a crash."""
        self.signal(node, signal.SIGCONT)
        self.signal(node, signal.SIGKILL)
        self._reap(node, 10.0)

    def stop(self, node: str, timeout: float = 10.0, *, controlled: bool = True) -> None:
        """A clean shutdown, SIGKILL after ``timeout``: SIGTERM, a broker's controlled shutdown
        first; ``controlled=False`` SIGINT, without it, as the harness stops a cluster at a run's
        end (:mod:`broker_impl.controlled_shutdown` says why)."""
        self.signal(node, signal.SIGCONT)
        self.signal(node, signal.SIGTERM if controlled else signal.SIGINT)
        if not self._reap(node, timeout):
            self.kill(node)

    def pause(self, node: str) -> None:
        self.signal(node, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self.signal(node, signal.SIGCONT)

    def is_alive(self, node: str) -> bool:
        try:
            pid = self.pid(node)
        except (KeyError, ClusterError):
            return False
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if finished:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        stat = Path(f"/proc/{pid}/stat")
        return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")

    def _reap(self, node: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive(node):
                return True
            time.sleep(0.01)
        return False

    def down(self) -> None:
        if "controller" not in self.state:
            return
        for node in [*self.state.get("brokers", {}), "controller"]:
            if "pid" in self._entry(node):
                self.kill(node)

    # ---- observation --------------------------------------------------------------------

    def bootstrap(self) -> str:
        """The addresses of the brokers whose process runs (all of them when none does).

        Why not every broker: kafka-python 3 draws a bootstrap server at random on each attempt
        and multiplies a refused one's backoff by about four, so while one broker in two is down a
        client's 30 s bootstrap fails whenever the draws keep landing on the dead one (CI saw
        eight in a row) -- a test producing then would fail on its client, not on the broker."""
        brokers = self.state["brokers"]
        running = [node for node in brokers if self.is_alive(node)] or list(brokers)
        return ",".join(brokers[node]["address"] for node in running)

    def client_address(self, node: str) -> str:
        """Where clients reach broker ``node``: its advertised (proxy) address, else its own."""
        entry = self._entry(node)
        address: str = entry.get("advertised", entry["address"])
        return address

    def client_bootstrap(self) -> str:
        """The bootstrap list clients use: through the proxies when the cluster is proxied."""
        return ",".join(self.client_address(node) for node in self.state["brokers"])

    def summary(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap(),
            "brokers": {
                node: {
                    "pid": entry.get("pid"),
                    "address": entry["address"],
                    "data": entry["data"],
                    **({"advertised": entry["advertised"]} if "advertised" in entry else {}),
                }
                for node, entry in self.state["brokers"].items()
            },
            "controller": {
                "pid": self.state["controller"].get("pid"),
                "address": self.state["controller"]["address"],
            },
        }

    def controller_call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
        host, port = self.state["controller"]["address"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            connection.sendall(json.dumps({"method": method, "params": params or {}}).encode() + b"\n")
            reader = connection.makefile("rb")
            reply = json.loads(reader.readline())
        if "error" in reply:
            raise ClusterError(f"controller {method}: {reply['error']}")
        return reply["result"]

    def describe(self) -> dict[str, Any]:
        result: dict[str, Any] = self.controller_call("describe")
        return result

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        state: dict[str, Any] = self.describe()["topics"][topic]["partitions"][partition]
        return state

    def wait_for(self, condition: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = condition()
                if value:
                    return value
            except (OSError, ClusterError, KeyError, ValueError) as error:
                last_error = error
            time.sleep(0.02)
        raise ClusterError(
            f"timed out after {timeout:.0f} s waiting for {what}"
            + (f" (last error: {last_error})" if last_error else "")
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        expected = set(self.state["brokers"])

        def ready() -> bool:
            brokers = self.describe()["brokers"]
            registered = {node for node, broker in brokers.items() if not broker["fenced"]}
            return expected <= registered and all(
                api_versions_answer(entry["address"]) for entry in self.state["brokers"].values()
            )

        self.wait_for(ready, timeout, f"brokers {sorted(expected)} to register and answer")

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, timeout: float = 30.0
    ) -> None:
        reply = self.controller_call(
            "create_topic", {"name": name, "partitions": partitions, "replication_factor": replication_factor}
        )
        if reply.get("error"):
            raise ClusterError(f"create topic {name}: {reply['error']}")
        self.wait_for_leaders(name, timeout)

    def wait_for_leaders(self, topic: str, timeout: float = 30.0) -> None:
        """Every partition has a leader, and every live, unfenced broker's own Metadata says so.

        Every broker, not only the leaders: a client bootstraps from any of them, and a broker
        learns a new topic only at its next heartbeat.  A consumer group's leader that asked a
        broker still without the topic assigned its members nothing (kafka-python's range
        assignor: "No partition metadata"), and the group sat idle until the metadata aged out
        -- a CI run of ``test_group_consumer_failover`` waited 60 s for a commit that way.
        Kafka's own test helper (``TestUtils.createTopic``) waits for every broker likewise."""

        def leaders_known() -> bool:
            topics = self.describe()
            states = topics["topics"][topic]["partitions"]
            if any(state["leader"] < 0 for state in states):
                return False
            expected = {index: (state["leader"], state["leader_epoch"]) for index, state in enumerate(states)}
            serving = [
                node
                for node, broker in topics["brokers"].items()
                if not broker["fenced"] and node in self.state["brokers"] and self.is_alive(node)
            ]
            return all(
                metadata_leaders(self.state["brokers"][node]["address"], topic) == expected
                for node in serving
            )

        self.wait_for(leaders_known, timeout, f"every broker to know the leaders of {topic}")


# ---- tiny synchronous Kafka probes (readiness checks) --------------------------------------


def _call(address: str, api_key: int, version: int, body: Any, timeout: float = 2.0) -> Any:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(wire.encode_request(body, 1, "tidemark-probe"))
        size = struct.unpack(">i", _read_exactly(connection, 4))[0]
        _, response = wire.decode_response(
            wire.APIS[api_key].response, version, _read_exactly(connection, size)
        )
        return response


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = connection.recv(size - len(chunks))
        if not chunk:
            raise ConnectionResetError("connection closed")
        chunks += chunk
    return bytes(chunks)


def api_versions_answer(address: str) -> bool:
    try:
        response = _call(
            address,
            18,
            3,
            wire.APIS[18].request(version=3, client_software_name="tidemark", client_software_version="0"),
        )
    except OSError:
        return False
    return bool(response.error_code == 0)


def metadata_leaders(address: str, topic: str) -> dict[int, tuple[int, int]]:
    """What the broker at ``address`` answers for ``topic``: {partition: (leader, leader epoch)}."""
    request_class = wire.APIS[3].request
    request = request_class(
        version=12,
        topics=[wire.nested(request_class, "MetadataRequestTopic")(name=topic)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    response = _call(address, 3, 12, request)
    return {
        state.partition_index: (state.leader_id, state.leader_epoch)
        for entry in response.topics
        for state in entry.partitions
    }


# ---- command line ----------------------------------------------------------------------------


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ClusterError(f"--set {pair!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker_impl.localcluster")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a controller and brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    up.add_argument("--timeout", type=float, default=30.0)
    up.add_argument("--proxied", action="store_true", help="brokers advertise a second address for a proxy")
    down = commands.add_parser("down", help="stop everything `up` started")
    down.add_argument("--dir", required=True)
    create = commands.add_parser("create-topic", help="create a topic and wait for its leaders")
    create.add_argument("--dir", required=True)
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    args = parser.parse_args(argv)
    cluster = LocalCluster(Path(args.dir), detached=True)
    try:
        if args.command == "up":
            if args.brokers < 1:
                raise ClusterError("--brokers must be at least 1")
            try:
                print(
                    json.dumps(
                        cluster.up(args.brokers, _parse_overrides(args.set), args.timeout, args.proxied)
                    ),
                    flush=True,
                )
            except BaseException:
                cluster.down()
                raise
        elif args.command == "down":
            if not cluster.state:
                raise ClusterError(f"no cluster in {args.dir} (no cluster.json)")
            cluster.down()
        else:
            cluster.create_topic(args.name, args.partitions, args.replication_factor)
    except (ClusterError, configuration.ConfigError) as error:
        print(f"localcluster: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
