"""A Kafka-aware TCP proxy in front of one broker: delays, drops, duplicates or holds requests.

``python -m testbed.cluster.request_proxy --listen HOST:PORT --upstream HOST:PORT --control
HOST:PORT|PATH [--log PATH]`` listens where the broker's clients connect (the broker advertises
this address: ``LocalCluster.up(..., proxied=True)``) and opens one upstream connection to the
broker per client connection.  Requests (client -> broker) are read frame by frame and matched
against the rules (:mod:`testbed.cluster.request_proxy.rules`); responses flow back untouched.  When
both listeners are up it prints one JSON line ``{"listen": ..., "control": ...}`` (the real
ports, when 0 was asked) and runs until SIGTERM or SIGINT, then closes every connection.

Why a proxy and not iptables: a network fault cannot tell a Produce from a Fetch, nor hold one
request while the client's connection stays up.  The bugs this exists for need exactly that.
KAFKA-17754: a Produce (or EndTxn) of transaction N is held past the client's request timeout;
the client gives up that connection, retries on a new one and moves on to transaction N+1 with
the same producer id and epoch; then the held request reaches the broker -- ``release`` with mode
``new-connection`` sends it on a fresh upstream connection whose answer goes nowhere -- and lands
in transaction N+1.  KAFKA-14402: the late Produce arrives after its transaction ended and opens
one nothing ends, so the LSO hangs.

The actions (each written as one JSON line to the log: ``time``, ``conn``, ``rule``, ``api_key``,
``api_version``, ``correlation_id``, ``client_id``, ``action``):

* ``hold`` -- the request is kept; the connection's later requests wait behind it (Kafka answers
  in order, so nothing may overtake it), the connection itself stays open -- or, with
  ``disconnect``, is closed at once, so the client retries the request on a new connection
  while the held copy waits (a request "possibly persisted", which idempotence must absorb).  ``release`` sends the
  held requests upstream in the order they were held, on a new connection (``new-connection``,
  answers read and logged as ``answered`` with their bytes, then dropped) or each on its own connection
  (``original``, the answer reaches the client; a closed one falls back to a new connection).
* ``drop`` -- the client's connection (and its upstream) is closed instead of forwarding: the
  client sees a disconnect and retries on a new connection.
* ``delay`` -- forwarded after ``ms`` milliseconds (the connection's later requests wait too);
  delays add up and compose with the other actions (the rule book's latency).  With a ``jitter``
  each request waits its own draw from ``ms +- jitter`` (logged as the delay line's ``ms``), so
  requests on different connections overtake one another.
* ``duplicate`` -- forwarded twice; the first answer goes to the client, the second is swallowed.
* ``reset`` -- forwarded, then the client's connection is reset (RST) before the answer: the
  broker acts on the request, the client sees its connection fail with the request in flight and
  retries on a new one, not knowing.  The upstream connection stays until the broker answered
  (logged ``answered-after-reset``, then dropped) or :data:`ANSWER_TIMEOUT` passed, so the reset
  never cuts the request itself short.
* ``observe`` -- forwarded at once, and logged (API key and version: what the client speaks).

Control lines and their replies are one JSON object per line; a bad line gets ``{"error":
"..."}``.  ``clear`` removes every rule and releases what is held (the heal).  Standard library
only, so it runs on a broker's node as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Final, TextIO

from testbed.cluster.request_proxy.rules import (
    ACTIONS,
    Command,
    ControlError,
    FrameError,
    ReleaseMode,
    RequestHeader,
    Rule,
    RuleBook,
    frame_size,
    parse_command,
    parse_request_header,
    response_correlation_id,
)

MAX_LOGGED_RESPONSE: Final = 4096
"""A released request's answer up to this size is logged whole (hex): it says what the broker did."""
ANSWER_TIMEOUT: Final = 10.0
"""Seconds a ``new-connection`` release waits for the broker's answers before closing."""


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as a pair; ValueError naming the text otherwise."""
    host, separator, port = text.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One whole frame (size prefix included); IncompleteReadError at EOF, FrameError on garbage."""
    prefix = await reader.readexactly(4)
    return prefix + await reader.readexactly(frame_size(prefix))


