"""The child side of a hosted client: one Kafka client in a process of its own.

``python -m workloads.client_child <parent pid>`` is started by :mod:`workloads.client_host` (one
process per client, so the nemesis's ``client-crash`` can SIGKILL a real client process with its
batches in flight and its transaction open, which a client thread cannot be).  It speaks a small
request/answer protocol, one JSON object per line, on its stdin and its original stdout:

* the first request opens the client: ``{"call": "open", "kind": <kind>, "args": [...]}`` with
  the arguments of the kind's maker (:data:`MAKERS`: ``producer``, ``txn-producer``, ``consumer``
  -- an ``assign`` consumer -- and ``group-consumer`` -- a subscribed member of the run's group);
* every later request calls one method of the client: ``{"call": "send", "args": [...]}``
  (:data:`CALLS`); ``close`` ends the process after its answer.  JSON has only string keys, so a
  dict argument (offsets by partition) arrives with its keys made integers again;
* every answer is ``{"ok": <result>}`` or ``{"error": <exception class name>, "text": <message>}``;
  the class name is one of :data:`KNOWN_ERRORS` (the parent raises the same class, so a definite
  failure stays definite) or ``"other"``.  Records and group events in a result travel as
  :func:`workloads.group_events.step_to_wire` makes them (the parent's hosted client decodes them).

The recording stays in the parent (as in Jepsen, where the worker records and the client is the
thing that crashes): this process knows nothing of ops.

It dies with its parent, whatever way the parent ends: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` at
start (the kernel kills it when the parent *thread* that spawned it ends -- the workload's
client thread, which outlives its clients), and a watchdog that ends it when its stdin reaches
end of file (the parent closed the pipe or died), so no client process outlives a harness killed
by Ctrl-C or SIGKILL.  Client libraries that print write to stderr: the protocol has its own
copy of stdout and fd 1 is pointed at stderr.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, Final

from .clients import DefiniteFailure, IndefiniteFailure, Received, make_consumer, make_producer
from .group_events import GroupEvent, step_to_wire
from .group_fleet import make_group_consumer
from .txn_clients import TxnAbortable, TxnFatal, TxnSendUnresolved, make_txn_producer

PR_SET_PDEATHSIG: Final = 1
KNOWN_ERRORS: Final[tuple[type[Exception], ...]] = (
    DefiniteFailure,
    IndefiniteFailure,
    TxnAbortable,
    TxnSendUnresolved,
    TxnFatal,
)
"""Exceptions an answer names so that the parent raises the same class."""
CALLS: Final = frozenset(
    {
        "begin",
        "send",
        "commit",
        "abort",
        "assign",
        "poll",
        "end_offsets",
        "position",
        "commit_sync",
        "commit_async",
        "commit_in_flight",
        "close",
    }
)
"""The client methods a request may call (the producers', the consumers' and the group members')."""
MAKERS: Final[dict[str, Callable[..., Any]]] = {
    "producer": make_producer,
    "txn-producer": make_txn_producer,
    "consumer": make_consumer,
    "group-consumer": make_group_consumer,
}
"""What opens each kind of client: the maker a thread's client would come from."""


def die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when the spawning thread ends; exit now if it already did."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the prctl: nobody will signal us
        os._exit(1)


def open_client(kind: str, args: list[Any]) -> Any:
    """The client a first request opens (module docstring)."""
    if kind not in MAKERS:
        raise ValueError(f"unknown client kind {kind!r} (known: {', '.join(MAKERS)})")
    return MAKERS[kind](*args)


def _partition_keys(arg: Any) -> Any:
    """A dict argument with its JSON string keys made partition numbers again."""
    if isinstance(arg, dict):
        return {int(key) if str(key).lstrip("-").isdigit() else key: value for key, value in arg.items()}
    return arg


def to_wire(result: Any) -> Any:
    """A call's result as JSON can carry it: records and group events by
    :func:`~workloads.group_events.step_to_wire`, lists and tuples as lists, the rest as it is."""
    if isinstance(result, Received | GroupEvent):
        return step_to_wire(result)
    if isinstance(result, list | tuple):
        return [to_wire(item) for item in result]
    return result


def answer_of(client: Any, request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Serve one request: the client (opened by an ``open``) and the answer to write."""
    try:
        if request.get("call") == "open":
            return open_client(str(request["kind"]), list(request["args"])), {"ok": None}
        call = request.get("call")
        if client is None or call not in CALLS:
            raise ValueError(f"bad request {request!r} (client open: {client is not None})")
        args = [_partition_keys(arg) for arg in request.get("args", [])]
        return client, {"ok": to_wire(getattr(client, str(call))(*args))}
    except Exception as error:
        name = type(error).__name__ if isinstance(error, KNOWN_ERRORS) else "other"
        return client, {
            "error": name,
            "text": f"{error}" if name != "other" else f"{type(error).__name__}: {error}",
        }


def _read_requests(stream: IO[bytes], requests: queue.Queue[dict[str, Any]]) -> None:
    """The watchdog: hand each request line on; end the process at end of file."""
    for line in stream:
        requests.put(json.loads(line))
    os._exit(0)


def serve(requests: queue.Queue[dict[str, Any]], answers: IO[str]) -> None:
    """Answer requests in order until a ``close`` was answered."""
    client: Any = None
    while True:
        request = requests.get()
        client, answer = answer_of(client, request)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
        if request.get("call") == "close":
            return


def main(argv: list[str]) -> None:
    die_with_parent(int(argv[1]))
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    requests: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_read_requests, args=(sys.stdin.buffer, requests), daemon=True).start()
    serve(requests, answers)
    os._exit(0)  # the client is closed: no interpreter teardown waiting on a library's threads


if __name__ == "__main__":
    main(sys.argv)
