"""The partition directories of a broker's ``log.dirs``: finding them, and deleting the replica of
a partition the broker no longer holds.

A broker opens every ``<topic>-<partition>`` directory at start-up (:func:`partition_directories`).
When the controller's metadata no longer lists the broker among a partition's replicas -- a
reassignment moved the partition away, possibly while the broker was down -- the broker stops its
replica and deletes it, as Kafka's StopReplica with ``deletePartition`` (and KRaft's removal of
stray replicas at start-up) do: :func:`unassigned` says which, :func:`delete_replica` removes one.

The deletion is crash-safe: the directory is first renamed, atomically and durably, to a name
:func:`partition_directories` does not match (``<topic>-<partition>.<uuid>-delete``, Kafka's
suffix), then removed; a crash between the two leaves a directory that is never opened again as a
replica and is removed at the next start-up.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .checkpoints import fsync_directory

PARTITION_DIRECTORY = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
DELETED_SUFFIX = "-delete"


def partition_directories(log_dir: Path) -> list[tuple[str, int]]:
    """The (topic, partition) of every partition directory in ``log_dir``, sorted; leftovers of
    an interrupted deletion are removed on the way."""
    found = []
    for directory in sorted(log_dir.iterdir()):
        if directory.is_dir() and directory.name.endswith(DELETED_SUFFIX):
            shutil.rmtree(directory, ignore_errors=True)
            continue
        match = PARTITION_DIRECTORY.match(directory.name)
        if directory.is_dir() and match:
            found.append((match["topic"], int(match["partition"])))
    return found


def unassigned(
    held: Iterable[tuple[str, int]], topics: Mapping[str, Any], node_id: int
) -> list[tuple[str, int]]:
    """The partitions of ``held`` whose replica set in ``topics`` (the metadata's) does not
    include ``node_id``.  A partition the metadata does not know is kept: it may be one the
    broker will hear of, never one it was told to drop."""
    return [
        (name, index)
        for name, index in held
        if name in topics
        and index < len(topics[name]["partitions"])
        and node_id not in topics[name]["partitions"][index]["replicas"]
    ]


def delete_replica(log_dir: Path, key: tuple[str, int]) -> None:
    """Remove the directory of ``key``'s replica (closed by the caller), crash-safely (above)."""
    directory = log_dir / f"{key[0]}-{key[1]}"
    if not directory.exists():
        return
    doomed = log_dir / f"{directory.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}"
    directory.rename(doomed)
    fsync_directory(log_dir)
    shutil.rmtree(doomed, ignore_errors=True)
