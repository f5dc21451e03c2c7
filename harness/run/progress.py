"""The live progress line of a run: ops/s, ok/fail/info counts, current faults."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from testbed.record.ops import Op
from testbed.record.recorder import Recorder


class ProgressLine:
    """Counts completions as the recorder sees them and prints one line a second.

    On a terminal the line rewrites itself; elsewhere (CI logs) it prints every 5 s.
    """

    def __init__(self, recorder: Recorder, faults: Callable[[], list[str]], out: Any) -> None:
        self._faults = faults
        self._out = out
        self._counts = {"ok": 0, "fail": 0, "info": 0}
        self._completed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._started = time.monotonic()
        recorder.listeners.append(self._count)
        self._interactive = bool(getattr(out, "isatty", lambda: False)())

    def _count(self, op: Op) -> None:
        if op.type != "invoke" and not op.is_nemesis:
            self._counts[op.type] += 1
            self._completed += 1

    def line(self, rate: float) -> str:
        faults = ", ".join(self._faults()) or "none"
        elapsed = time.monotonic() - self._started
        return (
            f"{elapsed:6.1f} s  {rate:7.1f} ops/s  ok {self._counts['ok']}  fail {self._counts['fail']}  "
            f"info {self._counts['info']}  faults: {faults}"
        )

    def _loop(self) -> None:
        last_count, last_time, last_print = 0, time.monotonic(), 0.0
        while not self._stop.wait(1.0):
            now = time.monotonic()
            rate = (self._completed - last_count) / max(now - last_time, 1e-6)
            last_count, last_time = self._completed, now
            if self._interactive:
                print("\r" + self.line(rate).ljust(100), end="", file=self._out, flush=True)
            elif now - last_print >= 5:
                print(self.line(rate), file=self._out, flush=True)
                last_print = now

    def __enter__(self) -> ProgressLine:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        if self._interactive:
            print(file=self._out)
