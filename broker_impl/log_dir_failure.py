"""A storage error takes the log directory offline, and with the only one offline, the broker halts.

Kafka's rule (``LogDirFailureChannel``, ``ReplicaManager.handleLogDirFailure``,
``LogManager.handleLogDirFailure``): an ``IOException`` from any write to a log directory -- a
segment append, an fsync, a segment roll, a truncation, a checkpoint -- marks that directory offline
for the rest of the process's life; its partitions go offline (the controller moves their
leadership), and when no log directory is left online, the broker halts: "Shutdown broker because
all log dirs in ... have failed", ``Exit.halt(1)``, no clean shutdown.  The bundled broker has one
log directory (``log.dirs`` is a single path), so every storage error halts it.

Why halting is the only safe answer to an fsync error: after a failed fsync, Linux may already have
dropped the dirty pages it could not write (since 4.13 it marks them clean), so a retried fsync
succeeds having written nothing -- the "fsyncgate" lesson.  A broker that answered the produce
anyway, or retried and then answered, would acknowledge records no disk holds; a later power loss
then loses acknowledged data.  So here, as in Kafka, the request that met the error is never
acknowledged: the process halts before it returns.  (Kafka's request thread answers
``KAFKA_STORAGE_ERROR`` while its failure handler thread halts the broker, so a client may see
that error first; the bundled broker halts on the spot and the client sees the connection close.
Neither is an acknowledgement.)  The restarted broker recovers its log from what the directory
holds, as after any crash, and does not write the clean-shutdown marker on the way down.

How: :class:`broker_impl.broker.Broker` calls :func:`install` at start-up with its event log and
log directory; the log and checkpoint writers mark their storage operations with
:func:`halts_on_storage_error`.  Without an installed channel (unit tests, the offline dump tool)
the ``OSError`` propagates to the caller unchanged.  Before halting, the broker records a
``log-dir-failure`` event (``docs/events.md``) and logs the error at CRITICAL.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, ParamSpec, TypeVar

from .events import EventLog

logger = logging.getLogger(__name__)

LOG_DIR_FAILURE = "log-dir-failure"
"""The event kind recorded just before the halt."""
HALT_EXIT_CODE = 1
"""The process's exit status after a halt (Kafka's ``Exit.halt(1)``)."""

_Parameters = ParamSpec("_Parameters")
_Result = TypeVar("_Result")


class LogDirFailureChannel:
    """What a broker process does when its one log directory fails: record, log, halt."""

    def __init__(self, events: EventLog, log_dir: Path) -> None:
        self.events = events
        self.log_dir = log_dir

    def halt(self, error: OSError, operation: str, where: Path | None) -> NoReturn:
        """Record the failure, then end the process at once with :data:`HALT_EXIT_CODE` (no
        cleanup, no flush, no clean-shutdown marker: Kafka's ``Exit.halt``)."""
        code = errno.errorcode.get(error.errno, str(error.errno)) if error.errno is not None else None
        logger.critical(
            "Shutdown broker because all log dirs in %s have failed: %s of %s failed: %s",
            self.log_dir,
            operation,
            where,
            error,
        )
        self.events.emit(
            LOG_DIR_FAILURE,
            log_dir=str(self.log_dir),
            operation=operation,
            path=None if where is None else str(where),
            errno=code,
            error=str(error),
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(HALT_EXIT_CODE)


_channel: LogDirFailureChannel | None = None


def install(events: EventLog, log_dir: Path) -> None:
    """Make every later storage error in this process halt it (a broker process, at start-up)."""
    global _channel
    _channel = LogDirFailureChannel(events, log_dir)


def uninstall() -> None:
    """Back to propagating storage errors (tests that built a broker in their own process)."""
    global _channel
    _channel = None


def storage_failed(error: OSError, operation: str, where: Path | None) -> None:
    """Report a storage error: halts the process when a channel is installed, else returns (the
    caller then re-raises)."""
    if _channel is not None:
        _channel.halt(error, operation, where)


def halts_on_storage_error(
    operation: str,
) -> Callable[[Callable[_Parameters, _Result]], Callable[_Parameters, _Result]]:
    """Decorate a function whose ``OSError`` means the log directory failed: :func:`storage_failed`
    first, then re-raise.  Its first argument names the place: a ``Path``, or an object with a
    ``directory`` (a partition's log)."""

    def decorate(method: Callable[_Parameters, _Result]) -> Callable[_Parameters, _Result]:
        @functools.wraps(method)
        def guarded(*arguments: _Parameters.args, **keywords: _Parameters.kwargs) -> _Result:
            try:
                return method(*arguments, **keywords)
            except OSError as error:
                owner = arguments[0] if arguments else None
                where = owner if isinstance(owner, Path) else getattr(owner, "directory", None)
                storage_failed(error, operation, where if isinstance(where, Path) else None)
                raise

        return guarded

    return decorate
