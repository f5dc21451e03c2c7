"""The group coordinator's APIs on the wire: the version ranges the two client libraries need.

Round trips of every group API at every version (every field set, and the minimal variant) are in
``test_wire.py``, which covers all of :data:`broker_impl.wire.APIS`; this file pins the ranges the
clients were measured to need, so that a narrowed range fails here with the reason.
"""

from __future__ import annotations

from broker_impl import wire

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
GROUP_KEYS = (OFFSET_COMMIT, OFFSET_FETCH, 10, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, 15, 16)


def test_group_api_ranges_cover_both_clients() -> None:
    ranges = {key: (wire.APIS[key].min_version, wire.APIS[key].max_version) for key in GROUP_KEYS}
    # librdkafka counts a broker as group-capable only with v0 of these (and OffsetFetch v1) ...
    assert all(ranges[key][0] == 0 for key in (JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP))
    assert ranges[OFFSET_FETCH][0] <= 1
    # ... and sends JoinGroup 5, SyncGroup 3, Heartbeat 3, LeaveGroup 1, OffsetCommit 8, OffsetFetch 8;
    # kafka-python caps JoinGroup at 7, SyncGroup at 5, OffsetCommit and OffsetFetch at 8.
    assert ranges[JOIN_GROUP] == (0, 7) and ranges[SYNC_GROUP] == (0, 5)
    assert ranges[OFFSET_COMMIT][1] == ranges[OFFSET_FETCH][1] == 8
    for key in GROUP_KEYS:
        api = wire.APIS[key]
        assert api.request.API_KEY == key == api.response.API_KEY
        assert api.max_version <= api.request.max_version
