"""One client connection of a broker's Kafka listener: read requests, answer them in order.

Kafka answers a connection's requests in the order they came (a client may pipeline them), so
one loop per connection reads a frame, decodes it (:mod:`broker_impl.wire`), awaits its API's
handler and writes the answer before it reads the next.  Which handler serves which API key is
the broker's business (:meth:`broker_impl.broker.Broker.serve_connection` assembles the table);
this loop only keeps the connection's contract: a handler answering ``None`` sends nothing
(Produce with ``acks=0``), a frame that is not a request we serve closes the connection (as Kafka
does), and no error of one connection ever reaches the broker.
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
