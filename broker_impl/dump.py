"""Offline dump of a broker's data directory: every record, and each partition's state.

``python -m broker_impl.dump DATA_DIR``

Reads the segment files directly -- no running broker needed, so it works on the data
directory of a crashed or power-cycled broker, which is exactly when the harness
compares replicas.  It opens the logs with the same recovery as the broker (a torn
tail is ignored, not repaired: the dump never writes) and prints JSON lines:

* one per record: ``{"type": "record", "topic", "partition", "offset", "leader_epoch",
  "key", "value"}`` -- key/value as UTF-8 text, or ``"base64:..."`` when not UTF-8;
* one per partition: ``{"type": "partition", "topic", "partition", "high_watermark",
  "log_end_offset", "log_start_offset", "epochs": [[epoch, start_offset], ...],
  "torn_bytes": n}`` -- the HW from the HW checkpoint file (what the replica would
  recover with).

``--summary`` prints the partition lines only.  The dump reads a running broker's files too
(read-only, a torn tail ignored): what it then shows is the log as far as the broker has written
it, which is how a scenario waits on what a replica holds (``testbed.cluster.protocol.LiveReplicas``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from . import records
from .broker import PARTITION_DIRECTORY
from .checkpoints import HighWatermarkCheckpoint, LeaderEpochCache
from .log import SEGMENT_SUFFIX


def text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def dump_partition(
    directory: Path, topic: str, partition: int, high_watermark: int, records_too: bool = True
) -> Iterator[dict[str, Any]]:
    """Records of one partition directory (unless not ``records_too``: the summary alone, which
    still validates every batch but decodes none -- what a scenario's wait polls), then its
    summary line (read-only)."""
    log_start = None
    next_offset = None
    torn = 0
    for path in sorted(directory.glob("*" + SEGMENT_SUFFIX)):
        data = path.read_bytes()
        if log_start is None:
            log_start = int(path.name[: -len(SEGMENT_SUFFIX)])
        position = 0
        while position < len(data):
            try:
                header = records.validate(data, position)
            except records.CorruptBatch:
                torn += len(data) - position
                break
            if next_offset is not None and header.base_offset != next_offset:
                torn += len(data) - position
                break
            batch = data[position : position + header.size]
            if records_too and not header.is_control:
                for record in records.decode_records(batch):
                    yield {
                        "type": "record",
                        "topic": topic,
                        "partition": partition,
                        "offset": record.offset,
                        "leader_epoch": header.partition_leader_epoch,
                        "key": text(record.key),
                        "value": text(record.value),
                    }
            next_offset = header.last_offset + 1
            position += header.size
        if torn:
            break
    log_end = next_offset if next_offset is not None else (log_start or 0)
    epochs = [entry for entry in LeaderEpochCache(directory).entries if entry[1] < log_end]
    yield {
        "type": "partition",
        "topic": topic,
        "partition": partition,
        "high_watermark": min(high_watermark, log_end),
        "log_end_offset": log_end,
        "log_start_offset": log_start or 0,
        "epochs": [list(entry) for entry in epochs],
        "torn_bytes": torn,
    }


def dump(data_directory: Path, output: IO[str], summary: bool = False) -> int:
    """Write the dump of ``data_directory`` (``summary``: the partition lines only); return the
    number of partitions."""
    high_watermarks = HighWatermarkCheckpoint(data_directory).read()
    count = 0
    for directory in sorted(data_directory.iterdir()):
        match = PARTITION_DIRECTORY.match(directory.name)
        if not (directory.is_dir() and match):
            continue
        key = (match["topic"], int(match["partition"]))
        for line in dump_partition(directory, key[0], key[1], high_watermarks.get(key, 0), not summary):
            output.write(json.dumps(line, separators=(",", ":")) + "\n")
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker_impl.dump", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="a broker's log.dirs directory")
    parser.add_argument("--summary", action="store_true", help="the partition lines only, no records")
    args = parser.parse_args(argv)
    directory = Path(args.data_dir)
    if not directory.is_dir():
        print(f"dump: {directory}: not a directory", file=sys.stderr)
        return 2
    try:
        dump(directory, sys.stdout, summary=args.summary)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
