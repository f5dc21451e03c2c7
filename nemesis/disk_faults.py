"""The ``disk-error`` and ``slow-disk`` faults: the broker's disk fails or slows, through the lazy filesystem.

Both set a rule of the node's lazy filesystem (:mod:`nemesis.lazyfs.faults`, where the semantics
are stated -- above all that a failed fsync loses the file's unsynced writes for good, as Linux
does since 4.13), so they need the data directories on it: the power-loss ability.

* ``disk-error`` -- every ``op`` (``fsync`` by default; ``write``, ``read``) of the files matching
  ``files`` fails with ``errno`` (``EIO`` by default; ``ENOSPC``; ``EROFS``, a log directory gone
  read-only) until the heal.  ``files``
  defaults to ``*``, every file of the data directory: with the harness's default flush policy
  (never) the broker's log segments are fsynced only when a segment rolls, but its HW checkpoint
  every 5 s, so the fault acts within seconds under any setting; ``*.log`` aims at the segments
  alone (with ``flush.messages=1``, the next produce), ``*checkpoint*`` at the checkpoints.
  The bundled broker halts on the error (:mod:`broker_impl.log_dir_failure`, Kafka's rule).
* ``slow-disk`` -- every fsync of the matching files waits ``delay_ms`` first; the filesystem
  serves one call at a time, so the whole data directory stalls meanwhile.
* ``disk-heal`` -- clears every rule (the disk is replaced) and starts the broker where it is not
  running, as an operator restarts a broker that halted on a failed disk.  What a failed fsync
  lost stays lost.  A broker that a ``kill`` or ``power-loss`` keeps down is started too, so such
  a fault's window closes late, at its own ``start`` (a longer window demands less of liveness).
"""

from __future__ import annotations

from typing import Final, Protocol

from nemesis.fault_kinds import DISK_ERROR_ERRNO, DISK_ERROR_OP, DISK_FILES, SLOW_DISK_MS
from nemesis.lazyfs.protocol import CommandError, parse_command
from nemesis.lazyfs.rules import MAX_SLOW_FSYNC_MS

CLEAR: Final = "clear"
"""The lazy filesystem's command that forgets every rule."""


class DiskControl(Protocol):
    """What the faults need of a cluster: send one command to a node's lazy filesystem
    (:class:`testbed.cluster.protocol.DiskFaults`)."""

    def lazyfs_control(self, node: str, command: str) -> None: ...


def disk_error_command(
    op: str = DISK_ERROR_OP, errno: str = DISK_ERROR_ERRNO, files: str = DISK_FILES
) -> str:
    """The lazy filesystem's rule for a ``disk-error`` (in force until cleared); ValueError naming
    the bad parameter (the lazy filesystem's own parser says what it accepts)."""
    return _checked(f"fail {op} {errno} {files} always", files)


def slow_disk_command(delay_ms: int = SLOW_DISK_MS, files: str = DISK_FILES) -> str:
    """The lazy filesystem's rule for a ``slow-disk``; ValueError naming the bad parameter."""
    return _checked(f"slow-fsync {delay_ms} {files}", files)


def _checked(command: str, files: str) -> str:
    if not files or files != files.strip() or len(files.split()) != 1:
        raise ValueError(f"a disk fault's files must be one glob without spaces, not {files!r}")
    try:
        return parse_command(command).render()
    except CommandError as error:
        raise ValueError(f"disk fault: {error}") from None


def checked_delay(delay_ms: object) -> int:
    """A ``slow-disk`` ``delay_ms``: a whole number of milliseconds the lazy filesystem accepts."""
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or not 0 < delay_ms <= MAX_SLOW_FSYNC_MS:
        raise ValueError(
            f"a slow-disk delay_ms must be a whole number in 1..{MAX_SLOW_FSYNC_MS}, not {delay_ms!r}"
        )
    return delay_ms
