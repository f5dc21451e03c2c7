"""The wire adapter over kafka-python's protocol codec: every API, every version, both ways.

kafka-python's ``kafka.protocol`` is not documented public API, so this file is the
guard rail the pin (``kafka-python>=3.0.12,<3.1``) relies on: each request and response
of every API in :data:`wire.APIS` is built at every supported version from the message
schema itself -- every field that exists at that version, tagged fields included, with
distinct values so that swapped or dropped fields show -- framed by the adapter, decoded
by the adapter, and compared.  A "minimal" variant (nulls and empty arrays) covers the
other encoding branches.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_impl import wire

from .batch_builder import make_batch

RECORDS = bytes(make_batch([b"first", b"second"], keys=[b"k", None]))
CASES = [
    (api, version) for api in wire.APIS.values() for version in range(api.min_version, api.max_version + 1)
]
CASE_IDS = [f"{api.request.__name__.removesuffix('Request')}-v{version}" for api, version in CASES]


class ValueMaker:
    """Builds a message with a value for every field present at ``version``.

    ``full``: every field set, every array with two elements, every value distinct.
    ``minimal``: nullable fields null, arrays empty -- the other branch of each codec.
    """

    def __init__(self, version: int, full: bool) -> None:
        self.version = version
        self.full = full
        self.counter = itertools.count(1)

    def fields(self, fields: Any) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field in fields.values():
            if not field.for_version_q(self.version):
                continue
            if field.tag is not None and not field.tagged_field_q(self.version):
                continue
            values[field.name] = self.value(field)
        return values

    def value(self, field: Any) -> Any:
        nullable = field.nullable_for_version_q(self.version)
        if not self.full and nullable:
            return None
        if field.is_struct_array():
            count = 2 if self.full else 0
            return [field.data_class(**self.fields(field.fields)) for _ in range(count)]
        if field.is_struct():
            return field.data_class(**self.fields(field.fields))
        if field.is_array():
            if not self.full:
                return []
            return [self.scalar(field.array_of.type_str) for _ in range(3)]
        return self.scalar(field.type_str)

    def scalar(self, type_name: str) -> Any:
        number = next(self.counter)
        if type_name == "int8":
            return number % 100
        if type_name == "int16":
            return 1000 + number
        if type_name in ("int32", "uint16"):
            return 100_000 + number if type_name == "int32" else 40_000 + number
        if type_name == "int64":
            return 2**40 + number
        if type_name == "bool":
            return number % 2 == 1
        if type_name == "string":
            return f"s{number}-ü"
        if type_name == "uuid":
            return uuid.UUID(int=number)
        if type_name == "records":
            return RECORDS
        if type_name == "bytes":
            return bytes([number % 256]) * 3
        if type_name == "float64":
            return number + 0.5
        if type_name == "bitfield":  # authorized-operations sets (Metadata v8+)
            return {number % 31, (number + 3) % 31}
        raise AssertionError(f"no sample value for schema type {type_name!r}")


def build(message_class: Any, version: int, full: bool) -> Any:
    values = ValueMaker(version, full).fields(message_class._struct.fields)
    if message_class is wire.APIS[wire.API_VERSIONS_KEY].response:
        # A non-zero error code means "v0 body" to every ApiVersions reader (tested below).
        values["error_code"] = wire.NONE
    return message_class(version=version, **values)


# ---- the versions we advertise are the ones the issue and both clients need ------------------


def test_advertised_version_ranges() -> None:
    ranges = {key: (api.min_version, api.max_version) for key, api in wire.APIS.items()}
    assert ranges[18] == (0, 4)  # ApiVersions
    assert ranges[3] == (0, 12)  # Metadata, with per-partition leader epoch from v7
    assert ranges[0] == (3, 10)  # Produce
    assert ranges[1] == (4, 12)  # Fetch: 13+ names topics by UUID only
    assert ranges[2] == (1, 9)  # ListOffsets
    assert ranges[22] == (0, 4)  # InitProducerId
    assert {23, 10, 19} <= set(ranges)  # OffsetForLeaderEpoch, FindCoordinator, CreateTopics
    for key, api in wire.APIS.items():
        assert api.request.API_KEY == key == api.response.API_KEY
        assert api.max_version <= api.request.max_version  # kafka-python knows every version we offer


# ---- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("full", [True, False], ids=["full", "minimal"])
@pytest.mark.parametrize(("api", "version"), CASES, ids=CASE_IDS)
def test_request_round_trip(api: wire.Api, version: int, full: bool) -> None:
    message = build(api.request, version, full)
    frame = wire.encode_request(message, correlation_id=123456, client_id="tidemark-ü")
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    decoded = wire.decode_request(frame[4:])
    assert decoded.api is api
    assert decoded.version == version
    assert decoded.correlation_id == 123456
    assert decoded.client_id == "tidemark-ü"
    assert decoded.body == message
    assert wire.peek_header(frame[4:]) == (api.key, version, 123456)


@pytest.mark.parametrize("full", [True, False], ids=["full", "minimal"])
@pytest.mark.parametrize(("api", "version"), CASES, ids=CASE_IDS)
def test_response_round_trip(api: wire.Api, version: int, full: bool) -> None:
    request = wire.Request(api, version, 987654, "client", None)
    body = build(api.response, version, full)
    frame = wire.encode_response(request, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    correlation_id, decoded = wire.decode_response(api.response, version, frame[4:])
    assert correlation_id == 987654
    assert decoded == body


def test_response_built_through_the_adapter_has_the_request_version() -> None:
    request = wire.Request(wire.APIS[22], 3, 1, None, None)
    body = wire.response(request, throttle_time_ms=0, error_code=0, producer_id=1000, producer_epoch=0)
    _, decoded = wire.decode_response(wire.APIS[22].response, 3, wire.encode_response(request, body)[4:])
    assert (decoded.producer_id, decoded.producer_epoch) == (1000, 0)


def test_nested_looks_up_struct_classes() -> None:
    partition_class = wire.nested(wire.APIS[0].response, "TopicProduceResponse", "PartitionProduceResponse")
    assert "base_offset" in partition_class.fields


# ---- ApiVersions: the version-negotiation special cases -------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_response_header_is_never_flexible(version: int) -> None:
    """From v3 the request header is flexible but the response header stays v0; a tagged
    field byte after the correlation id makes librdkafka abort (FIELD-NOTES)."""
    request = wire.Request(wire.APIS[18], version, 77, None, object())
    frame = wire.encode_response(request, wire.api_versions_response(request))
    assert frame[4:8] == struct.pack(">i", 77)
    assert frame[8:10] == struct.pack(">h", wire.NONE)  # the body's error code follows at once


@pytest.mark.parametrize("version", [5, 127, -1])
def test_unsupported_api_versions_version_gets_error_35_with_a_v0_body(version: int) -> None:
    payload = struct.pack(">hhi", 18, version, 42) + b"\xff\xff"  # whatever follows is not decoded
    request = wire.decode_request(payload)
    assert request.body is None
    frame = wire.encode_response(request, wire.api_versions_response(request))
    correlation_id, decoded = wire.decode_response(wire.APIS[18].response, 0, frame[4:])
    assert correlation_id == 42
    assert decoded.error_code == wire.UNSUPPORTED_VERSION == 35
    offered = {entry.api_key: (entry.min_version, entry.max_version) for entry in decoded.api_keys}
    assert offered == {key: (api.min_version, api.max_version) for key, api in wire.APIS.items()}


def test_supported_api_versions_lists_every_api() -> None:
    api = wire.APIS[18]
    message = api.request(version=4, client_software_name="c", client_software_version="1")
    request = wire.decode_request(wire.encode_request(message, 1, "c")[4:])
    response = wire.api_versions_response(request)
    assert response.error_code == 0
    assert {entry.api_key for entry in response.api_keys} == set(wire.APIS)


# ---- garbage is a ProtocolError, never anything else ----------------------------------------------


def valid_frames() -> list[bytes]:
    return [wire.encode_request(build(api.request, version, True), 1, "c")[4:] for api, version in CASES]


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x00\x00"], ids=["0", "1", "7"])
def test_payload_shorter_than_a_header(payload: bytes) -> None:
    with pytest.raises(wire.ProtocolError, match="shorter than a header"):
        wire.decode_request(payload)


def test_unknown_api_key() -> None:
    # 4 is LeaderAndIsr, a ZooKeeper-era inter-broker API this broker never serves.
    with pytest.raises(wire.ProtocolError, match="unsupported API key 4"):
        wire.decode_request(struct.pack(">hhi", 4, 0, 1))


@pytest.mark.parametrize(("key", "version"), [(0, 2), (0, 11), (1, 3), (1, 13), (3, 13), (2, 0)])
def test_unsupported_version_of_other_apis(key: int, version: int) -> None:
    with pytest.raises(wire.ProtocolError, match=f"unsupported version {version} of API {key}"):
        wire.decode_request(struct.pack(">hhi", key, version, 1) + b"\x00" * 64)


def test_every_truncation_of_every_valid_request_is_refused_or_decoded() -> None:
    """Nothing but :class:`ProtocolError` may escape.  Most prefixes are refused; kafka-python's
    string and bytes decoders accept a value cut short at the very end of a frame (a trailing
    topic name, rack id or records blob), so such a prefix decodes to a request with a
    shorter last value -- the broker's batch validation then refuses cut records."""
    refused = 0
    for payload in valid_frames():
        for length in range(len(payload)):
            try:
                request = wire.decode_request(payload[:length])
            except wire.ProtocolError:
                refused += 1
                continue
            assert request.body != wire.decode_request(payload).body
    assert refused > 0.9 * sum(len(payload) for payload in valid_frames())


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(range(len(CASES))), st.data())
def test_mutated_requests_decode_or_raise_protocol_error(index: int, data: st.DataObject) -> None:
    api, version = CASES[index]
    payload = bytearray(wire.encode_request(build(api.request, version, True), 1, "c")[4:])
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        position = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
        payload[position] = data.draw(st.integers(min_value=0, max_value=255))
    with contextlib.suppress(wire.ProtocolError):
        wire.decode_request(bytes(payload))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(wire.APIS)), st.integers(min_value=-2, max_value=20), st.binary(max_size=300))
def test_random_bodies_decode_or_raise_protocol_error(key: int, version: int, body: bytes) -> None:
    with contextlib.suppress(wire.ProtocolError):
        wire.decode_request(struct.pack(">hhi", key, version, 7) + body)


# ---- framing ----------------------------------------------------------------------------------


def read_frame_from(data: bytes) -> bytes:
    async def read() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await wire.read_frame(reader)

    return asyncio.run(read())


def test_read_frame() -> None:
    assert read_frame_from(struct.pack(">i", 3) + b"abcdef") == b"abc"
    with pytest.raises(wire.ProtocolError, match="frame size -1 out of range"):
        read_frame_from(struct.pack(">i", -1))
    with pytest.raises(wire.ProtocolError, match="out of range"):
        read_frame_from(struct.pack(">i", wire.MAX_FRAME_BYTES + 1))
    with pytest.raises(asyncio.IncompleteReadError):
        read_frame_from(struct.pack(">i", 10) + b"short")
