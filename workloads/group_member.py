"""One member of the run's consumer group: a client, the processes acting for it, and its ops.

This is where a group consumer's life becomes well-formed ops (``docs/consumer-groups.md`` has
the formats).  The rules, and why:

* **A process is one assignment.**  The member's process records ``assign``, then the polls and
  commits of that assignment, then ``revoke`` -- and after a revoke the member continues as a
  fresh process.  The checker's order checks read a process id as one consumer assignment
  (``checker.definitions``: a consumer re-reading or skipping across a rebalance is Kafka
  working as designed, not a stale read or a skipped record), and a group checker can then ask
  of each process exactly what it was assigned, polled and committed.
* **Op model.**  Each op is recorded as an invoke and its completion by one process with
  nothing of that process in between.  Rebalance events and records are recorded in the order
  the client reports them (:mod:`workloads.group_events`), after the client call returned, from
  the member's thread -- so an ``assign`` is complete before the first poll of its records.
* **Unknown outcomes.**  A process whose op ended ``info`` never invokes again.  After a
  synchronous commit ends ``info`` the member keeps its assignment: a fresh process takes it
  over and says so with an ``assign`` carrying ``"takeover"`` (the old process).  After a poll
  ends ``info`` the client is closed (its revoke is not recorded: that process is over) and the
  slot starts a new client, as the ``assign`` workload does.
* **Asynchronous commits** run while the member goes on polling, so they cannot belong to the
  polling process (it would have two ops pending): each member has a *committer* process that
  invokes them, one in flight at a time (a poll while one is in flight commits nothing; the next
  commit carries the positions forward).  The value names the process whose polls the offsets
  come from (``polled_by``).  A commit still unanswered when the client closes ends ``info``.

Single-threaded: every method runs on the member's own thread.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from testbed.record.ops import Op
from testbed.record.recorder import Recorder

from .clients import Received
from .group_events import Assigned, CommitDone, CommitMode, GroupConsumerClient, Outcome, Revoked, Step


def record_value(received: Received) -> dict[str, Any]:
    """A record as a poll op holds it (the ``assign`` workload's format)."""
    text = received.value
    value: int | str | None = int(text) if text is not None and text.lstrip("-").isdigit() else text
    return {"partition": received.partition, "offset": received.offset, "key": received.key, "value": value}


@dataclasses.dataclass(frozen=True)
class _Held:
    """The assignment the member's current process holds."""

    partitions: tuple[int, ...]
    generation: int | None
    member_id: str | None


@dataclasses.dataclass(frozen=True)
class _Pending:
    """An asynchronous commit sent and not yet answered."""

    token: int
    invocation: Op
    value: dict[str, Any]


class GroupMember:
    """Records the ops of one group consumer client (see the module docstring).

    ``number`` identifies the client in op values (``consumer``); ``process`` is the process
    acting for it now; ``fresh_process`` hands out unused process ids.
    """

    def __init__(
        self,
        number: int,
        client: GroupConsumerClient,
        recorder: Recorder,
        fresh_process: Callable[[], int],
        process: int,
        commit: CommitMode,
        commit_timeout: float,
        reads_as_txn: bool = False,
    ) -> None:
        """``reads_as_txn``: record each poll as a read-only ``txn`` op (``--txn``: the poll order
        checks must not read the offset gaps of transaction markers as skips; the group checks read
        both kinds)."""
        self.reads_as_txn = reads_as_txn
        self.number = number
        self.client = client
        self.recorder = recorder
        self.fresh_process = fresh_process
        self.process = process
        self.commit_mode = commit
        self.commit_timeout = commit_timeout
        self.held: _Held | None = None
        self.positions: dict[int, int] = {}
        """Next offset to read per partition, from this process's polls."""
        self.committer: int | None = None
        self.pending: _Pending | None = None
        self._tokens = itertools.count(1)

    # ---- the member's loop calls these ---------------------------------------------------------

    def poll(self, timeout: float) -> None:
        """One poll: its events and records recorded in order, then (sync/async) a commit of the
        positions if it returned records.  A client failure propagates (see :meth:`poll_failed`)."""
        if self.record(self.client.poll(timeout)):
            self.commit()

    def poll_failed(self, error: BaseException) -> None:
        """The client's poll raised: record the poll ``info``, retire the process, close the client.

        The next process id is left in :attr:`process` for the client that replaces this one.
        """
        invocation = self.recorder.invoke(self.process, "poll", None)
        self.recorder.complete(invocation, "info", None, error=f"{type(error).__name__}: {error}")
        self._retire()
        self.close()

    def close(self) -> None:
        """Close the client (it leaves the group) and record what its close produced."""
        self.record(self.client.close())
        if self.pending is not None:
            self._complete_pending("info", "no answer before the consumer closed")

    # ---- recording ---------------------------------------------------------------------------

    def record(self, steps: list[Step]) -> bool:
        """Record ``steps`` in order (consecutive records are one poll op); True if any record came."""
        batch: list[Received] = []
        got = False
        for step in steps:
            if isinstance(step, Received):
                batch.append(step)
                continue
            got |= self._record_poll(batch)
            batch = []
            if isinstance(step, Assigned):
                self._assigned(step)
            elif isinstance(step, Revoked):
                self._revoked(step)
            elif isinstance(step, CommitDone):
                self._commit_done(step)
        return self._record_poll(batch) or got

    def _record_poll(self, batch: list[Received]) -> bool:
        if not batch:
            return False
        if self.reads_as_txn:
            invocation = self.recorder.invoke(self.process, "txn", [{"f": "poll"}])
            records = [record_value(record) for record in batch]
            self.recorder.complete(invocation, "ok", [{"f": "poll", "records": records}])
        else:
            invocation = self.recorder.invoke(self.process, "poll", None)
            self.recorder.complete(invocation, "ok", [record_value(record) for record in batch])
        for record in batch:
            self.positions[record.partition] = record.offset + 1
        return True

    def _ok(self, f: str, value: dict[str, Any]) -> None:
        invocation = self.recorder.invoke(self.process, f, value)
        self.recorder.complete(invocation, "ok", value)

    def _assigned(self, event: Assigned) -> None:
        if self.held is not None:  # a new assignment without a revoke: that process is over
            self._retire()
        self.held = _Held(event.partitions, event.generation, event.member_id)
        self.positions = {}
        self._ok("assign", self._assign_value())

    def _assign_value(self) -> dict[str, Any]:
        assert self.held is not None
        return {
            "partitions": list(self.held.partitions),
            "generation": self.held.generation,
            "member_id": self.held.member_id,
            "consumer": self.number,
        }

    def _revoked(self, event: Revoked) -> None:
        if self.held is None:  # nothing held (kafka-python revokes nothing before the first join)
            return
        self._ok(
            "revoke",
            {
                "partitions": list(event.partitions),
                "lost": event.lost,
                "generation": self.held.generation,
                "consumer": self.number,
            },
        )
        self._retire()

    def _retire(self) -> None:
        """The current process never invokes again; the member continues as a fresh one, holding nothing."""
        self.process = self.fresh_process()
        self.held = None
        self.positions = {}

    # ---- commits -------------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the positions this process read in its assignment (``sync``/``async``; ``auto``: nothing)."""
        if self.commit_mode == "auto" or self.held is None:
            return
        offsets = {p: offset for p, offset in sorted(self.positions.items()) if p in self.held.partitions}
        if not offsets:
            return
        value = {
            "offsets": {str(p): offset for p, offset in offsets.items()},
            "generation": self.held.generation,
            "polled_by": self.process,
        }
        if self.commit_mode == "sync":
            self._commit_sync(offsets, value)
        else:
            self._commit_async(offsets, value)

    def _commit_sync(self, offsets: dict[int, int], value: dict[str, Any]) -> None:
        if self.client.commit_in_flight():
            return  # an earlier commit is still unanswered: this one would queue behind it
        invocation = self.recorder.invoke(self.process, "commit", value)
        outcome, error = self.client.commit_sync(offsets, self.commit_timeout)
        self.recorder.complete(invocation, outcome, value, error=error)
        if outcome == "info":
            self._take_over()

    def _take_over(self) -> None:
        """A fresh process continues the assignment of one whose op ended ``info``."""
        previous = self.process
        self.process = self.fresh_process()
        self._ok("assign", {**self._assign_value(), "takeover": previous})

    def _commit_async(self, offsets: dict[int, int], value: dict[str, Any]) -> None:
        if self.pending is not None:
            return  # one in flight at a time; the next commit carries these positions
        if self.committer is None:
            self.committer = self.fresh_process()
        token = next(self._tokens)
        invocation = self.recorder.invoke(self.committer, "commit", value)
        answered_now = self.client.commit_async(offsets, token)
        self.pending = _Pending(token, invocation, value)
        if answered_now is not None:
            self._complete_pending(*answered_now)

    def _commit_done(self, event: CommitDone) -> None:
        if self.pending is not None and event.token == self.pending.token:
            self._complete_pending(event.outcome, event.error)

    def _complete_pending(self, outcome: Outcome, error: str | None) -> None:
        assert self.pending is not None
        pending, self.pending = self.pending, None
        self.recorder.complete(pending.invocation, outcome, pending.value, error=error)
        if outcome == "info":
            self.committer = None  # that process never invokes again
