"""The ``subscribe`` workload's consumers: one consumer group, one thread per member, and churn.

Every consumer of the run joins the run's group (``QueueSpec.group``) and subscribes to the topic;
each runs in a *slot* -- a thread that polls its client, records through a
:class:`~workloads.group_member.GroupMember`, and replaces the client (with a fresh process)
after a poll failed.  At the end of the run every slot closes its client: it leaves the group
and its revoke is recorded.

**Consumer churn** (the nemesis's ``consumer-churn``, :meth:`ConsumerFleet.churn`): one running
member, chosen by the caller's draw, is stopped and a new slot joins the group under a fresh
process id, so the count of consumers is back when the call returns.  Two ways to stop:

* ``leave`` -- the member closes: LeaveGroup, its revoke recorded, the group rebalances at once;
* ``stall`` -- the member stops polling and is left open, as an application stuck in its
  processing would be.  Its client keeps heartbeating, so its session never times out; the
  group's next rebalance (the newcomer's join) waits for it up to the rebalance timeout
  (``max.poll.interval.ms``), then the coordinator drops it, or the client leaves by itself when
  its own poll interval runs out (KIP-62).  It is closed after that interval (or at the end of
  the run), and only then is its revoke recorded -- late, as the stalled application would
  learn of it.  Neither client library can close a member without leaving the group (static
  membership, which can, is not implemented by the bundled broker), so a member whose session
  expires -- a crashed client process -- is not produced here.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from testbed.record.recorder import Recorder

from .clients import CLIENTS, KAFKA_PYTHON
from .group_events import CommitMode, GroupConsumerClient, max_poll_interval_ms
from .group_member import GroupMember

logger = logging.getLogger(__name__)

STOP_WAYS: tuple[str, ...] = ("leave", "stall")
POLL_TIMEOUT = 0.5
RETRY_CLIENT_SECONDS = 0.5
"""How long a slot waits before trying again to create a client that failed to start."""

ClientFactory = Callable[[], GroupConsumerClient]


def make_group_consumer(
    client: str,
    bootstrap: str,
    topic: str,
    group: str,
    commit: CommitMode,
    request_timeout: float,
    isolation: str,
) -> GroupConsumerClient:
    """A subscribed member of ``group`` on ``topic`` with ``client``'s library.

    Only the chosen library's adapter is imported (each pulls in its client library); both
    adapters import :mod:`workloads.group_events`, so this choice lives here, above them."""
    if client in KAFKA_PYTHON:  # kafka-python-kip890 differs only in its transactional producer
        from .group_kafka_python import KafkaPythonGroupConsumer

        return KafkaPythonGroupConsumer(bootstrap, topic, group, commit, request_timeout, isolation)
    if client == "confluent-kafka":
        from .group_confluent import ConfluentGroupConsumer

        return ConfluentGroupConsumer(bootstrap, topic, group, commit, request_timeout, isolation)
    raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")


class _Slot:
    """One consumer thread: its current member, and how it was asked to stop."""

    def __init__(self, first_process: int) -> None:
        self.first_process = first_process
        self.member: GroupMember | None = None
        self.stop_way: str | None = None
        self.polling_stopped = threading.Event()
        """Set once the slot will not poll again (its loop ended)."""
        self.closed = threading.Event()
        """Set once its last client is closed and its ops recorded."""
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None


class ConsumerFleet:
    """The group's members for one run (see the module docstring).

    ``fresh_process`` hands out unused process ids; ``new_client`` makes a subscribed client (the
    workload's :func:`make_group_consumer`, or one in a process of its own; tests pass fakes).
    """

    def __init__(
        self,
        recorder: Recorder,
        fresh_process: Callable[[], int],
        new_client: ClientFactory,
        commit: CommitMode,
        request_timeout: float,
        reads_as_txn: bool = False,
    ) -> None:
        self.reads_as_txn = reads_as_txn
        """Members record their polls as read-only ``txn`` ops (``GroupMember``'s)."""
        self.recorder = recorder
        self.fresh_process = fresh_process
        self.new_client = new_client
        self.commit = commit
        self.request_timeout = request_timeout
        self.stall_seconds = max_poll_interval_ms(request_timeout) / 1000 + 2.0
        """How long a stalled member stays open: past the poll interval that drops it from the group."""
        self._numbers = itertools.count()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self.errors: list[str] = []

    # ---- the run ----------------------------------------------------------------------------

    def run(self, first_processes: list[int], stop: threading.Event) -> None:
        """Run one slot per process id in ``first_processes`` (and those churn adds) until ``stop``."""
        with self._lock:
            self._stop = stop
            for process in first_processes:
                self._start_slot(process)
        stop.wait()
        with self._lock:  # churn adds no slot once the stop is set (it checks under this lock)
            slots = list(self._slots)
        for slot in slots:
            slot.wake.set()
        for slot in slots:
            if slot.thread is not None:
                slot.thread.join()

    def _start_slot(self, process: int) -> _Slot:
        """Start a slot (the lock held); the caller made sure the run is not stopping."""
        slot = _Slot(process)
        slot.thread = threading.Thread(
            target=self._guarded, args=(slot,), name=f"group-consumer-{process}", daemon=True
        )
        self._slots.append(slot)
        slot.thread.start()
        return slot

    def _guarded(self, slot: _Slot) -> None:
        try:
            self._run_slot(slot)
        except Exception as error:  # a client library bug must not kill the run silently
            logger.exception("group consumer slot %d failed", slot.first_process)
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            slot.polling_stopped.set()
            slot.closed.set()

    def _stopping(self, slot: _Slot) -> bool:
        assert self._stop is not None
        return self._stop.is_set() or slot.stop_way is not None

    def _run_slot(self, slot: _Slot) -> None:
        process = slot.first_process
        while not self._stopping(slot):
            try:
                client = self.new_client()
            except Exception as error:  # nothing was invoked: nothing to record
                logger.info("group consumer %d: no client yet: %s", process, error)
                slot.wake.wait(RETRY_CLIENT_SECONDS)
                continue
            member = GroupMember(
                next(self._numbers),
                client,
                self.recorder,
                self.fresh_process,
                process,
                self.commit,
                self.request_timeout,
                self.reads_as_txn,
            )
            slot.member = member
            failed = self._poll_until_stopped(member, slot)
            if not failed:
                break
            process = member.process  # the fresh process poll_failed retired to
        slot.polling_stopped.set()
        member_now = slot.member
        if member_now is None:
            return
        if slot.stop_way == "stall" and self._stop is not None:
            self._stop.wait(self.stall_seconds)  # time itself is the point: the poll interval runs out
        member_now.close()

    def _poll_until_stopped(self, member: GroupMember, slot: _Slot) -> bool:
        """Poll until the run or a churn stops this slot (False), or the client failed (True: it is closed)."""
        while not self._stopping(slot):
            try:
                member.poll(POLL_TIMEOUT)
            except Exception as error:
                member.poll_failed(error)
                slot.member = None
                return True
        return False

    # ---- churn -------------------------------------------------------------------------------

    def churn(self, way: str, pick: int) -> dict[str, Any]:
        """Stop the running member ``pick`` (modulo their count, in start order) the ``way`` given
        and start a new one; what happened, as the nemesis op's value records it.

        Raises LookupError when nothing was done (the run is not running, or no member polls);
        the returned ``error`` says the stop was asked but not seen to happen in time.
        """
        if way not in STOP_WAYS:
            raise ValueError(f"consumer churn: unknown way to stop {way!r} (known: {', '.join(STOP_WAYS)})")
        with self._lock:
            if self._stop is None or self._stop.is_set():
                raise LookupError("the workload's consumers are not running")
            running = [
                slot for slot in self._slots if slot.stop_way is None and not slot.polling_stopped.is_set()
            ]
            if not running:
                raise LookupError("no consumer of the group is running")
            victim = running[pick % len(running)]
            victim.stop_way = way
            victim.wake.set()
            member = victim.member
            stopped = {"process": member.process if member else victim.first_process}
            if member is not None:
                stopped["consumer"] = member.number
            started = self._start_slot(self.fresh_process())
        report: dict[str, Any] = {
            "stop": way,
            "stopped": stopped,
            "started": {"process": started.first_process},
        }
        done = victim.closed if way == "leave" else victim.polling_stopped
        if not done.wait(2 * self.request_timeout + 10.0):
            report["error"] = (
                f"the stopped consumer did not {'close' if way == 'leave' else 'stop polling'} in time"
            )
        return report
