"""The run record's event-log reader (``testbed.record.events``) and its contract with the writer.

The writer (``broker_impl.events``) and the reader live in rooms that may not import each other,
so the names, the format and the version are each side's own; these tests pin that the reader
reads exactly what the writer writes, and that it rejects what no crash explains.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_impl import events as writer
from broker_impl.events import EventLog
from testbed.record import events as reader
from testbed.record import rundir
from testbed.record.events import EventFormatError, read_event_file, read_events


def _file(tmp_path: Path, count: int = 4) -> list[str]:
    path = tmp_path / "written.jsonl"
    log = EventLog(path, 1)
    log.emit(writer.START, format=writer.FORMAT, schema_version=writer.SCHEMA_VERSION, role="broker")
    for index in range(count - 1):
        log.emit("hw", topic="t", partition=0, old_hw=index, new_hw=index + 1)
    log.close()
    return path.read_text(encoding="utf-8").splitlines()


def test_the_reader_reads_what_the_writer_writes(tmp_path: Path) -> None:
    """One fact per side, kept equal: the run directory names the collected files as the broker
    names them, and the reader accepts the format and version the writer stamps."""
    assert rundir.BROKER_EVENTS_FILE == writer.BROKER_EVENTS_FILE
    assert rundir.CONTROLLER_EVENTS_FILE == writer.CONTROLLER_EVENTS_FILE
    assert (reader.FORMAT, reader.SCHEMA_VERSION) == (writer.FORMAT, writer.SCHEMA_VERSION)
    assert (reader.START, reader.HEADER_FIELDS) == (writer.START, writer.HEADER_FIELDS)
    _file(tmp_path)
    found = read_event_file(tmp_path / "written.jsonl")
    assert [event["seq"] for event in found.events] == [0, 1, 2, 3]
    assert found.torn == [] and found.gaps == []


def test_damage_no_crash_explains_is_an_error_naming_the_line(tmp_path: Path) -> None:
    lines = _file(tmp_path)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], lines[1], "not json", lines[2], lines[3]]) + "\n")
    with pytest.raises(EventFormatError, match=r"bad\.jsonl:3: not an event"):
        read_events(path)
    path.write_text("\n".join([lines[0], lines[2], lines[1]]) + "\n")
    with pytest.raises(EventFormatError, match=r"bad\.jsonl:3: seq 1 after 2"):
        read_events(path)
    path.write_text(lines[0].replace('"schema_version":1', '"schema_version":2') + "\n")
    with pytest.raises(EventFormatError, match=r"bad\.jsonl:1: .*version 2"):
        read_events(path)
    path.write_text('{"ts":1,"node":1,"seq":"0","kind":"start"}\n' + lines[1] + "\n")
    with pytest.raises(EventFormatError, match=r"bad\.jsonl:1: not an event"):
        read_events(path)


def test_torn_lines_a_crash_explains_are_reported_not_raised(tmp_path: Path) -> None:
    lines = _file(tmp_path)
    path = tmp_path / "torn.jsonl"
    # A torn last line; a torn line before a restart's start; a half line before a seq gap.
    restart = lines[0].replace('"seq":0', '"seq":2')  # continues after the last intact event
    after_gap = lines[3].replace('"seq":3', '"seq":6')
    path.write_text(
        "\n".join(
            [lines[0], lines[1], lines[2][:20], restart, lines[3][:-9] + "}x", after_gap, lines[3][:15]]
        )
    )
    found = read_event_file(path)
    assert [event["seq"] for event in found.events] == [0, 1, 2, 6]
    assert [torn.line for torn in found.torn] == [3, 5, 7]
    assert found.gaps == [(3, 6)]
