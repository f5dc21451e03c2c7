"""Controller <-> broker RPC: one JSON object per line over TCP.

Kafka's KRaft brokers talk to the controller with BrokerRegistration, BrokerHeartbeat
and AlterPartition requests, and learn metadata from the controller's log.  Tidemark's
controller keeps the same roles (registration, heartbeats with a session timeout,
ISR changes requested by leaders, elections by the controller) over a deliberately
simple transport: the interesting behaviour under test is replication, not this
channel.  The metadata itself rides on heartbeat responses whenever its version moved.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
MAX_LINE = 64 * 1024 * 1024


class RpcError(Exception):
    """The remote side answered with an error (``{"error": ...}``)."""


async def serve(host: str, port: int, handlers: dict[str, Handler]) -> asyncio.Server:
    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                try:
                    message = json.loads(line)
                    method = message["method"]
                    params = message.get("params", {})
                    if method not in handlers or not isinstance(params, dict):
                        raise KeyError(method)
                except (ValueError, KeyError, TypeError) as error:
                    reply: dict[str, Any] = {"error": f"bad request: {error}"}
                else:
                    try:
                        reply = {"result": await handlers[method](params)}
                    except RpcError as error:
                        reply = {"error": str(error)}
                writer.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()

    return await asyncio.start_server(connection, host, port, limit=MAX_LINE, reuse_address=True)


class RpcClient:
    """A reconnecting client; one call at a time (calls are serialised by a lock)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host = host
        self.port = port
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        async with self._lock:
            try:
                return await asyncio.wait_for(self._call(method, params), timeout or self._timeout)
            except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError) as error:
                self.close()
                raise ConnectionError(f"controller {self.host}:{self.port} {method}: {error!r}") from None

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=MAX_LINE)
        assert self._reader is not None
        self._writer.write(json.dumps({"method": method, "params": params}).encode() + b"\n")
        await self._writer.drain()
        line = await self._reader.readline()
        if not line:
            raise ConnectionResetError("connection closed")
        reply = json.loads(line)
        if "error" in reply:
            raise RpcError(reply["error"])
        return reply["result"]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = None
        self._writer = None
