"""The group coordinator's APIs on the wire: every version both ways, and what a broker advertises.

``test_wire.py`` covers :data:`broker_impl.wire.APIS` (the replicated log's APIs); this file gives
:data:`broker_impl.wire.GROUP_APIS` the same round trips -- every field present at each version
set to a distinct value, and the minimal variant -- and checks that a broker's ApiVersions answer
lists both tables, at the ranges the clients were measured to need.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from broker_impl import wire

from .test_wire import build

CASES = [
    (api, version)
    for api in wire.GROUP_APIS.values()
    for version in range(api.min_version, api.max_version + 1)
]
CASE_IDS = [f"{api.request.__name__.removesuffix('Request')}-v{version}" for api, version in CASES]


def test_group_api_ranges_cover_both_clients() -> None:
    ranges = {key: (api.min_version, api.max_version) for key, api in wire.GROUP_APIS.items()}
    # librdkafka counts a broker as group-capable only with v0 of these (and OffsetFetch v1) ...
    assert all(ranges[key][0] == 0 for key in (11, 12, 13, 14))
    assert ranges[9][0] <= 1
    # ... and sends JoinGroup 5, SyncGroup 3, Heartbeat 3, LeaveGroup 1, OffsetCommit 8, OffsetFetch 8;
    # kafka-python caps JoinGroup at 7, SyncGroup at 5, OffsetCommit and OffsetFetch at 8.
    assert ranges[11] == (0, 7) and ranges[14] == (0, 5)
    assert ranges[8][1] == ranges[9][1] == 8
    for key, api in wire.GROUP_APIS.items():
        assert api.request.API_KEY == key == api.response.API_KEY
        assert api.max_version <= api.request.max_version
    assert not set(wire.GROUP_APIS) & set(wire.APIS)
    assert wire.SERVED_APIS == {**wire.APIS, **wire.GROUP_APIS}


@pytest.mark.parametrize("full", [True, False], ids=["full", "minimal"])
@pytest.mark.parametrize(("api", "version"), CASES, ids=CASE_IDS)
def test_request_round_trip(api: wire.Api, version: int, full: bool) -> None:
    message = build(api.request, version, full)
    frame = wire.encode_request(message, correlation_id=4321, client_id="group-ü")
    decoded = wire.decode_request(frame[4:], wire.SERVED_APIS)
    assert (decoded.api, decoded.version, decoded.correlation_id) == (api, version, 4321)
    assert decoded.body == message


@pytest.mark.parametrize("full", [True, False], ids=["full", "minimal"])
@pytest.mark.parametrize(("api", "version"), CASES, ids=CASE_IDS)
def test_response_round_trip(api: wire.Api, version: int, full: bool) -> None:
    request = wire.Request(api, version, 8765, "client", None)
    body = build(api.response, version, full)
    correlation_id, decoded = wire.decode_response(
        api.response, version, wire.encode_response(request, body)[4:]
    )
    assert correlation_id == 8765
    assert decoded == body


def test_the_log_only_table_still_refuses_group_apis() -> None:
    with pytest.raises(wire.ProtocolError, match="unsupported API key 11"):
        wire.decode_request(struct.pack(">hhi", 11, 5, 1))


def test_a_broker_advertises_every_served_api() -> None:
    api = wire.APIS[wire.API_VERSIONS_KEY]
    message = api.request(version=3, client_software_name="c", client_software_version="1")
    request = wire.decode_request(wire.encode_request(message, 1, "c")[4:], wire.SERVED_APIS)
    offered: dict[int, Any] = {
        entry.api_key: (entry.min_version, entry.max_version)
        for entry in wire.api_versions_response(request, wire.SERVED_APIS).api_keys
    }
    assert offered == {key: (api.min_version, api.max_version) for key, api in wire.SERVED_APIS.items()}