@dataclasses.dataclass(eq=False)
class Link:
    """One client connection and its upstream connection, with the tasks pumping between them."""

    number: int
    client: asyncio.StreamWriter
    upstream_reader: asyncio.StreamReader
    upstream: asyncio.StreamWriter
    duplicates: dict[int, bool] = dataclasses.field(default_factory=dict)
    """Correlation id of a duplicated request -> whether its first answer went to the client."""
    gone: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    reset_after: int | None = None
    """The correlation id of the request after which the client's connection was reset."""
    reset_answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class Held:
    """A held request: its whole frame, where it came from, and how its release went."""

    seq: int
    rule: Rule
    header: RequestHeader
    frame: bytes
    link: Link
    since: float
    released: asyncio.Future[str]


class RequestProxy:
    """The proxy: ``await start()``, then control lines through :meth:`execute`, ``await close()``."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], control: str, log: TextIO) -> None:
        self.listen_address = listen
        self.upstream_address = upstream
        self.control_address = control
        self.log_file = log
        self.rules = RuleBook()
        self.held: list[Held] = []
        self.links: set[Link] = set()
        self.servers: list[asyncio.Server] = []
        self._numbers = 0
        self._held_count = 0

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> dict[str, str]:
        """Listen for clients and for control lines; the addresses actually bound."""
        listener = await asyncio.start_server(self._serve_client, *self.listen_address)
        self.servers.append(listener)
        host, port = listener.sockets[0].getsockname()[:2]
        if ":" in self.control_address and "/" not in self.control_address:
            control = await asyncio.start_server(self._serve_control, *host_port(self.control_address))
            control_host, control_port = control.sockets[0].getsockname()[:2]
            control_name = f"{control_host}:{control_port}"
        else:
            control = await asyncio.start_unix_server(self._serve_control, self.control_address)
            control_name = self.control_address
        self.servers.append(control)
        return {"listen": f"{host}:{port}", "control": control_name}

    async def close(self) -> None:
        """Stop listening, close every connection, forget what is held (nothing is sent)."""
        for server in self.servers:
            server.close()
        for held in self.held:
            if not held.released.done():
                held.released.set_result("discarded")
        self.held.clear()
        for link in list(self.links):
            await self._close_link(link)
        for server in self.servers:
            await server.wait_closed()
        if "/" in self.control_address:
            with contextlib.suppress(FileNotFoundError):
                Path(self.control_address).unlink()

    def log(self, action: str, **fields: Any) -> None:
        self.log_file.write(json.dumps({"time": round(time.time(), 6), "action": action, **fields}) + "\n")
        self.log_file.flush()

    def _log_request(
        self, action: str, link: Link | None, rule: Rule | None, header: RequestHeader, **extra: Any
    ) -> None:
        self.log(
            action,
            conn=None if link is None else link.number,
            rule=None if rule is None else rule.rule_id,
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            **({"ends": header.ending} if header.ending else {}),
            **extra,
        )

    # ---- the data path --------------------------------------------------------------------

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.upstream_address)
        except OSError as error:
            self.log("upstream-refused", error=str(error))
            writer.close()
            return
        self._numbers += 1
        link = Link(self._numbers, writer, upstream_reader, upstream)
        self.links.add(link)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        link.tasks = [
            asyncio.create_task(self._read_client(link, reader, queue)),
            asyncio.create_task(self._forward(link, queue)),
            asyncio.create_task(self._answer(link)),
        ]
        await link.gone.wait()
        await self._close_link(link)

    async def _close_link(self, link: Link) -> None:
        link.gone.set()
        current = asyncio.current_task()
        others = [task for task in link.tasks if task is not current]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        for writer in (link.client, link.upstream):
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self.links.discard(link)

    async def _read_client(
        self, link: Link, reader: asyncio.StreamReader, queue: asyncio.Queue[bytes | None]
    ) -> None:
        """Client frames into ``queue`` (read ahead, so a client's close is seen while a request is held)."""
        try:
            while True:
                await queue.put(await read_frame(reader))
        except (asyncio.IncompleteReadError, FrameError, OSError):
            await queue.put(None)
            if link.reset_after is None:  # a reset link ends when the broker has answered
                link.gone.set()

    async def _forward(self, link: Link, queue: asyncio.Queue[bytes | None]) -> None:
        """Requests to the broker, in order, each as its first matching rule says."""
        try:
            while (frame := await queue.get()) is not None:
                header = parse_request_header(frame[4:])
                delay_ms, delays = self.rules.latency(header)
                if delays:  # the path's latency first, whatever else happens to the request
                    self._log_request("delay", link, delays[0], header, ms=delay_ms)
                    await asyncio.sleep(delay_ms / 1000)
                rule = self.rules.take(header)
                if rule is None:
                    link.upstream.write(frame)
                elif rule.action == "observe":
                    self._log_request("observe", link, rule, header)
                    link.upstream.write(frame)
                elif rule.action == "drop":
                    self._log_request("drop", link, rule, header)
                    link.gone.set()
                    return
                elif rule.action == "duplicate":
                    self._log_request("duplicate", link, rule, header)
                    link.duplicates[header.correlation_id] = False
                    link.upstream.write(frame + frame)
                elif rule.action == "reset":
                    await self._reset(link, rule, header, frame)
                    return
                elif not await self._hold(link, rule, header, frame):
                    return
                await link.upstream.drain()
        except (FrameError, OSError) as error:
            self.log("link-error", conn=link.number, error=str(error))
            link.gone.set()

    async def _hold(self, link: Link, rule: Rule, header: RequestHeader, frame: bytes) -> bool:
        """Keep ``frame`` until released; False when the client left meanwhile (the hold stays)."""
        self._held_count += 1
        held = Held(
            self._held_count,
            rule,
            header,
            frame,
            link,
            time.monotonic(),
            asyncio.get_running_loop().create_future(),
        )
        self.held.append(held)
        self._log_request("hold", link, rule, header)
        if rule.disconnect:  # the client sees its connection fail with the request in flight
            self._log_request("disconnect", link, rule, header)
            link.gone.set()
            return False
        gone = asyncio.create_task(link.gone.wait())
        waiters: set[asyncio.Future[Any]] = {held.released, gone}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not held.released.done() or held.released.result() == "discarded":
            return False  # the client left (the hold stays), or the proxy is closing
        if held.released.result() == "original":
            link.upstream.write(frame)
        return True

    async def _reset(self, link: Link, rule: Rule, header: RequestHeader, frame: bytes) -> None:
        """Forward ``frame``, reset the client's connection, and end the link once the broker
        answered it (or after :data:`ANSWER_TIMEOUT`: an ``acks=0`` Produce has no answer)."""
        self._log_request("reset", link, rule, header)
        link.reset_after = header.correlation_id
        link.upstream.write(frame)
        await link.upstream.drain()
        transport = link.client.transport
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()  # RST, not FIN: the connection failed, it was not closed politely
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ANSWER_TIMEOUT):
                await link.reset_answered.wait()
        link.gone.set()

    async def _answer(self, link: Link) -> None:
        """Responses to the client untouched, but for the second answer of a duplicated request
        and every answer after a reset (the client is gone; they are logged and dropped)."""
        try:
            while True:
                frame = await read_frame(link.upstream_reader)
                correlation_id = response_correlation_id(frame[4:])
                if link.reset_after is not None:
                    self.log("answered-after-reset", conn=link.number, correlation_id=correlation_id)
                    if correlation_id == link.reset_after:
                        link.reset_answered.set()
                    continue
                if link.duplicates.get(correlation_id) is True:
                    del link.duplicates[correlation_id]
                    self.log("swallow", conn=link.number, correlation_id=correlation_id)
                    continue
                if correlation_id in link.duplicates:
                    link.duplicates[correlation_id] = True
                link.client.write(frame)
                await link.client.drain()
        except (asyncio.IncompleteReadError, FrameError, OSError):
            link.gone.set()

    # ---- releasing --------------------------------------------------------------------------

    async def release(self, rule_id: int | None, mode: ReleaseMode) -> dict[str, Any]:
        """Send what is held (all, or one rule's), in the order held; the counts, for the reply."""
        chosen = [held for held in self.held if rule_id is None or held.rule.rule_id == rule_id]
        self.held = [held for held in self.held if held not in chosen]
        elsewhere = [held for held in chosen if mode == "new-connection" or held.link.gone.is_set()]
        answered = await self._send_on_new_connection(elsewhere) if elsewhere else 0
        for held in chosen:
            how = "new-connection" if held in elsewhere else "original"
            self._log_request(f"release-{how}", held.link, held.rule, held.header)
            if not held.released.done():
                held.released.set_result(how)
        return {"released": len(chosen), "on_new_connection": len(elsewhere), "answered": answered}

    async def _send_on_new_connection(self, entries: list[Held]) -> int:
        """Write ``entries`` on a fresh upstream connection; how many answers came (logged, dropped)."""
        reader, writer = await asyncio.open_connection(*self.upstream_address)
        answered = 0
        try:
            writer.write(b"".join(held.frame for held in entries))
            await writer.drain()
            async with asyncio.timeout(ANSWER_TIMEOUT):
                while answered < len(entries):
                    payload = (await read_frame(reader))[4:]
                    answered += 1
                    self.log(
                        "answered",
                        conn=None,
                        correlation_id=response_correlation_id(payload),
                        response=payload.hex() if len(payload) <= MAX_LOGGED_RESPONSE else None,
                    )
        except (TimeoutError, asyncio.IncompleteReadError, FrameError, OSError) as error:
            self.log("answers-missing", expected=len(entries), answered=answered, error=type(error).__name__)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return answered

    # ---- the control channel ----------------------------------------------------------------

    async def execute(self, command: Command) -> dict[str, Any]:
        """Carry out one control command; the reply's fields (``ok`` added by the caller)."""
        if command.op in ACTIONS:
            rule = self.rules.add(
                command.op,
                command.api_keys,
                command.client,
                command.count,
                command.delay_ms,
                command.disconnect,
                command.jitter_ms,
                command.ends,
            )
            self.log("rule-added", **rule.describe())
            return rule.describe()
        if command.op == "release":
            return await self.release(command.rule_id, command.mode)
        if command.op == "clear":
            removed = self.rules.clear()
            self.log("rules-cleared", removed=removed)
            return {"rules_removed": removed, **await self.release(None, command.mode)}
        now = time.monotonic()
        return {
            "rules": [rule.describe() for rule in self.rules.rules],
            "held": [
                {
                    "seq": held.seq,
                    "rule": held.rule.rule_id,
                    "api_key": held.header.api_key,
                    "correlation_id": held.header.correlation_id,
                    "client_id": held.header.client_id,
                    "held_ms": round((now - held.since) * 1000),
                }
                for held in self.held
            ],
            "connections": len(self.links),
        }

    async def _serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    reply = {"ok": True, **await self.execute(parse_command(line.decode("utf-8", "replace")))}
                except ControlError as error:
                    reply = {"error": str(error)}
                except OSError as error:  # a release could not reach the broker
                    reply = {
                        "error": f"upstream {self.upstream_address[0]}:{self.upstream_address[1]}: {error}"
                    }
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


async def serve(args: argparse.Namespace, log: TextIO) -> None:
    """Run a proxy until SIGTERM or SIGINT, announcing its addresses on stdout."""
    proxy = RequestProxy(host_port(args.listen), host_port(args.upstream), args.control, log)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):  # before the announcement: a stop may follow it at once
        loop.add_signal_handler(number, stop.set)
    addresses = await proxy.start()
    print(json.dumps(addresses), flush=True)
    try:
        await stop.wait()
    finally:
        await proxy.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.cluster.request_proxy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--listen", required=True, help="HOST:PORT the clients connect to (port 0: any)")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--control", required=True, help="HOST:PORT (TCP) or PATH (unix socket) for rules")
    parser.add_argument("--log", help="append the JSON action lines here (default: stderr)")
    args = parser.parse_args(argv)
    try:
        host_port(args.listen), host_port(args.upstream)
    except ValueError as error:
        parser.error(str(error))
    log = open(args.log, "a", encoding="utf-8") if args.log else sys.stderr  # noqa: SIM115 -- closed below
    try:
        asyncio.run(serve(args, log))
    except OSError as error:
        print(f"request_proxy: {error}", file=sys.stderr)
        return 2
    finally:
        if log is not sys.stderr:
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
