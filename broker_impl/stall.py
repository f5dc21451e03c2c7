"""Noticing that this process itself did not run: a periodic clock that ticked late.

A timer that expires a peer (a broker's session at the controller, a group member's at its
coordinator) reads "no heartbeat for T seconds" as "the peer is gone".  That is only true if this
process was reading its sockets meanwhile.  When the whole machine stalls (a 2-core CI runner
under a Docker build: 3.9 s measured on 2026-12-02), the peers' heartbeats sit unread in the
socket buffers and every session looks expired at the first tick after the stall -- the peers
are fenced for this process's own absence.  Kafka's timers have the same exposure in principle;
they are simply run on machines that stall less.

:class:`StallWatch` sees such a stall as a tick arriving much later than its period, so that
the owner can move its deadlines on by the lateness: time during which it read nothing is not
held against anyone.  A stall shorter than :data:`STALL_SECONDS` is ordinary scheduling noise
and forgiven nothing.

What it does not cover: a peer that really stopped during the stall is found out one stall
later, which is the price of not fencing live peers; and it reads ``time.monotonic()``-style
readings only -- a wall-clock jump is not a stall (timeouts never run on the wall clock here).
"""

from __future__ import annotations

# Lateness beyond the period that counts as a stall of this process (scheduling noise is ~ms).
STALL_SECONDS = 0.5


class StallWatch:
    """Watches a loop that should run every ``period`` seconds.

    Contract: call :meth:`stalled` once per iteration with the current monotonic reading; it
    returns how many seconds the loop was late beyond its period when that exceeds
    ``threshold``, else ``0.0``.  The first call measures from ``start``."""

    def __init__(self, period: float, start: float, threshold: float = STALL_SECONDS) -> None:
        self.period = period
        self.threshold = threshold
        self._previous = start

    def stalled(self, now: float) -> float:
        late = now - self._previous - self.period
        self._previous = now
        return late if late > self.threshold else 0.0
