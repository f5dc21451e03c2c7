"""Clients in child processes (``--client-processes``): the parent's side, and the crash of one.

(The consumers' side of the pipe -- ``assign`` consumers and group members -- is
:mod:`workloads.hosted_consumers`; :meth:`ClientHost.crash` kills either role.)

A client thread cannot crash the way a client does: killing a thread is not possible, and
closing its client (``consumer-churn``) says goodbye.  So with ``client_processes`` the queue
workload's producers -- plain and transactional -- live each in a process of its own
(:mod:`workloads.client_child`), and the workload's thread talks to it over a pipe: the thread
records the ops, the process is the thing that dies.  :class:`HostedProducer` and
:class:`HostedTxnProducer` are drop-in :class:`~workloads.clients.ProducerClient` and
:class:`~workloads.txn_clients.TxnProducerClient` s; :class:`ClientHost` spawns them, lists the
running ones and, for the nemesis's ``client-crash``, SIGKILLs one mid-operation.

What a crash does to the op in flight -- the contract the checker's verdict relies on:

* a plain producer's ``send`` ends in :class:`~workloads.clients.IndefiniteFailure`: the op
  completes ``info`` (the batch may have reached the leader before the process died), and the
  thread continues as a fresh process id with a new client process (Jepsen's rule,
  :mod:`workloads.queue`); an idempotent producer's successor gets a new producer id;
* a transactional producer's call ends in :class:`~workloads.txn_clients.TxnFatal`: a ``commit``
  in flight completes its op ``info`` (the EndTxn may have reached the coordinator); a
  ``begin`` or ``send`` in flight -- the transaction open, its commit never asked for -- goes the
  way of any transaction whose producer failed before committing (:mod:`workloads.txn`: its
  abort fails too, the op is ``fail``, certainly not committed), and the successor with the same
  ``transactional.id`` must fence the dead one and its coordinator abort what it left open.  That
  ``fail`` is what lets the checker catch a coordinator that commits a dead producer's
  transaction; recording ``info`` would hide it.

A call that gets no answer within its client's own timeouts plus :data:`CALL_GRACE` kills the
process (the op is then as if crashed).  No client process outlives the workload: the host kills
whatever is still running at :meth:`ClientHost.shutdown`, and each child dies with its parent
(:mod:`workloads.client_child`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Final

from .client_child import KNOWN_ERRORS
from .clients import IndefiniteFailure
from .txn_clients import TxnFatal

CALL_GRACE: Final = 30.0
"""Seconds a call may overrun the client's own timeout before its process counts as hung."""
OPEN_TIMEOUT: Final = 60.0
"""Seconds a client process may take to start and open its client (a transactional producer's
``init_transactions`` waits for its coordinator)."""
CLOSE_TIMEOUT: Final = 10.0
"""Seconds a client process may take to close its client and exit before it is killed."""
BUSY_WAIT: Final = 5.0
"""Seconds a crash waits for its victim to be mid-call before it kills it anyway."""
IDLE_WAIT: Final = 10.0
"""Seconds a crash waits for the victim's thread to see the death of the call it was in."""
ERRORS: Final[dict[str, type[Exception]]] = {cls.__name__: cls for cls in KNOWN_ERRORS}
NOT_OPS: Final = frozenset({"open", "close", "commit_in_flight", "assign", "position", "end_offsets"})
"""Calls that are no op of the history: a crash waits for a call that is (its op then ends with it)."""
ROLES: Final[dict[str, tuple[str, ...]]] = {
    "producer": ("producer", "txn-producer"),
    "consumer": ("consumer", "group-consumer"),
}
"""The kinds of client process each role's crash picks from (``client-crash``: producers,
``consumer-crash``: consumers, :mod:`nemesis.client_crash_plan`)."""


class ClientGone(Exception):
    """The client process ended (killed) or stopped answering: the call's outcome is unknown."""


class HostedClientError(Exception):
    """The client in the child raised something its interface does not name (as it would in a thread)."""


