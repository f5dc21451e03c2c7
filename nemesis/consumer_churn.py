"""Consumer churn: a fault of the workload's consumer group, not of the brokers.

``consumer-churn`` (``--nemesis consumer-churn``, alone or in a mix) stops one of the workload's
running group consumers and starts a new one, under a fresh process id, in the same group.  Half
the draws stop it by **leaving** (the client closes: LeaveGroup, an immediate rebalance), half by
**stalling** it (it stops polling while its client stays open and keeps heartbeating, so the
group waits for it up to the rebalance timeout before it is dropped -- an application stuck in
its processing).  Which way, and which consumer, follow from the schedule's seed.  The heal is
that the number of consumers is back: the op itself starts the replacement, so it completes with
the count restored and there is nothing left for heal-all to undo.

Three parts, each with one job:

* the **plan** -- :func:`nemesis.churn_plan.plan_churn`: pure, from the schedule's ``random.Random``;
* the **ability** -- :class:`ConsumerChurn`: what the nemesis needs of the workload, as a
  structural protocol, so the nemesis never imports ``workloads`` (the ``queue`` workload under
  ``--consume-via subscribe`` has it; :func:`check_churn` refuses the spec with a PlanError
  naming the flag otherwise);
* the **op** -- :func:`run_churn`: one nemesis op around the workload's churn:

=================  ====================================================================
``f``              ``value``
=================  ====================================================================
``consumer-churn`` invoke ``{"stop": "leave"|"stall", "pick": 1234}`` (``pick`` chooses the
                   victim: the running consumers in start order, modulo their count); the
                   completion adds ``"stopped": {"process", "consumer"}`` and
                   ``"started": {"process"}``; ``ok`` when the stop was seen to happen
                   (closed, or no longer polling) and the newcomer started, ``info`` with
                   ``error`` when the stop was asked but not seen in time (or the workload
                   failed), ``fail`` when nothing was done (no consumer running)
=================  ====================================================================

The workload's own ops tell the rest: the stopped consumer's ``revoke``, the newcomer's
``assign``, the survivors' rebalance (``docs/consumer-groups.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from nemesis.churn_plan import ChurnPlan
from nemesis.plan import PlanError
from nemesis.spec import CONSUMER_CHURN
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder


@runtime_checkable
class ConsumerChurn(Protocol):
    """The optional ability of a workload whose consumers the nemesis may churn."""

    def churn_unavailable(self) -> str | None:
        """Why churn cannot happen in this run, naming the flag that allows it (None: it can)."""
        ...

    def churn_consumer(self, stop: str, pick: int) -> Mapping[str, Any]:
        """Stop running consumer ``pick`` (modulo their count) by ``stop`` and start a new one.

        Returns what happened (JSON-ready; an ``error`` key: the stop was not seen in time).
        Raises LookupError when nothing was done.
        """
        ...


def check_churn(faults: tuple[str, ...], workload: object | None) -> ConsumerChurn | None:
    """``workload`` as the churn ability ``faults`` need (None: they need none); PlanError now,
    naming the flag, if they ask for churn that ``workload`` cannot do."""
    if CONSUMER_CHURN not in faults:
        return None
    if not isinstance(workload, ConsumerChurn):
        raise PlanError(
            f"--nemesis {CONSUMER_CHURN} needs the workload's consumer group "
            "(--consume-via subscribe), and this nemesis was given no workload that has one"
        )
    problem = workload.churn_unavailable()
    if problem is not None:
        raise PlanError(f"--nemesis {CONSUMER_CHURN}: {problem}")
    return workload


def run_churn(recorder: Recorder, workload: ConsumerChurn, plan: ChurnPlan) -> Op:
    """Carry out ``plan`` through ``workload``, recorded as one nemesis op (see the module docstring)."""
    value = {"stop": plan.stop, "pick": plan.pick}
    invocation = recorder.invoke(NEMESIS_PROCESS, CONSUMER_CHURN, value)
    try:
        report = dict(workload.churn_consumer(plan.stop, plan.pick))
    except LookupError as error:
        return recorder.complete(invocation, "fail", value, error=str(error))
    except Exception as error:  # the workload failed part-way: what it did is unknown
        return recorder.complete(invocation, "info", value, error=f"{type(error).__name__}: {error}")
    problem = report.pop("error", None)
    done = {**value, **{key: item for key, item in report.items() if key not in value}}
    if problem is not None:
        return recorder.complete(invocation, "info", done, error=str(problem))
    return recorder.complete(invocation, "ok", done)
