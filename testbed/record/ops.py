"""The one operation model shared by workloads, nemesis, harness and checker.

Every event of a test is an :class:`Op`, as in Jepsen: a client or the nemesis
*invokes* an operation, and later *completes* it with one of three outcomes:

* ``ok``   -- it certainly took effect (a send was acknowledged; a poll returned records);
* ``fail`` -- it certainly did not take effect (a definite error from the broker);
* ``info`` -- nobody knows (timeout, lost connection).  A process whose op ended ``info``
  never invokes again: a fresh process id takes over, so "unknown" stays attached to
  exactly one op.

Why one model: the checker reads client ops and nemesis ops from the same history,
and reports shade fault windows using the nemesis ops' times.  Keeping them in one
type means there is exactly one serialisation (see :mod:`testbed.record.history`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: tuple[OpType, ...] = ("invoke", "ok", "fail", "info")

NEMESIS_PROCESS = "nemesis"
"""The ``process`` of every fault and heal op."""

Process = int | str
"""A client process number, or :data:`NEMESIS_PROCESS`."""


@dataclasses.dataclass(frozen=True, slots=True)
class Op:
    """One line of a history.

    ``index`` is the position in the history (0, 1, 2, ...); ``time`` is nanoseconds
    since the test started (monotonic clock).  ``f`` names the function: ``send``,
    ``poll`` for the queue workload; ``kill``, ``start``, ``pause``, ``resume``,
    ``partition``, ``heal``, ``power-loss``, ... for the nemesis.  ``value`` depends on
    ``f`` (see ``docs/history.md``); ``error`` is set on ``fail``/``info`` completions;
    ``node`` names the broker the op talked to, when one is known.
    """

    index: int
    time: int
    process: Process
    type: OpType
    f: str
    value: Any = None
    error: str | None = None
    node: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to ``history.jsonl`` (``None`` fields omitted)."""
        out: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
        }
        if self.value is not None:
            out["value"] = self.value
        if self.error is not None:
            out["error"] = self.error
        if self.node is not None:
            out["node"] = self.node
        return out

    @property
    def is_nemesis(self) -> bool:
        return self.process == NEMESIS_PROCESS
