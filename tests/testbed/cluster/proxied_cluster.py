"""A local bundled-broker cluster with a request proxy in front of each broker (for tests).

:func:`start_proxied` brings a :class:`broker_impl.localcluster.LocalCluster` up with
``proxied=True`` and starts one proxy process per broker, listening on the broker's advertised
address and forwarding to its own; :class:`ProxiedCluster` holds both and stops both.  Clients
bootstrap through the proxies (:meth:`LocalCluster.client_bootstrap`), so every request of theirs,
and every replica fetch and marker between brokers, passes one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker_impl import wire
from broker_impl.localcluster import LocalCluster
from testbed.cluster.request_proxy.control import (
    ProxyControl,
    ProxyControlError,
    ProxyProcess,
    read_actions,
    spawn_proxy,
)


@dataclasses.dataclass
class ProxiedCluster:
    cluster: LocalCluster
    proxies: dict[str, ProxyProcess]  # broker id -> its proxy

    def leader_proxy(self, topic: str, partition: int = 0) -> ProxyProcess:
        return self.proxies[str(self.cluster.partition_state(topic, partition)["leader"])]

    def wait_holder(self, timeout: float) -> ProxyControl:
        """The control of the one proxy holding a request, once one does."""
        deadline = time.monotonic() + timeout
        while True:
            holders = [proxy.control for proxy in self.proxies.values() if proxy.control.status()["held"]]
            if holders:
                assert len(holders) == 1, f"{len(holders)} proxies hold requests"
                return holders[0]
            if time.monotonic() > deadline:
                raise ProxyControlError(f"no proxy held a request within {timeout:g} s")
            time.sleep(0.02)

    def actions(self) -> list[dict[str, Any]]:
        """Every proxy's log lines, each with ``broker`` added, in time order."""
        lines = [
            {**line, "broker": node}
            for node, proxy in self.proxies.items()
            for line in read_actions(proxy.log)
        ]
        return sorted(lines, key=lambda line: float(line["time"]))

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.cluster.down()


def start_proxied(directory: Path, brokers: int, settings: Mapping[str, str]) -> ProxiedCluster:
    """A running cluster whose brokers are reached through proxies; stops what it started on failure."""
    cluster = LocalCluster(directory)
    proxies: dict[str, ProxyProcess] = {}
    try:
        cluster.up(brokers, settings, proxied=True)
        for node, entry in cluster.state["brokers"].items():
            proxies[node] = spawn_proxy(
                entry["advertised"],
                entry["address"],
                "127.0.0.1:0",
                directory / f"proxy-{node}.jsonl",
            )
    except BaseException:
        ProxiedCluster(cluster, proxies).stop()
        raise
    return ProxiedCluster(cluster, proxies)


def decoded_answer(api_key: int, version: int, line: Mapping[str, Any]) -> Any:
    """The response a proxy logged for a released request (``answered`` line), decoded."""
    _, response = wire.decode_response(wire.APIS[api_key].response, version, bytes.fromhex(line["response"]))
    return response
