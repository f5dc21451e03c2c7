"""The request proxy against a fake broker: each action, release modes, control errors, shutdown.

The fake broker answers every request frame with its correlation id and the number of the
connection it came on, and records (connection, api key, correlation id) -- so a test sees where a
held request really arrived.  The proxy runs in the test's event loop; one test starts it as a
process, as it runs next to a broker.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from testbed.cluster.request_proxy.control import ProxyControl, ProxyControlError, read_actions, spawn_proxy
from testbed.cluster.request_proxy.proxy import RequestProxy, read_frame
from testbed.cluster.request_proxy.rules import RuleBook, parse_command
from tests.testbed.cluster.test_request_rules import end_txn_body, request_payload

pytestmark = pytest.mark.timeout(60)


class FakeBroker:
    """Answers each request with ``correlation id, connection number``; remembers what came where."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []  # (connection, api key, correlation id)
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                frame = await read_frame(reader)
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                self.seen.append((number, api_key, correlation_id))
                writer.write(struct.pack(">iii", 8, correlation_id, number))
                await writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


def request(api_key: int, correlation_id: int, client_id: str = "client-1") -> bytes:
    payload = request_payload(api_key, 9, correlation_id, client_id, b"body")
    return struct.pack(">i", len(payload)) + payload


async def answer(reader: asyncio.StreamReader, timeout: float = 5.0) -> tuple[int, int]:
    """(correlation id, fake-broker connection number) of the next response."""
    frame = await asyncio.wait_for(read_frame(reader), timeout)
    correlation_id, connection = struct.unpack_from(">ii", frame, 4)
    return correlation_id, connection


Scenario = Callable[[RequestProxy, FakeBroker, str], Awaitable[None]]


def run(scenario: Scenario, tmp_path: Path) -> list[dict[str, object]]:
    """Run ``scenario`` against a started proxy and fake broker; the proxy's log lines.  After the
    proxy closed, no task of it may be left running."""
    log = io.StringIO()

    async def main() -> None:
        broker = FakeBroker()
        upstream = await broker.start()
        host, port = upstream.rsplit(":", 1)
        proxy = RequestProxy(("127.0.0.1", 0), (host, int(port)), str(tmp_path / "control.sock"), log)
        addresses = await proxy.start()
        try:
            await scenario(proxy, broker, addresses["listen"])
        finally:
            await proxy.close()
            await broker.close()
        # the fake broker's handlers end when the proxy's upstream connections close; nothing else may run
        await until(lambda: asyncio.all_tasks() == {asyncio.current_task()})
        assert not (tmp_path / "control.sock").exists()

    asyncio.run(main())
    return [json.loads(line) for line in log.getvalue().splitlines()]


