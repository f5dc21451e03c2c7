"""The one Spark Connect server a Spark campaign or hunt checks every run through.

A campaign checks all its runs in one pass and then, for each ``[[hunt]]``, every hunt run as it
ends; a hunt checks each run in a process of its own.  With the Spark engine, each of those checks
used to start a driver JVM and pay its JIT and class loading again (most of a small check's
CPU).  :func:`checking_remote` starts one server (:func:`checker.spark.connect_server.connect_server`)
for the block instead, and every check goes through it as a client (``--remote``).

When it is not started: the pandas engine (no JVM at all); a server named with ``--remote``
(that one is used); a campaign without hunts, whose one check pass needs one JVM either way (a
server's 10-20 s start would only be added: the demo's two runs); ``--no-spark-server`` -- a
hunt of a few runs, or a machine whose memory cannot hold an idle server beside the brokers; and
when the server does not come up, which is said and then costs the old way (a JVM per check),
not the campaign.  A campaign starts it after its matrix runs, which check nothing, so an idle
JVM does not sit beside the brokers for the hours they take.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from checker.spark.connect_server import DEFAULT_MASTER, ConnectServer, ConnectServerError, connect_server


@contextlib.contextmanager
def checking_remote(
    engine: str,
    remote: str | None,
    *,
    start: bool,
    say: Callable[[str], None],
    master: str | None = None,
) -> Iterator[str | None]:
    """The Spark Connect address the block's checks go through: ``remote`` when given; else, with
    the Spark engine and ``start``, a server over ``master`` (default ``local[2]``) started for the
    block and stopped after it; else None (each check opens its own engine).  ``say`` gets one line
    about the server (its address, or why there is none)."""
    if remote is not None or engine != "spark" or not start:
        yield remote
        return
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        running: ConnectServer | None = None
        try:
            running = stack.enter_context(connect_server(master=master or DEFAULT_MASTER))
        except ConnectServerError as error:
            first = str(error).splitlines()[0]
            say(f"no Spark Connect server ({first}): each check starts its own Spark")
        if running is not None:
            say(
                f"checking through the Spark Connect server {running.url} "
                f"(up in {time.monotonic() - started:.0f} s; log {running.log})"
            )
        yield None if running is None else running.url
