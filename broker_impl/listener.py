"""One client connection of a broker's Kafka listener: read requests, answer them in order.

Kafka answers a connection's requests in the order they came (a client may pipeline them), so
one loop per connection reads a frame, decodes it (:mod:`broker_impl.wire`), awaits its API's
handler and writes the answer before it reads the next.  Which handler serves which API key is
the broker's business (:meth:`broker_impl.broker.Broker.serve_connection` assembles the table);
this loop only keeps the connection's contract: a handler answering ``None`` sends nothing
(Produce with ``acks=0``), a frame that is not a request we serve closes the connection (as Kafka
does), and no error of one connection ever reaches the broker.

:class:`Connections` keeps the open ones, so that a stopping broker closes them all, as Kafka's
``SocketServer`` does at shutdown.  Cancelling their tasks is not enough: a handler awaiting
``asyncio.wait_for`` can lose the cancellation (CPython gh-86296, Python 3.11) when its future
completes in the same turn -- which a controlled shutdown makes likely, failing every acks=all
waiter as the broker gives up its leaderships -- and the loop then waits for the client's next
request; ``asyncio.run`` waited with it, and the process outlived its SIGTERM for as long as the
client stayed (a nemesis ``shutdown`` ended in SIGKILL after 30 s, 2 of 3 times in a 60 s run).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import wire

logger = logging.getLogger("broker_impl.broker")

RequestHandler = Callable[[wire.Request], Awaitable[Any]]


async def serve_requests(
    handlers: Mapping[int, RequestHandler], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer the connection's requests until it closes; close it on a protocol error."""
    peer = writer.get_extra_info("peername")
    try:
        while True:
            payload = await wire.read_frame(reader)
            request = wire.decode_request(payload)
            body = await handlers[request.api.key](request)
            if body is None:
                continue  # acks=0: Kafka sends no response
            writer.write(wire.encode_response(request, body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    except wire.ProtocolError as error:
        logger.info("closing connection from %s: %s", peer, error)
    except Exception:
        logger.exception("closing connection from %s after an internal error", peer)
    finally:
        writer.close()


class Connections:
    """The broker's open client connections (see the module docstring)."""

    def __init__(self) -> None:
        self._writers: set[asyncio.StreamWriter] = set()

    async def serve(
        self,
        handlers: Mapping[int, RequestHandler],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """:func:`serve_requests`, the connection known to :meth:`abort_all` meanwhile."""
        self._writers.add(writer)
        try:
            await serve_requests(handlers, reader, writer)
        finally:
            self._writers.discard(writer)

    def abort_all(self) -> None:
        """Close every open connection at once, unsent answers dropped: its loop reads the end."""
        for writer in list(self._writers):
            writer.transport.abort()
