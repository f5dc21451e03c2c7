"""The request proxy's frame reading, rule matching and control lines (no sockets)."""

from __future__ import annotations

import random
import struct

import pytest

from testbed.cluster.request_proxy.rules import (
    API_NAMES,
    ControlError,
    FrameError,
    RequestHeader,
    RuleBook,
    api_key_of,
    frame_size,
    parse_command,
    parse_request_header,
    response_correlation_id,
)


def request_payload(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: bytes = b""
) -> bytes:
    if client_id is None:
        return struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    encoded = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(encoded)) + encoded + body


def end_txn_body(
    version: int, committed: bool, transactional_id: str = "txn-1", tags: bytes = b"\x00"
) -> bytes:
    """An EndTxn body after the client id: in flexible versions (3+) the header's tagged fields,
    then a compact transactional id; before them an int16-length one."""
    encoded = transactional_id.encode()
    if version >= 3:
        head = tags + bytes([len(encoded) + 1]) + encoded
    else:
        head = struct.pack(">h", len(encoded)) + encoded
    tail = b"\x00" if version >= 3 else b""  # the body's own tagged fields
    return head + struct.pack(">qh?", 4711, 3, committed) + tail


@pytest.mark.parametrize("version", [0, 2, 3, 4, 5])
def test_an_end_txn_says_whether_it_commits_or_aborts(version: int) -> None:
    for committed, ending in ((True, "commit"), (False, "abort")):
        payload = request_payload(26, version, 9, "txn-producer", end_txn_body(version, committed))
        assert parse_request_header(payload) == RequestHeader(26, version, 9, "txn-producer", ending)
    # a null client id, and header tags before the body (a tag of 2 bytes, then none more)
    tagged = end_txn_body(version, True, tags=b"\x01\x00\x02ab")
    if version >= 3:
        assert parse_request_header(request_payload(26, version, 1, None, tagged)).ending == "commit"
    # a body cut short says nothing (the broker refuses it); no other request reads its body
    for cut in range(len(end_txn_body(version, True)) - (2 if version >= 3 else 1)):
        short = request_payload(26, version, 1, "c", end_txn_body(version, True)[:cut])
        assert parse_request_header(short).ending is None
    assert (
        parse_request_header(request_payload(0, version, 1, "c", end_txn_body(version, True))).ending is None
    )


def test_a_rule_on_an_ending_matches_only_end_txns_that_end_so() -> None:
    book = RuleBook()
    commits = book.add("hold", frozenset({26}), None, 1, 0, ends="commit")
    assert commits.describe()["ends"] == "commit"
    assert book.take(RequestHeader(26, 5, 1, "p", "abort")) is None
    assert book.take(RequestHeader(26, 5, 2, "p", None)) is None  # unreadable: not known to commit
    assert book.take(RequestHeader(26, 5, 3, "p", "commit")) is commits
    assert book.rules == []  # spent
    every = book.add("hold", frozenset({26}), None, None, 0)
    assert "ends" not in every.describe()
    assert book.take(RequestHeader(26, 5, 4, "p", "abort")) is every


