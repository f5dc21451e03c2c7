"""Starting a request proxy (:mod:`testbed.cluster.request_proxy`) and telling it what to do.

:func:`spawn_proxy` starts one proxy as a process of its own (as it runs on a broker's node) and
waits for the line announcing its addresses; :class:`ProxyControl` sends control lines and
returns the replies, raising :class:`ProxyRefused` with the proxy's one-line reason when it
refuses one (or cannot be connected to: nothing was sent) and :class:`ProxyControlError` when the
outcome is unknown (no reply); :func:`read_actions` reads the proxy's JSON action log back (what the history's
events show).  A control connection is opened per call and closed after it: the proxy keeps no
state per control connection, and a nemesis step must not hang on a socket an earlier step left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.cluster.request_proxy.proxy import host_port

SOURCE_ROOT = Path(__file__).resolve().parents[3]

ApiKeys = int | str | Sequence[int | str]
"""The API keys a rule matches: a number, a request name, or a list of them."""


class ProxyControlError(Exception):
    """A proxy refused a control line, did not answer, or did not start; the message says which."""


class ProxyRefused(ProxyControlError):
    """Certainly nothing was done: the proxy answered the line with an error, or its control
    channel could not be connected to (the line was never sent)."""


def _keys(api_key: ApiKeys) -> int | str | list[int | str]:
    return api_key if isinstance(api_key, int | str) else list(api_key)


class ProxyControl:
    """The control channel of one proxy: ``HOST:PORT`` (TCP) or a unix socket path."""

    def __init__(self, address: str, timeout: float = 15.0) -> None:
        self.address = address
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        if "/" in self.address:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(self.timeout)
            connection.connect(self.address)
            return connection
        return socket.create_connection(host_port(self.address), timeout=self.timeout)

    def send(self, command: dict[str, Any]) -> dict[str, Any]:
        """One control line and its reply; ProxyControlError when the proxy refuses it or is unreachable."""
        try:
            connection = self._connect()
        except OSError as error:
            raise ProxyRefused(f"proxy control {self.address}: {error}") from None
        try:
            with connection:
                connection.sendall(json.dumps(command).encode() + b"\n")
                line = connection.makefile("rb").readline()
        except OSError as error:
            raise ProxyControlError(f"proxy control {self.address}: {error}") from None
        if not line:
            raise ProxyControlError(f"proxy control {self.address}: closed without a reply to {command}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise ProxyRefused(f"proxy control {self.address}: {reply['error']}")
        return reply

    def hold(
        self,
        api_key: ApiKeys,
        client: str | None = None,
        count: int | None = None,
        disconnect: bool = False,
        ends: str | None = None,
    ) -> dict[str, Any]:
        """Hold the matching requests until released (``ends``: only EndTxns that commit, or abort)."""
        return self.send(
            {
                "op": "hold",
                "api_key": _keys(api_key),
                "client": client,
                "count": count,
                "disconnect": disconnect,
                "ends": ends,
            }
        )

    def drop(self, api_key: ApiKeys, client: str | None = None, count: int | None = None) -> dict[str, Any]:
        return self.send({"op": "drop", "api_key": _keys(api_key), "client": client, "count": count})

    def delay(
        self,
        api_key: ApiKeys,
        ms: int,
        client: str | None = None,
        count: int | None = None,
        jitter: int = 0,
    ) -> dict[str, Any]:
        """Delay the matching requests by ``ms``, each by its own draw from ``ms +- jitter`` when
        ``jitter`` is given (requests on different connections then overtake one another)."""
        command = {"op": "delay", "api_key": _keys(api_key), "ms": ms, "client": client, "count": count}
        return self.send({**command, **({"jitter": jitter} if jitter else {})})

    def duplicate(
        self, api_key: ApiKeys, client: str | None = None, count: int | None = None, ends: str | None = None
    ) -> dict[str, Any]:
        command = {"op": "duplicate", "api_key": _keys(api_key), "client": client, "count": count}
        return self.send({**command, "ends": ends})

    def reset(
        self, api_key: ApiKeys, client: str | None = None, count: int | None = None, ends: str | None = None
    ) -> dict[str, Any]:
        """Forward the matching requests, then reset the client's connection before each answer."""
        command = {"op": "reset", "api_key": _keys(api_key), "client": client, "count": count}
        return self.send({**command, "ends": ends})

    def observe(
        self, api_key: ApiKeys, client: str | None = None, count: int | None = None
    ) -> dict[str, Any]:
        return self.send({"op": "observe", "api_key": _keys(api_key), "client": client, "count": count})

    def release(self, mode: str = "new-connection", rule: int | None = None) -> dict[str, Any]:
        return self.send({"op": "release", "mode": mode, "rule": rule})

    def clear(self, mode: str = "new-connection") -> dict[str, Any]:
        return self.send({"op": "clear", "mode": mode})

    def status(self) -> dict[str, Any]:
        return self.send({"op": "status"})

    def wait_held(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """Wait until at least ``count`` requests are held; their descriptions."""
        deadline = time.monotonic() + timeout
        while True:
            held: list[dict[str, Any]] = self.status()["held"]
            if len(held) >= count:
                return held
            if time.monotonic() > deadline:
                raise ProxyControlError(
                    f"proxy {self.address}: {len(held)} held after {timeout:g} s, expected {count}"
                )
            time.sleep(0.02)


@dataclasses.dataclass
class ProxyProcess:
    """A running proxy process: where it listens, its control channel, its log."""

    process: subprocess.Popen[bytes]
    listen: str
    control: ProxyControl
    log: Path

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (the proxy closes every connection), SIGKILL after ``timeout``; the exit code."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def spawn_proxy(listen: str, upstream: str, control: str, log: Path, timeout: float = 15.0) -> ProxyProcess:
    """Start a proxy process and wait for its addresses; ProxyControlError when it does not come up."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cluster.request_proxy",
            "--listen",
            listen,
            "--upstream",
            upstream,
            "--control",
            control,
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=SOURCE_ROOT,
        env={**os.environ, "PYTHONPATH": str(SOURCE_ROOT)},
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else b""
    if not line:
        process.kill()
        _, errors = process.communicate()
        raise ProxyControlError(
            f"request proxy on {listen} did not start: {errors.decode(errors='replace').strip()}"
        )
    addresses = json.loads(line)
    return ProxyProcess(process, addresses["listen"], ProxyControl(addresses["control"]), log)


def read_actions(log: Path) -> list[dict[str, Any]]:
    """Every action line a proxy wrote to ``log``, in order (none when it does not exist yet)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
