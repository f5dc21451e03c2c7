"""A broker's client connections end at shutdown even when a connection's task lost its cancellation.

CPython 3.11's ``asyncio.wait_for`` can swallow a cancellation (gh-86296): the connection loop then
waits for the client's next request, and ``asyncio.run`` waits with it for as long as the client
stays connected -- a SIGTERMed broker outlived its signal so.  Here a handler swallows the
cancellation on purpose, deterministically: cancelling the connection's task alone leaves it
running, :meth:`~broker_impl.listener.Connections.abort_all` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib

from broker_impl import wire
from broker_impl.listener import Connections

API_VERSIONS = 18


async def _lost_cancellation_then_abort() -> tuple[bool, bool]:
    connections = Connections()
    handling = asyncio.Event()

    async def swallowing_handler(request: wire.Request) -> object:
        handling.set()
        with contextlib.suppress(asyncio.CancelledError):  # as a lost cancellation behaves
            await asyncio.sleep(30)
        return wire.APIS[API_VERSIONS].response(version=3, error_code=0, api_keys=[], throttle_time_ms=0)

    tasks: list[asyncio.Task[None]] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        await connections.serve({API_VERSIONS: swallowing_handler}, reader, writer)

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await asyncio.open_connection("127.0.0.1", port)
    request = wire.APIS[API_VERSIONS].request(
        version=3, client_software_name="tidemark", client_software_version="0"
    )
    client.write(wire.encode_request(request, 1, "test"))
    await asyncio.wait_for(handling.wait(), 10)
    (task,) = tasks
    task.cancel()
    await asyncio.sleep(0.2)  # the handler answers; the loop goes back to reading: not done
    survived_cancel = not task.done()
    connections.abort_all()
    await asyncio.wait({task}, timeout=10)
    ended_at_abort = task.done()
    client.close()
    server.close()
    return survived_cancel, ended_at_abort


def test_abort_all_ends_a_connection_whose_task_lost_its_cancellation() -> None:
    survived_cancel, ended_at_abort = asyncio.run(_lost_cancellation_then_abort())
    assert survived_cancel, "the planted lost cancellation must leave the loop running"
    assert ended_at_abort, "abort_all must end the connection's loop"
