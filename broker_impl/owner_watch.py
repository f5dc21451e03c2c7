"""A local cluster's processes end with the program that started them.

:class:`~broker_impl.localcluster.LocalCluster` starts the controller and every broker in a
process group of its own, so that a pause, a kill or a terminal's Ctrl-C aimed at one never
reaches the others or the program driving them.  Nothing would then stop them when that program
dies without its teardown -- a test run or bench killed by SIGKILL, or crashing, would leave
brokers holding their ports, files and CPU for good.  So the starter names itself in
:data:`OWNER_ENV`, and the process checks every :data:`CHECK_SECONDS` that its owner is still its
parent; once it is not (the owner died and the process was re-parented) it stops the way SIGTERM
stops it, cleanly.  A paused (SIGSTOPped) process cannot check, and needs not: it shares its
owner's session, so the owner's death orphans its process group with a stopped member, and the
kernel sends that group SIGHUP and SIGCONT (POSIX's orphaned process groups), which end it.  The
CLI's ``up`` names no owner and starts a session of its own: that cluster outlives the command by
design and ends with ``down``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

logger = logging.getLogger(__name__)

OWNER_ENV = "TIDEMARK_OWNER_PID"
"""The pid of the process a local cluster's process must not outlive (unset: none)."""
CHECK_SECONDS = 0.5


def watch_owner() -> asyncio.Task[None] | None:
    """Start watching the owner :data:`OWNER_ENV` names, if any, in the running loop; the caller
    keeps the task (a task nothing refers to may be collected)."""
    owner = os.environ.get(OWNER_ENV, "")
    if not owner.isdigit():
        return None
    return asyncio.create_task(_stop_without(int(owner)), name="owner-watch")


async def _stop_without(owner: int) -> None:
    while os.getppid() == owner:
        await asyncio.sleep(CHECK_SECONDS)
    logger.warning("the process that started this one (pid %d) is gone: stopping", owner)
    os.kill(os.getpid(), signal.SIGTERM)
