"""Acting on several nodes at once, and turning what each did into the outcome of one op.

A nemesis op covers a set of nodes; the op model wants one completion for it (DESIGN.md):
``ok`` when every node did its part, ``fail`` only when it is certain that nothing happened
anywhere (every node refused definitely: a command exited non-zero, the broker was not running),
``info`` for anything else (a timeout, a lost connection, some nodes done and some not). This
module is that rule, used by every fault and heal of :mod:`nemesis.mechanism`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nemesis.plan import PlanError
from testbed.nodes.remote import CommandFailed, RemotePathNotFound
from testbed.record.ops import Op
from testbed.record.recorder import Recorder


class Refused(Exception):
    """A node definitely did not do its part (e.g. the broker was not running to be signalled)."""


@dataclasses.dataclass(frozen=True)
class Failure:
    definite: bool
    message: str


def on_nodes(nodes: Sequence[str], action: Callable[[str], None], *, parallel: bool) -> dict[str, Failure]:
    """Run ``action`` on every node; returns the nodes that did not do their part, and how sure that is.

    ``parallel``: one thread per node, so a cut lands at nearly the same moment everywhere; without
    it the nodes go in turn and no thread is started (the signal handler's heal-all path).
    """
    failures: dict[str, Failure] = {}

    def attempt(node: str) -> None:
        try:
            action(node)
        except (Refused, PlanError, CommandFailed, RemotePathNotFound) as error:
            failures[node] = Failure(True, str(error))
        except Exception as error:  # RemoteTimeout, lost connection, anything unforeseen: effect unknown
            failures[node] = Failure(False, f"{type(error).__name__}: {error}")

    if not parallel or len(nodes) == 1:
        for node in nodes:
            attempt(node)
        return failures
    threads = [
        threading.Thread(target=attempt, args=(node,), name=f"nemesis-{node}", daemon=True) for node in nodes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # every action is bounded by remote timeouts
    return failures


def complete(
    recorder: Recorder, invocation: Op, value: dict[str, Any], failures: Mapping[str, Failure], count: int
) -> Op:
    """Record the completion of ``invocation`` over ``count`` nodes given their ``failures``."""
    if not failures:
        return recorder.complete(invocation, "ok", value)
    errors = {node: failures[node].message for node in sorted(failures)}
    certain = len(failures) == count and all(failure.definite for failure in failures.values())
    summary = "; ".join(f"{node}: {message}" for node, message in errors.items())
    return recorder.complete(
        invocation, "fail" if certain else "info", {**value, "errors": errors}, error=summary
    )
