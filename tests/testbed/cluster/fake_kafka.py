"""A tiny fake Kafka listener on 127.0.0.1 for tests of what the harness does with a bad cluster.

It speaks the real wire protocol through :mod:`broker_impl.wire` (the bundled broker's
codec), one thread per connection, and answers as told: ApiVersions with chosen
ranges, Metadata naming itself as the only broker and the controller, CreateTopics with
a chosen error (``advertised_port``: Metadata names another port, as a broker with a
wrong ``advertised.listeners`` does).  Or it misbehaves at the TCP level: ``close`` (accept, then close),
``garbage`` (answer the first request with an HTTP error), ``silent`` (never answer).
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from types import TracebackType
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from broker_impl import wire

BEHAVIOURS = ("kafka", "close", "garbage", "silent")

OLD_KAFKA_RANGES = {0: (0, 2), 1: (0, 3), 2: (0, 0), 3: (0, 1), 18: (0, 0), 19: (0, 1)}
"""ApiVersions of a Kafka 0.10.1-era broker: no Produce v3, Fetch v4, ListOffsets v1, CreateTopics v2."""


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        fake = self.server.fake
        if fake.behaviour == "close":
            return
        while True:
            header = _receive_exactly(self.request, 4)
            if header is None:
                return
            payload = _receive_exactly(self.request, struct.unpack(">i", header)[0])
            if payload is None:
                return
            if fake.behaviour == "garbage":
                self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                return
            if fake.behaviour == "silent":
                continue
            request = wire.decode_request(payload)
            with fake.lock:
                fake.requests.append(request)
            self.request.sendall(wire.encode_response(request, fake.answer(request)))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeKafka


class FakeKafka:
    """``with FakeKafka(...) as fake:`` -- listening at ``fake.address`` until the block ends."""

    def __init__(
        self,
        behaviour: str = "kafka",
        *,
        ranges: dict[int, tuple[int, int]] | None = None,
        create_topics_error: tuple[int, str | None] | None = None,
        advertised_port: int | None = None,
        port: int = 0,
    ) -> None:
        assert behaviour in BEHAVIOURS, behaviour
        self.behaviour = behaviour
        self.ranges = ranges or {api.key: (api.min_version, api.max_version) for api in wire.APIS.values()}
        self.create_topics_error = create_topics_error or (wire.NONE, None)
        self.requests: list[wire.Request] = []
        self.lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.fake = self
        self.port: int = self._server.server_address[1]
        self.advertised_port = advertised_port or self.port
        self.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-kafka", daemon=True)

    def __enter__(self) -> FakeKafka:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def answer(self, request: wire.Request) -> Any:
        key = request.api.key
        if key == wire.API_VERSIONS_KEY:
            api_keys = [
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=low, max_version=high)
                for k, (low, high) in sorted(self.ranges.items())
            ]
            return ApiVersionsResponse(
                version=request.version, error_code=0, api_keys=api_keys, throttle_time_ms=0
            )
        if key == 3:
            broker_class = wire.nested(request.api.response, "MetadataResponseBroker")
            return wire.response(
                request,
                throttle_time_ms=0,
                brokers=[broker_class(node_id=1, host="127.0.0.1", port=self.advertised_port, rack=None)],
                cluster_id="fake",
                controller_id=1,
                topics=[],
            )
        if key == 19:
            result_class = wire.nested(request.api.response, "CreatableTopicResult")
            code, message = self.create_topics_error
            return wire.response(
                request,
                throttle_time_ms=0,
                topics=[
                    result_class(name=topic.name, error_code=code, error_message=message)
                    for topic in request.body.topics
                ],
            )
        raise AssertionError(f"the fake broker does not answer API {key}")
