"""The lazy filesystem (:mod:`nemesis.lazyfs`) mounted over a node's data directory, through its Remote.

Every target that offers power loss keeps the state under test on a lazyfs mount -- the bundled
broker its log directories, the tansu target's PostgreSQL node its database cluster -- and drives
that mount the same way, here: ``python -m nemesis.lazyfs`` run on the node as the daemon
:data:`LAZYFS_DAEMON`, serving ``backing`` (where the durable bytes live) at ``mountpoint``.

Contracts (the filesystem's own semantics are in :mod:`nemesis.lazyfs`):

* :meth:`LazyMount.ensure` mounts unless a live lazyfs daemon serves already, and returns once the
  mount answers ``status`` (else :class:`TimeoutError` after :data:`MOUNT_TIMEOUT` s).  A lazyfs
  process that died was a power loss in itself; its dead mount (``ENOTCONN`` until unmounted) is
  unmounted first and the durable state served again.
* :meth:`LazyMount.drop` is the power loss: what was not fsynced is gone.  The caller must have
  killed, and waited for, every process writing to the mount first (otherwise an in-flight write
  may land after the loss).  If the filesystem process itself is gone, that already lost
  everything unsynced: it is killed for certain and the mount served again.
* :meth:`LazyMount.sync` makes everything written so far durable (a machine that had time to
  write back).
* Commands fail with the Remote's errors (:class:`~testbed.nodes.remote.RemoteError`), so a
  fault's outcome stays typed; :func:`not_mounted` is the error of a power loss asked of a run
  that did not mount the filesystem.

The object keeps no state of its own (the node does), so a caller may make one per call.
"""

from __future__ import annotations

import dataclasses
import signal

from testbed.cluster.kafka_admin import wait_until
from testbed.nodes.remote import Remote, RemoteError

LAZYFS_DAEMON = "lazyfs"
"""The daemon name of the filesystem process on every node that mounts one."""
MOUNT_TIMEOUT = 20.0
"""Seconds a fresh mount may take to answer."""
STATUS_TIMEOUT = 5.0
"""Seconds one ``status`` probe of a mount may take (a hung probe must not eat the mount's wait)."""
CONTROL_TIMEOUT = 30.0
"""Seconds a control command (``drop``, ``sync``) or an ``unmount`` may take."""


def not_mounted(node: str) -> RemoteError:
    """The error for a power loss of ``node`` in a run that did not mount the lazy filesystem."""
    return RemoteError(node, "power loss needs the lazy filesystem (the run did not mount it)")


@dataclasses.dataclass(frozen=True)
class LazyMount:
    """lazyfs serving ``backing`` at ``mountpoint`` on ``remote``'s node (see the module docstring).

    ``python`` is the node's interpreter that has :mod:`nemesis.lazyfs`; ``log_path`` takes the
    filesystem process's output; ``allow_other`` lets users other than root (PostgreSQL's server)
    use the mount.
    """

    remote: Remote
    _: dataclasses.KW_ONLY
    python: str
    backing: str
    mountpoint: str
    log_path: str
    allow_other: bool = False

    def _argv(self, *arguments: str) -> list[str]:
        return [self.python, "-m", "nemesis.lazyfs", *arguments]

    def control(self, *command: str, timeout: float = CONTROL_TIMEOUT) -> str:
        """Send ``command`` (``drop``, ``sync``, ``status`` ...) to the mount; its reply."""
        return self.remote.exec(self._argv("control", self.mountpoint, *command), timeout=timeout).stdout_text

    def answers(self) -> bool:
        """Whether a live filesystem serves the mount now."""
        try:
            self.control("status", timeout=STATUS_TIMEOUT)
        except RemoteError:
            return False
        return True

    def ensure(self) -> None:
        """Mount unless a live lazyfs serves already; return once it answers."""
        if self.remote.is_alive(LAZYFS_DAEMON):
            return
        self.remote.exec(["mkdir", "-p", self.backing, self.mountpoint], timeout=10)
        # A dead mount answers ENOTCONN until unmounted; nothing mounted is fine too.
        self.remote.exec(self._argv("unmount", self.mountpoint), timeout=CONTROL_TIMEOUT, check=False)
        options = ["--foreground", *(["--allow-other"] if self.allow_other else [])]
        self.remote.start_daemon(
            LAZYFS_DAEMON,
            self._argv("mount", self.backing, self.mountpoint, *options),
            log_path=self.log_path,
        )
        wait_until(self.answers, MOUNT_TIMEOUT, f"the lazy filesystem on {self.remote.node}")

    def drop(self) -> None:
        """Power loss: discard what was not fsynced (every writer must already be dead)."""
        try:
            self.control("drop")
        except RemoteError:
            # The filesystem process itself is gone: that already lost everything unsynced.
            self.remote.signal(LAZYFS_DAEMON, signal.SIGKILL, timeout=5)
            self.ensure()

    def sync(self) -> None:
        """Make everything written so far durable."""
        self.control("sync")