async def connect(listen: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = listen.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def command(proxy: RequestProxy, line: str) -> dict[str, object]:
    return await proxy.execute(parse_command(line))


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_requests_pass_untouched_without_rules(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        reader, writer = await connect(listen)
        writer.write(request(3, 1) + request(0, 2))
        assert [await answer(reader), await answer(reader)] == [(1, 1), (2, 1)]
        writer.close()

    assert run(scenario, tmp_path) == []


def test_delay_holds_the_connection_for_its_milliseconds(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "delay", "api_key": "Produce", "ms": 300, "count": 1}')
        reader, writer = await connect(listen)
        started = time.monotonic()
        writer.write(request(0, 1) + request(3, 2))
        assert await answer(reader) == (1, 1)
        assert time.monotonic() - started >= 0.3
        assert await answer(reader) == (2, 1)  # not overtaken
        writer.close()

    actions = run(scenario, tmp_path)
    assert [line["action"] for line in actions] == ["rule-added", "delay"]
    assert actions[1]["api_key"] == 0 and actions[1]["correlation_id"] == 1
    assert actions[1]["client_id"] == "client-1"


class ScriptedDraws(random.Random):
    """The jitter draws a test chose, in order (``randint`` is what the rule book draws with)."""

    def __init__(self, draws: list[int]) -> None:
        super().__init__()
        self.draws = draws

    def randint(self, a: int, b: int) -> int:
        draw = self.draws.pop(0)
        assert a <= draw <= b
        return draw


def test_a_jittered_delay_reorders_requests_across_connections_never_within_one(tmp_path: Path) -> None:
    """A's request arrives first but draws the longest wait: B's, sent after it on another
    connection, reaches the broker first. A's second request draws the shortest wait and still
    arrives after A's first (a connection keeps its order, as TCP does)."""

    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        proxy.rules = RuleBook(ScriptedDraws([+200, -200, -150]))  # waits of 400, 0 and 50 ms
        await command(proxy, '{"op": "delay", "api_key": "*", "ms": 200, "jitter": 200}')
        reader_a, writer_a = await connect(listen)
        reader_b, writer_b = await connect(listen)
        writer_a.write(request(0, 1, "a"))
        await until(lambda: any(line for line in log_lines(proxy) if line.get("correlation_id") == 1))
        writer_b.write(request(0, 2, "b"))
        await until(lambda: any(line for line in log_lines(proxy) if line.get("correlation_id") == 2))
        writer_a.write(request(3, 3, "a"))
        assert (await answer(reader_b))[0] == 2
        assert [(await answer(reader_a))[0], (await answer(reader_a))[0]] == [1, 3]
        assert [seen[2] for seen in broker.seen] == [2, 1, 3]  # B overtook A; A kept its order
        writer_a.close()
        writer_b.close()

    actions = run(scenario, tmp_path)
    delays = [(line["correlation_id"], line["ms"]) for line in actions if line["action"] == "delay"]
    assert delays == [(1, 400), (2, 0), (3, 50)]
    assert actions[0]["jitter"] == 200


def log_lines(proxy: RequestProxy) -> list[dict[str, object]]:
    """The proxy's log so far (its stream is the StringIO :func:`run` gave it)."""
    stream = proxy.log_file
    assert isinstance(stream, io.StringIO)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_observe_logs_each_request_and_forwards_it(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "observe", "api_key": ["Produce", "EndTxn"], "client": "client-1"}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1) + request(3, 2) + request(26, 3) + request(26, 4, "client-2"))
        assert [await answer(reader) for _ in range(4)] == [(1, 1), (2, 1), (3, 1), (4, 1)]
        writer.close()

    actions = run(scenario, tmp_path)
    observed = [(line["api_key"], line["api_version"], line["correlation_id"]) for line in actions[1:]]
    assert observed == [(0, 9, 1), (26, 9, 3)]
    assert {line["action"] for line in actions[1:]} == {"observe"}


def test_drop_closes_the_client_connection_and_nothing_reaches_the_broker(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "drop", "api_key": 26, "client": "txn", "count": 1}')
        reader, writer = await connect(listen)
        writer.write(request(26, 5, "other"))  # another client id: passes
        assert await answer(reader) == (5, 1)
        writer.write(request(26, 6, "txn-producer"))
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the proxy
        reader, writer = await connect(listen)  # the retry passes: the rule is spent
        writer.write(request(26, 7, "txn-producer"))
        assert await answer(reader) == (7, 2)
        writer.close()
        assert [seen[2] for seen in broker.seen] == [5, 7]

    assert [line["action"] for line in run(scenario, tmp_path)] == ["rule-added", "drop"]


def test_duplicate_sends_twice_and_swallows_the_second_answer(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "duplicate", "api_key": "Produce"}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1) + request(3, 2))
        assert [await answer(reader), await answer(reader)] == [(1, 1), (2, 1)]
        assert broker.seen == [(1, 0, 1), (1, 0, 1), (1, 3, 2)]
        writer.close()

    actions = [line["action"] for line in run(scenario, tmp_path)]
    assert actions == ["rule-added", "duplicate", "swallow"]