def test_header_of_a_request_with_and_without_client_id() -> None:
    assert parse_request_header(request_payload(0, 9, 7, "txn-producer", b"\x00body")) == RequestHeader(
        0, 9, 7, "txn-producer"
    )
    assert parse_request_header(request_payload(26, 4, -3, None)) == RequestHeader(26, 4, -3, None)
    assert parse_request_header(request_payload(18, 3, 1, "")) == RequestHeader(18, 3, 1, "")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x00\x00\x00", "shorter than a header"),
        (struct.pack(">hhih", 0, 9, 1, 20) + b"short", "runs past"),
    ],
)
def test_short_requests_are_frame_errors(payload: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        parse_request_header(payload)


def test_frame_size_and_response_correlation_id() -> None:
    assert frame_size(struct.pack(">i", 12)) == 12
    with pytest.raises(FrameError, match="out of range"):
        frame_size(struct.pack(">i", -1))
    with pytest.raises(FrameError, match="out of range"):
        frame_size(struct.pack(">i", 2000), limit=1000)
    with pytest.raises(FrameError, match="3 bytes"):
        frame_size(b"\x00\x00\x00")
    assert response_correlation_id(struct.pack(">i", 42) + b"rest") == 42
    with pytest.raises(FrameError, match="no correlation id"):
        response_correlation_id(b"\x01")


def test_api_keys_by_number_or_name() -> None:
    assert api_key_of("Produce") == 0
    assert api_key_of("EndTxn") == 26 == API_NAMES["EndTxn"]
    assert api_key_of(22) == 22
    for bad in ("produce", True, -1, 40000, 1.5):
        with pytest.raises(ControlError, match="api_key"):
            api_key_of(bad)


def test_the_first_live_rule_wins_and_a_counted_rule_is_spent() -> None:
    book = RuleBook()
    held = book.add("hold", frozenset({0}), "txn", 1, 0)
    duplicated = book.add("duplicate", frozenset({0, 26}), None, None, 0)
    produce = RequestHeader(0, 9, 1, "txn-producer-1")
    assert book.take(produce) is held
    assert book.rules == [duplicated]  # spent after one use
    assert book.take(produce) is duplicated
    assert book.take(RequestHeader(26, 3, 2, None)) is duplicated
    assert duplicated.remaining is None
    assert book.take(RequestHeader(1, 12, 3, "txn")) is None  # Fetch: no rule names it


def test_delays_add_up_and_leave_the_request_to_the_other_rules() -> None:
    book = RuleBook()
    slow = book.add("delay", None, None, None, 50)  # every request
    slower = book.add("delay", frozenset({0}), None, 1, 200)
    reset = book.add("reset", frozenset({0}), None, 1, 0)
    produce = RequestHeader(0, 9, 1, "p")
    assert book.latency(produce) == (250, [slow, slower])
    assert book.take(produce) is reset  # a delayed request still meets the other rules
    assert book.latency(produce) == (50, [slow])  # the counted delay is spent
    assert book.take(produce) is None
    assert book.latency(RequestHeader(1, 12, 2, None)) == (50, [slow])


def test_a_jittered_delay_draws_each_request_s_wait_within_its_range() -> None:
    book = RuleBook(random.Random(7))
    slow = book.add("delay", None, None, None, 50)
    jittered = book.add("delay", None, None, None, 200, jitter_ms=150)
    fetch = RequestHeader(1, 12, 1, "follower")
    waits = [book.latency(fetch)[0] for _ in range(400)]
    assert all(50 + 50 <= wait <= 50 + 350 for wait in waits), (min(waits), max(waits))
    assert min(waits) < 120 and max(waits) > 380, "the draws span the range"
    assert book.latency(fetch)[1] == [slow, jittered]
    assert jittered.describe()["jitter"] == 150 and "jitter" not in slow.describe()
    # The same seed, the same waits; without a jitter, no draw at all.
    again = RuleBook(random.Random(7))
    again.add("delay", None, None, None, 50)
    again.add("delay", None, None, None, 200, jitter_ms=150)
    assert [again.latency(fetch)[0] for _ in range(400)] == waits


def test_a_client_rule_matches_a_substring_and_never_a_null_client_id() -> None:
    book = RuleBook()
    rule = book.add("drop", frozenset({0}), "producer-2", 2, 0)
    assert book.take(RequestHeader(0, 9, 1, None)) is None
    assert book.take(RequestHeader(0, 9, 1, "rdkafka-producer-1")) is None
    assert book.take(RequestHeader(0, 9, 1, "rdkafka-producer-2")) is rule
    assert rule.remaining == 1
    assert book.clear() == 1
    assert book.take(RequestHeader(0, 9, 1, "rdkafka-producer-2")) is None


def test_control_lines() -> None:
    hold = parse_command('{"op": "hold", "api_key": ["Produce", 26], "client": "txn", "count": 1}')
    assert (hold.op, hold.api_keys, hold.client, hold.count) == ("hold", frozenset({0, 26}), "txn", 1)
    delay = parse_command('{"op": "delay", "api_key": "Produce", "ms": 250}')
    assert (delay.delay_ms, delay.count, delay.jitter_ms) == (250, None, 0)
    jittered = parse_command('{"op": "delay", "api_key": "*", "ms": 250, "jitter": 250}')
    assert (jittered.api_keys, jittered.delay_ms, jittered.jitter_ms) == (None, 250, 250)
    release = parse_command('{"op": "release", "mode": "original", "rule": 3}')
    assert (release.op, release.mode, release.rule_id) == ("release", "original", 3)
    assert parse_command('{"op": "release"}').mode == "new-connection"
    assert parse_command('{"op": "hold", "api_key": 0, "disconnect": true}').disconnect
    assert not parse_command('{"op": "hold", "api_key": 0}').disconnect
    assert parse_command('{"op": "clear"}').op == "clear"
    assert parse_command('{"op": "status"}').op == "status"
    ending = parse_command('{"op": "hold", "api_key": "EndTxn", "ends": "commit", "count": 1}')
    assert (ending.api_keys, ending.ends, ending.count) == (frozenset({26}), "commit", 1)
    assert parse_command('{"op": "reset", "api_key": 26, "ends": null}').ends is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("hold Produce", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"op": "freeze", "api_key": 0}', "op 'freeze'"),
        ('{"op": "hold"}', "api_key is required"),
        ('{"op": "hold", "api_key": []}', "empty list"),
        ('{"op": "hold", "api_key": 0, "count": 0}', "count 0"),
        ('{"op": "hold", "api_key": 0, "client": ""}', "client ''"),
        ('{"op": "delay", "api_key": 0}', "ms is required"),
        ('{"op": "delay", "api_key": 0, "ms": -5}', "ms -5"),
        ('{"op": "release", "mode": "later"}', "mode 'later'"),
        ('{"op": "clear", "mode": 1}', "mode 1"),
        ('{"op": "hold", "api_key": 0, "key": 1}', "unknown field 'key'"),
        ('{"op": "drop", "api_key": 0, "disconnect": true}', "only for hold"),
        ('{"op": "hold", "api_key": 0, "disconnect": 1}', "disconnect 1"),
        ('{"op": "delay", "api_key": 0, "ms": 100, "jitter": 101}', r"jitter 101: .* at most its ms \(100\)"),
        ('{"op": "hold", "api_key": 0, "jitter": 10}', "jitter 10: only for delay"),
        ('{"op": "delay", "api_key": 0, "ms": 100, "jitter": -1}', "jitter -1"),
        ('{"op": "hold", "api_key": "EndTxn", "ends": "later"}', "ends 'later': 'commit' or 'abort'"),
        ('{"op": "hold", "api_key": ["EndTxn", 0], "ends": "commit"}', "only with api_key EndTxn alone"),
        ('{"op": "hold", "api_key": "*", "ends": "abort"}', "only with api_key EndTxn alone"),
    ],
)
def test_bad_control_lines_name_what_is_wrong_in_one_line(line: str, message: str) -> None:
    with pytest.raises(ControlError, match=message) as raised:
        parse_command(line)
    assert "\n" not in str(raised.value)
