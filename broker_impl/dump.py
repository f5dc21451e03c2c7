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

``--transactions`` adds what transactions left in the log (off by default, so that the lines
above stay exactly what their readers expect): each record of a transactional batch gains
``"producer_id"`` and ``"transactional": true``; each transaction marker is a line
``{"type": "control", "topic", "partition", "offset", "leader_epoch", "producer_id",
"producer_epoch", "marker": "COMMIT"|"ABORT", "coordinator_epoch"}``; and the partition line gains
``"last_stable_offset"`` (``min(HW, first offset of the oldest open transaction)``),
``"open_transactions"`` (``{producer id: first offset}``) and ``"aborted_transactions"``
(``[[producer id, first offset, marker offset], ...]``).

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
from .checkpoints import HighWatermarkCheckpoint, LeaderEpochCache
from .control_records import MarkerFormatError, read_marker
from .log import SEGMENT_SUFFIX
from .replica_dirs import PARTITION_DIRECTORY
from .txn_index import TransactionIndex


def text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def dump_partition(
    directory: Path,
    topic: str,
    partition: int,
    high_watermark: int,
    records_too: bool = True,
    transactions: bool = False,
) -> Iterator[dict[str, Any]]:
    """Records of one partition directory (unless not ``records_too``: the summary alone, which
    still validates every batch but decodes none -- what a scenario's wait polls), then its
    summary line (read-only); ``transactions``: with the ``--transactions`` fields and lines."""
    index = TransactionIndex()
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
            if transactions:
                yield from _transaction_lines(index, header, batch, topic, partition, records_too)
            if records_too and not header.is_control:
                for record in records.decode_records(batch):
                    line = {
                        "type": "record",
                        "topic": topic,
                        "partition": partition,
                        "offset": record.offset,
                        "leader_epoch": header.partition_leader_epoch,
                        "key": text(record.key),
                        "value": text(record.value),
                    }
                    if transactions and header.is_transactional:
                        line.update(producer_id=header.producer_id, transactional=True)
                    yield line
            next_offset = header.last_offset + 1
            position += header.size
        if torn:
            break
    log_end = next_offset if next_offset is not None else (log_start or 0)
    epochs = [entry for entry in LeaderEpochCache(directory).entries if entry[1] < log_end]
    summary: dict[str, Any] = {
        "type": "partition",
        "topic": topic,
        "partition": partition,
        "high_watermark": min(high_watermark, log_end),
        "log_end_offset": log_end,
        "log_start_offset": log_start or 0,
        "epochs": [list(entry) for entry in epochs],
        "torn_bytes": torn,
    }
    if transactions:
        first_unstable = index.first_unstable_offset()
        stable = (
            summary["high_watermark"]
            if first_unstable is None
            else min(first_unstable, summary["high_watermark"])
        )
        summary.update(
            last_stable_offset=stable,
            open_transactions={str(producer): first for producer, first in sorted(index.open.items())},
            aborted_transactions=[[e.producer_id, e.first_offset, e.last_offset] for e in index.aborted],
        )
    yield summary


def _transaction_lines(
    index: TransactionIndex,
    header: records.BatchHeader,
    batch: bytes,
    topic: str,
    partition: int,
    lines: bool,
) -> Iterator[dict[str, Any]]:
    """Follow one batch in ``index``; for a marker (when ``lines``), its ``control`` line."""
    if not header.is_control:
        index.record(header, None)
        return
    try:
        marker = read_marker(header, batch)
    except MarkerFormatError:
        return
    index.record(header, marker)
    if lines:
        yield {
            "type": "control",
            "topic": topic,
            "partition": partition,
            "offset": header.base_offset,
            "leader_epoch": header.partition_leader_epoch,
            "producer_id": header.producer_id,
            "producer_epoch": header.producer_epoch,
            "marker": "COMMIT" if marker.committed else "ABORT",
            "coordinator_epoch": marker.coordinator_epoch,
        }


def dump(data_directory: Path, output: IO[str], summary: bool = False, transactions: bool = False) -> int:
    """Write the dump of ``data_directory`` (``summary``: the partition lines only;
    ``transactions``: with the ``--transactions`` additions); return the number of partitions."""
    high_watermarks = HighWatermarkCheckpoint(data_directory).read()
    count = 0
    for directory in sorted(data_directory.iterdir()):
        match = PARTITION_DIRECTORY.match(directory.name)
        if not (directory.is_dir() and match):
            continue
        key = (match["topic"], int(match["partition"]))
        lines = dump_partition(
            directory, key[0], key[1], high_watermarks.get(key, 0), not summary, transactions
        )
        for line in lines:
            output.write(json.dumps(line, separators=(",", ":")) + "\n")
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker_impl.dump", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="a broker's log.dirs directory")
    parser.add_argument("--summary", action="store_true", help="the partition lines only, no records")
    parser.add_argument(
        "--transactions", action="store_true", help="markers, producer ids, LSO and aborted ranges"
    )
    args = parser.parse_args(argv)
    directory = Path(args.data_dir)
    if not directory.is_dir():
        print(f"dump: {directory}: not a directory", file=sys.stderr)
        return 2
    try:
        dump(directory, sys.stdout, summary=args.summary, transactions=args.transactions)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