def test_reset_forwards_then_resets_the_client_and_the_broker_still_answers(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "reset", "api_key": "Produce", "count": 1}')
        reader, writer = await connect(listen)
        writer.write(request(3, 1))
        assert await answer(reader) == (1, 1)
        writer.write(request(0, 2) + request(3, 3))  # the Metadata behind it is lost with the connection
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(read_frame(reader), 5)  # reset: no answer, the connection failed
        await until(lambda: (1, 0, 2) in broker.seen)  # ... but the Produce reached the broker
        await until(lambda: not proxy.links)  # the link ends once the broker answered it
        reader, writer = await connect(listen)  # the retry passes: the rule is spent
        writer.write(request(0, 4))
        assert await answer(reader) == (4, 2)
        writer.close()
        assert [seen[2] for seen in broker.seen] == [1, 2, 4]

    actions = [line["action"] for line in run(scenario, tmp_path)]
    assert actions == ["rule-added", "reset", "answered-after-reset"]


def test_a_rule_for_every_request_matches_any_api_key(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        added = await command(proxy, '{"op": "delay", "api_key": "*", "ms": 100}')
        assert added["api_keys"] == "*"
        reader, writer = await connect(listen)
        started = time.monotonic()
        writer.write(request(3, 1) + request(1, 2) + request(9999, 3))
        assert [await answer(reader) for _ in range(3)] == [(1, 1), (2, 1), (3, 1)]
        assert time.monotonic() - started >= 0.3  # each one waited, in order
        writer.close()

    actions = run(scenario, tmp_path)
    assert [line["action"] for line in actions] == ["rule-added", "delay", "delay", "delay"]


def test_a_held_request_released_on_a_new_connection_arrives_after_the_client_moved_on(
    tmp_path: Path,
) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": "Produce", "count": 1}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1) + request(3, 2))
        await until(lambda: len(proxy.held) == 1)
        assert broker.seen == []  # the Metadata behind it waits too
        writer.close()  # the client gives up on this connection ...
        await until(lambda: not proxy.links)
        reader, writer = await connect(listen)  # ... and moves on on a new one
        writer.write(request(0, 3))
        assert await answer(reader) == (3, 2)
        status = await command(proxy, '{"op": "status"}')
        assert [held["correlation_id"] for held in status["held"]] == [1]  # type: ignore[attr-defined]
        reply = await command(proxy, '{"op": "release"}')
        assert reply == {"released": 1, "on_new_connection": 1, "answered": 1}
        assert broker.seen == [(2, 0, 3), (3, 0, 1)]  # the late Produce came last, on its own connection
        writer.close()

    actions = [line["action"] for line in run(scenario, tmp_path)]
    assert actions == ["rule-added", "hold", "answered", "release-new-connection"]


def test_hold_with_disconnect_makes_the_client_retry_while_the_first_copy_waits(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": "Produce", "count": 1, "disconnect": true}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1))
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the connection failed under it
        writer.close()
        reader, writer = await connect(listen)
        writer.write(request(0, 1))  # the client's retry
        assert await answer(reader) == (1, 2)
        assert (await command(proxy, '{"op": "release", "mode": "original"}'))["on_new_connection"] == 1
        assert broker.seen == [(2, 0, 1), (3, 0, 1)]  # the retry, then the held copy
        writer.close()

    actions = [line["action"] for line in run(scenario, tmp_path)]
    assert actions == ["rule-added", "hold", "disconnect", "answered", "release-new-connection"]


def test_a_held_request_released_on_its_own_connection_is_answered_in_order(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": ["EndTxn"], "count": 1}')
        reader, writer = await connect(listen)
        writer.write(request(26, 1) + request(3, 2))
        await until(lambda: len(proxy.held) == 1)
        reply = await command(proxy, '{"op": "release", "mode": "original"}')
        assert reply == {"released": 1, "on_new_connection": 0, "answered": 0}
        assert [await answer(reader), await answer(reader)] == [(1, 1), (2, 1)]
        writer.close()

    assert [line["action"] for line in run(scenario, tmp_path)] == ["rule-added", "hold", "release-original"]


def test_a_hold_on_commits_lets_aborts_pass_and_holds_the_next_commit(tmp_path: Path) -> None:
    def end_txn(correlation_id: int, committed: bool) -> bytes:
        payload = request_payload(26, 5, correlation_id, "txn-producer", end_txn_body(5, committed))
        return struct.pack(">i", len(payload)) + payload

    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": "EndTxn", "ends": "commit", "count": 1}')
        reader, writer = await connect(listen)
        writer.write(end_txn(1, False))
        assert await answer(reader) == (1, 1)  # an abort passes
        writer.write(end_txn(2, True) + end_txn(3, True))
        await until(lambda: len(proxy.held) == 1)
        assert broker.seen == [(1, 26, 1)]  # the commit is held, the one behind it waits
        await command(proxy, '{"op": "release", "mode": "original"}')
        assert [await answer(reader), await answer(reader)] == [(2, 1), (3, 1)]  # the rule was spent
        writer.close()

    actions = run(scenario, tmp_path)
    assert [(line["action"], line.get("ends")) for line in actions] == [
        ("rule-added", "commit"),
        ("hold", "commit"),
        ("release-original", "commit"),
    ]


def test_clear_removes_the_rules_and_releases_what_is_held(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": 0}')
        await command(proxy, '{"op": "drop", "api_key": 1}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1))
        await until(lambda: len(proxy.held) == 1)
        reply = await command(proxy, '{"op": "clear", "mode": "original"}')
        assert reply == {"rules_removed": 2, "released": 1, "on_new_connection": 0, "answered": 0}
        assert await answer(reader) == (1, 1)
        writer.write(request(0, 2) + request(1, 3))
        assert [await answer(reader), await answer(reader)] == [(2, 1), (3, 1)]
        writer.close()

    run(scenario, tmp_path)


def test_the_control_socket_answers_bad_lines_with_one_error_line(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "control.sock"))
        writer.write(b'{"op": "hold"}\nnot json\n{"op": "status"}\n')
        replies = [json.loads(await reader.readline()) for _ in range(3)]
        assert replies[0] == {"error": "hold: api_key is required (a number, a name, a list of them, or '*')"}
        assert replies[1]["error"].startswith("not JSON")
        assert replies[2] == {"ok": True, "rules": [], "held": [], "connections": 0}
        writer.close()

    run(scenario, tmp_path)


def test_garbage_and_a_dead_broker_close_only_that_client_connection(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        reader, writer = await connect(listen)
        writer.write(struct.pack(">i", -7))  # no frame has a negative size
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        reader, writer = await connect(listen)  # the proxy still serves
        writer.write(request(3, 1))
        assert await answer(reader) == (1, 2)
        writer.close()
        await broker.close()
        await until(lambda: not proxy.links)
        reader, writer = await connect(listen)  # the broker is gone: the client sees a close
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    actions = run(scenario, tmp_path)
    assert [line["action"] for line in actions] == ["upstream-refused"]


def test_closing_the_proxy_closes_held_connections(tmp_path: Path) -> None:
    async def scenario(proxy: RequestProxy, broker: FakeBroker, listen: str) -> None:
        await command(proxy, '{"op": "hold", "api_key": 0}')
        reader, writer = await connect(listen)
        writer.write(request(0, 1))
        await until(lambda: len(proxy.held) == 1)
        await proxy.close()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert broker.seen == []
        writer.close()

    run(scenario, tmp_path)


def test_the_proxy_as_a_process(tmp_path: Path) -> None:
    """Started as it runs on a node: announces its addresses, obeys, exits 0 on SIGTERM."""

    log = tmp_path / "proxy.jsonl"
    with pytest.raises(ProxyControlError, match="did not start"):
        spawn_proxy("127.0.0.1:0", "nowhere", "127.0.0.1:0", log)
    proxy = spawn_proxy("127.0.0.1:0", "127.0.0.1:9", str(tmp_path / "c.sock"), log)
    try:
        control: ProxyControl = proxy.control
        assert control.hold("EndTxn", client="txn", count=2)["rule"] == 1
        with pytest.raises(ProxyControlError, match="api_key 'Nope'"):
            control.hold("Nope")
        assert control.status()["rules"][0]["api_keys"] == [26]
        assert control.clear()["rules_removed"] == 1
    finally:
        assert proxy.stop() == 0
    assert not (tmp_path / "c.sock").exists()
    assert [line["action"] for line in read_actions(log)] == ["rule-added", "rules-cleared"]
