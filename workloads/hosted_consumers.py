"""Consumers in child processes (``--client-processes``): the parent's side of an ``assign``
consumer and of a consumer-group member, so that ``consumer-crash`` can SIGKILL them.

A consumer thread's client can only be closed, and a closed group member says goodbye
(LeaveGroup).  A consumer that *crashes* does not: its TCP connections drop, its heartbeats stop,
and the group coordinator learns of its death only when its session times out -- the timer
Kafka's rules put on the coordinator, and that a wall-clock slip, a coordinator that moved, or a
rebalance that waits on the dead member can get wrong.  So under ``client_processes`` the
queue workload's consumers, like its producers (:mod:`workloads.client_host`), live each in a
process of its own (:mod:`workloads.client_child`), and the workload's threads keep recording
their ops.

:class:`HostedConsumer` is a drop-in :class:`~workloads.clients.ConsumerClient`,
:class:`HostedGroupConsumer` a :class:`~workloads.group_events.GroupConsumerClient`.  What a crash
does to the call in flight -- the contract the op model needs:

* a ``poll`` (either kind) ends in :class:`~workloads.clients.IndefiniteFailure`: the poll op
  completes ``info`` (its records were never seen), the process retires and a new client process
  takes over at the last positions (``assign``: :meth:`workloads.queue.QueueWorkload._consume`) or
  joins the group afresh (:meth:`workloads.group_member.GroupMember.poll_failed`);
* a group member's synchronous commit answers ``info`` (the OffsetCommit may have reached the
  coordinator), an asynchronous one sent to a dead process too; the member's next poll finds the
  death;
* a dead member's :meth:`HostedGroupConsumer.close` returns no events: it never left the group,
  which is the point.

Each error names the dead process's pid (``client process 1234 ended (killed by SIGKILL)``), so a
crash report (:meth:`workloads.client_host.ClientHost.crash`) and the op it ended can be matched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .client_host import CALL_GRACE, ClientGone, ClientHost, HostedClient
from .clients import IndefiniteFailure, Received
from .group_events import (
    CommitMode,
    Outcome,
    Step,
    client_timeout_ms,
    max_poll_interval_ms,
    step_from_wire,
)


def _records(items: Any) -> list[Received]:
    steps = [step_from_wire(item) for item in items]
    records = [step for step in steps if isinstance(step, Received)]
    if len(records) != len(steps):
        raise ValueError(f"an assign consumer's poll returned group events: {steps!r}")
    return records


def _outcome(answer: Any) -> tuple[Outcome, str | None]:
    outcome, error = answer
    if outcome not in ("ok", "fail", "info"):
        raise ValueError(f"a commit answered with outcome {outcome!r}")
    return outcome, error


class HostedConsumer:
    """A :class:`~workloads.clients.ConsumerClient` (``assign``) in a child process."""

    def __init__(self, hosted: HostedClient, request_timeout: float) -> None:
        self.hosted = hosted
        self._call_timeout = 2 * request_timeout + CALL_GRACE

    def _call(self, name: str, args: list[Any], timeout: float) -> Any:
        try:
            return self.hosted.call(name, args, timeout)
        except ClientGone as gone:
            raise IndefiniteFailure(f"client process crashed mid-{name}: {gone}") from None

    def assign(self, topic: str, start_offsets: dict[int, int]) -> None:
        self._call("assign", [topic, start_offsets], self._call_timeout)

    def poll(self, timeout: float) -> list[Received]:
        return _records(self._call("poll", [timeout], timeout + self._call_timeout))

    def end_offsets(self, topic: str, partitions: Sequence[int], timeout: float) -> dict[int, int]:
        answer = self._call("end_offsets", [topic, list(partitions), timeout], timeout + CALL_GRACE)
        return {int(partition): int(offset) for partition, offset in answer.items()}

    def position(self, topic: str, partition: int) -> int:
        return int(self._call("position", [topic, partition], self._call_timeout))

    def close(self) -> None:
        self.hosted.close()


class HostedGroupConsumer:
    """A :class:`~workloads.group_events.GroupConsumerClient` in a child process (see the module
    docstring for what a crash does to each call)."""

    def __init__(self, hosted: HostedClient, request_timeout: float) -> None:
        self.hosted = hosted
        self._client_timeout = client_timeout_ms(request_timeout) / 1000
        self._poll_grace = max_poll_interval_ms(request_timeout) / 1000 + CALL_GRACE
        """A poll may wait out a rebalance (at most the rebalance timeout, which is the poll interval)."""

    def poll(self, timeout: float) -> list[Step]:
        try:
            items = self.hosted.call("poll", [timeout], timeout + self._poll_grace)
        except ClientGone as gone:
            raise IndefiniteFailure(f"client process crashed mid-poll: {gone}") from None
        return [step_from_wire(item) for item in items]

    def commit_sync(self, offsets: Mapping[int, int], timeout: float) -> tuple[Outcome, str | None]:
        try:
            return _outcome(self.hosted.call("commit_sync", [dict(offsets), timeout], timeout + CALL_GRACE))
        except ClientGone as gone:
            return "info", f"client process crashed mid-commit: {gone}"

    def commit_in_flight(self) -> bool:
        """True also when the process is gone: nothing is committed, the next poll finds the death."""
        try:
            return bool(self.hosted.call("commit_in_flight", [], CALL_GRACE))
        except ClientGone:
            return True

    def commit_async(self, offsets: Mapping[int, int], token: int) -> tuple[Outcome, str | None] | None:
        try:
            answer = self.hosted.call(
                "commit_async", [dict(offsets), token], self._client_timeout + CALL_GRACE
            )
        except ClientGone as gone:
            return "info", f"client process crashed mid-commit: {gone}"
        return None if answer is None else _outcome(answer)

    def close(self) -> list[Step]:
        """The events the member's close produced; none when its process had died (it never left)."""
        closed = self.hosted.close(self._client_timeout + CALL_GRACE)
        return [step_from_wire(item) for item in closed or []]


def hosted_consumer(
    host: ClientHost, process: int, client: str, bootstrap: str, isolation: str, request_timeout: float
) -> HostedConsumer:
    """An ``assign`` consumer (:func:`workloads.clients.make_consumer`'s) in a process of its own;
    the error its opening raised (HostedClientError when its process died opening it)."""
    return HostedConsumer(host.spawn("consumer", process, [client, bootstrap, isolation]), request_timeout)


def hosted_group_consumer(
    host: ClientHost,
    process: int | None,
    settings: tuple[str, str, str, str, CommitMode, float, str],
) -> HostedGroupConsumer:
    """A subscribed member (:func:`workloads.group_fleet.make_group_consumer`'s ``settings``:
    client, bootstrap, topic, group, commit, request timeout, isolation) in a process of its own.
    ``process``: None for a member of the fleet, whose process id changes with each assignment
    (:mod:`workloads.group_member`): the errors of the ops a crash ends name its pid instead."""
    request_timeout = settings[5]
    return HostedGroupConsumer(host.spawn("group-consumer", process, list(settings)), request_timeout)
