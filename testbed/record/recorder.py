"""The one place that numbers and timestamps ops and appends them to the history.

Clients (workload threads) and the nemesis record through a shared :class:`Recorder`:
it assigns ``index`` in append order and ``time`` as nanoseconds since the test started
(monotonic clock), and writes each op to ``history.jsonl`` at once (flushed), so a run
killed at any point still has every op it completed.  Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.record.history import HistoryWriter
from testbed.record.ops import Op, OpType, Process


class Recorder:
    def __init__(self, path: Path, *, started_ns: int | None = None) -> None:
        self._writer = HistoryWriter(path)
        self._lock = threading.Lock()
        self._next_index = 0
        self.started_ns = started_ns if started_ns is not None else time.monotonic_ns()
        self.listeners: list[Callable[[Op], None]] = []
        """Called (under the lock, keep them cheap) with every op recorded: progress lines, counters."""

    def record(
        self,
        process: Process,
        type: OpType,
        f: str,
        value: Any = None,
        *,
        error: str | None = None,
        node: str | None = None,
    ) -> Op:
        with self._lock:
            op = Op(
                self._next_index, time.monotonic_ns() - self.started_ns, process, type, f, value, error, node
            )
            self._next_index += 1
            self._writer.append(op)
            for listener in self.listeners:
                listener(op)
        return op

    def invoke(self, process: Process, f: str, value: Any = None, *, node: str | None = None) -> Op:
        return self.record(process, "invoke", f, value, node=node)

    def complete(
        self,
        invocation: Op,
        type: OpType,
        value: Any = None,
        *,
        error: str | None = None,
        node: str | None = None,
    ) -> Op:
        """Record the completion of ``invocation`` (same process and f)."""
        return self.record(
            invocation.process,
            type,
            invocation.f,
            value,
            error=error,
            node=node if node is not None else invocation.node,
        )

    def close(self) -> None:
        self._writer.close()