class HostedClient:
    """One client process and the pipe to it; one call at a time (its workload thread's)."""

    def __init__(self, kind: str, process: int | None) -> None:
        self.kind = kind
        self.process = process
        """The workload process id whose ops this client serves (one process, one client); None
        for a group member, whose process id changes with each assignment."""
        self._popen = subprocess.Popen(
            [sys.executable, "-m", "workloads.client_child", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buffer = bytearray()
        self._calling = threading.Lock()
        self._state = threading.Condition()
        self.in_flight: str | None = None
        """The call waiting for its answer now (None: idle)."""
        self.died_in: str | None = None
        """The first call that found the process gone (None: none did)."""

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def ended(self) -> bool:
        return self._popen.poll() is not None

    def call(self, name: str, args: Any, timeout: float) -> Any:
        """Send request ``name`` and wait for its answer; its result, or the error it names
        raised here; ClientGone when the process died or gave no answer within ``timeout``."""
        with self._calling:
            self._set_in_flight(name)
            try:
                self._write({"call": name, **args} if name == "open" else {"call": name, "args": args})
                answer = json.loads(self._read_line(time.monotonic() + timeout))
            except ClientGone:
                self.died_in = self.died_in or name  # the first call to find it dead: later ones only echo
                raise
            finally:
                self._set_in_flight(None)
        if "error" in answer:
            raise ERRORS.get(answer["error"], HostedClientError)(answer["text"])
        return answer["ok"]

    def _set_in_flight(self, name: str | None) -> None:
        with self._state:
            self.in_flight = name
            self._state.notify_all()

    def _write(self, request: dict[str, Any]) -> None:
        stdin = self._popen.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ClientGone(f"client process {self.pid} is gone ({self._end_text()})") from None

    def _read_line(self, deadline: float) -> bytes:
        stdout = self._popen.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.kill()
                raise ClientGone(f"client process {self.pid} gave no answer in time: killed")
            chunk = os.read(fd, 65536)
            if not chunk:
                self._popen.wait(CLOSE_TIMEOUT)
                raise ClientGone(f"client process {self.pid} ended ({self._end_text()})")
            self._buffer += chunk
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = bytearray(rest)
        return bytes(line)

    def _end_text(self) -> str:
        code = self._popen.poll()
        if code is None:
            return "still running"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"

    def wait_busy(self, timeout: float) -> str | None:
        """Wait until a call that is an op (not in :data:`NOT_OPS`) is in flight; that call (None:
        none in time)."""
        with self._state:
            self._state.wait_for(lambda: self.in_flight not in (None, *NOT_OPS), timeout)
            return self.in_flight if self.in_flight not in NOT_OPS else None

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight (its thread saw its answer or the death); False: timed out."""
        with self._state:
            return self._state.wait_for(lambda: self.in_flight is None, timeout)

    def kill(self) -> int | None:
        """SIGKILL the process and reap it; its exit status (None: it could not be reaped)."""
        try:
            self._popen.kill()
            return self._popen.wait(CLOSE_TIMEOUT)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            return self._popen.poll()

    def close(self, timeout: float = CLOSE_TIMEOUT) -> Any:
        """Close the client and end the process (killed if it does not end in time); what the
        client's close returned (None when it could not be asked or gave no answer).  Never raises."""
        closed: Any = None
        if not self.ended:
            with contextlib.suppress(Exception):
                closed = self.call("close", [], timeout)
        for stream in (self._popen.stdin, self._popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self._popen.wait(CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
        return closed


class HostedProducer:
    """A :class:`~workloads.clients.ProducerClient` in a child process."""

    def __init__(self, hosted: HostedClient, request_timeout: float) -> None:
        self.hosted = hosted
        self._request_timeout = request_timeout

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        try:
            offset = self.hosted.call(
                "send", [topic, partition, key, value, timeout], timeout * 2 + CALL_GRACE
            )
        except ClientGone as gone:
            raise IndefiniteFailure(f"client process crashed mid-send: {gone}") from None
        return int(offset)

    def close(self) -> None:
        self.hosted.close()


class HostedTxnProducer:
    """A :class:`~workloads.txn_clients.TxnProducerClient` in a child process (no
    ``send_offsets``: a consumer's group metadata cannot cross the pipe, so the spec refuses
    ``--txn-ctp`` with ``--client-processes``)."""

    def __init__(self, hosted: HostedClient, request_timeout: float) -> None:
        self.hosted = hosted
        self._request_timeout = request_timeout

    def _call(self, name: str, args: list[Any], timeout: float) -> Any:
        try:
            return self.hosted.call(name, args, timeout + CALL_GRACE)
        except ClientGone as gone:
            raise TxnFatal(f"client process crashed mid-{name}: {gone}") from None

    def begin(self) -> None:
        self._call("begin", [], self._request_timeout)

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        return int(self._call("send", [topic, partition, key, value, timeout], timeout * 2))

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any, timeout: float) -> None:
        raise TxnFatal("send_offsets: a consumer's group metadata cannot reach a client process")

    def commit(self, timeout: float) -> None:
        self._call("commit", [timeout], timeout)

    def abort(self, timeout: float) -> None:
        self._call("abort", [timeout], timeout)

    def close(self) -> None:
        self.hosted.close()


class ClientHost:
    """The workload's client processes: spawns them, lists the running ones, crashes one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: list[HostedClient] = []
        self._shut = False

    def producer(
        self, process: int, client: str, bootstrap: str, acks: str, idempotent: bool, request_timeout: float
    ) -> HostedProducer:
        """A plain producer (:func:`workloads.clients.make_producer`'s) for ``process``; the
        error its making raised (HostedClientError when the process died making it)."""
        args = [client, bootstrap, acks, idempotent, request_timeout]
        try:
            return HostedProducer(self.spawn("producer", process, args), request_timeout)
        except ClientGone as gone:
            raise HostedClientError(str(gone)) from None

    def txn_producer(
        self, process: int, client: str, bootstrap: str, transactional_id: str, request_timeout: float
    ) -> HostedTxnProducer:
        """A transactional producer (:func:`workloads.txn_clients.make_txn_producer`'s, so
        ``init_transactions`` done) for ``process``; TxnFatal when it could not be made."""
        args = [client, bootstrap, transactional_id, request_timeout]
        try:
            return HostedTxnProducer(self.spawn("txn-producer", process, args), request_timeout)
        except (ClientGone, HostedClientError) as error:
            raise TxnFatal(f"no client process: {error}") from None

    def spawn(self, kind: str, process: int | None, args: list[Any]) -> HostedClient:
        """A running client process of ``kind`` (:data:`workloads.client_child.MAKERS`) opened with
        ``args``, for ``process``; ClientGone or HostedClientError when it could not be opened
        (the process is ended then)."""
        with self._lock:
            if self._shut:
                raise HostedClientError("the workload's client processes are shut down")
            hosted = HostedClient(kind, process)
            self._clients.append(hosted)
        try:
            hosted.call("open", {"kind": kind, "args": args}, OPEN_TIMEOUT)
        except BaseException:
            hosted.close()
            raise
        return hosted

    def running(self) -> list[HostedClient]:
        """The client processes still running, in start order (ended ones are forgotten)."""
        with self._lock:
            self._clients = [hosted for hosted in self._clients if not hosted.ended]
            return list(self._clients)

    def crash(self, pick: int, role: str = "producer") -> dict[str, Any]:
        """SIGKILL running client ``pick`` of ``role`` (:data:`ROLES`; modulo their count),
        mid-call if it makes one within :data:`BUSY_WAIT`; what happened.  LookupError when
        nothing was killed."""
        if role not in ROLES:
            raise LookupError(f"unknown client role {role!r} (known: {', '.join(ROLES)})")
        running = [hosted for hosted in self.running() if hosted.kind in ROLES[role]]
        if not running:
            raise LookupError(f"no {role} process is running")
        victim = running[pick % len(running)]
        in_flight = victim.wait_busy(BUSY_WAIT)
        status = victim.kill()
        if status != -signal.SIGKILL:
            raise LookupError(f"client process {victim.pid} had ended before the kill (status {status})")
        seen = victim.wait_idle(IDLE_WAIT)
        report: dict[str, Any] = {
            "process": victim.process,
            "pid": victim.pid,
            "client": victim.kind,
            "in_flight": in_flight,
            "interrupted": in_flight is not None and victim.died_in == in_flight,
        }
        if not seen:
            report["error"] = (
                f"the thread of process {victim.process} did not see the crash in {IDLE_WAIT:g} s"
            )
        return report

    def shutdown(self) -> None:
        """Kill every client process still running (the workload's threads have ended: a client
        left is one whose close failed); no client is spawned after this."""
        with self._lock:
            self._shut = True
            left = list(self._clients)
        for hosted in left:
            if not hosted.ended:
                hosted.kill()
