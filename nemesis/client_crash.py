"""Client crashes: a fault of the workload's clients, not of the brokers.

``client-crash`` (``--nemesis client-crash``, alone, in a mix, or a step of the
``client-crash-leader-crash`` package) SIGKILLs one of the workload's producer processes -- a
producer, plain or transactional, that the workload runs in a child process of its own under
``--client-processes`` (:mod:`workloads.client_host`) -- while it is in a call, if it makes one
within a few seconds.  ``consumer-crash`` (alone, in a mix, or a step of the
``consumer-crash-coordinator-crash`` package) does the same to one of its consumer processes
(:mod:`workloads.hosted_consumers`): a poll dies with it, and a group member dies without leaving,
so only its coordinator's session timer can end its membership.  That finds what a closed client (``consumer-churn``) cannot: an idempotent
producer that dies with batches in flight (its successor gets a new producer id; a retry of the
dead one's batch never comes), a transactional one that dies with its transaction open (the
successor of the same ``transactional.id`` must fence it, and its coordinator abort what it left
open, before any ``read_committed`` reader may pass it).  There is nothing to heal: the victim's
thread records the op in flight (``info``; or ``fail`` for a transaction never asked to commit,
which the coordinator must abort) and starts a new client process as a fresh process id at its
next op.

Three parts, each with one job:

* the **plan** -- the kind's drawn ``pick`` (:data:`nemesis.client_crash_plan.CRASH_PICKS`),
  from the schedule's seeded ``random.Random`` like every drawn parameter;
* the **ability** -- :class:`ClientCrash`: what the nemesis needs of the workload, as a
  structural protocol, so the nemesis never imports ``workloads``; :func:`check_crash` refuses the
  spec with a PlanError naming the flag when the workload lacks it, and packages that crash
  clients are refused through :attr:`nemesis.package_context.PackageContext.client_crash`;
* the **op** -- :func:`run_crash`:

================  ====================================================================
``f``             ``value``
================  ====================================================================
``client-crash``  invoke ``{"pick": 12}``; the completion adds ``"killed"``: ``{"process"`` (the
                  workload process whose client died; null for a group member, whose process
                  changes with each assignment), ``"pid"``, ``"client"`` (``producer``,
                  ``txn-producer``; for ``consumer-crash``: ``consumer``, ``group-consumer``),
                  ``"in_flight"`` (the call it was in: ``send``, ``begin``, ``commit``, ``abort``;
                  ``poll``, ``commit_sync``, ``commit_async``; null when it made none within
                  5 s), ``"interrupted"``
                  (true when that very call found the process dead -- its op's outcome is the
                  crash's)``}``.  ``ok`` when the process was killed and its thread saw it,
                  ``info`` with ``error`` when the thread did not see it in time or the workload
                  failed, ``fail`` when nothing was killed (no client process running)
================  ====================================================================

``consumer-crash`` ops have the same shape.  The victim's own ops tell the rest: its op in
flight ends ``info`` (or ``fail``, above) with an error naming the crash and the dead pid, and
its thread's next op is invoked by a fresh process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from nemesis.client_crash_plan import CLIENT_CRASH, CRASH_ROLES
from nemesis.consumer_churn import ConsumerChurn, check_churn
from nemesis.plan import PlanError
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder


@runtime_checkable
class ClientCrash(Protocol):
    """The optional ability of a workload whose client processes the nemesis may kill."""

    def crash_unavailable(self, role: str = "producer") -> str | None:
        """Why clients of ``role`` (``producer``, ``consumer``: :data:`CRASH_ROLES`) cannot crash
        in this run, naming the flag that allows it (None: they can)."""
        ...

    def crash_client(self, pick: int, role: str = "producer") -> Mapping[str, Any]:
        """SIGKILL running client process ``pick`` of ``role`` (modulo their count), mid-call if it can.

        Returns what happened (JSON-ready; an ``error`` key: the kill was not seen through).
        Raises LookupError when nothing was killed.
        """
        ...


def crash_ability(workload: object | None, role: str = "producer") -> ClientCrash | None:
    """``workload`` as the crash ability for clients of ``role`` when it has it in this run (None otherwise)."""
    if isinstance(workload, ClientCrash) and workload.crash_unavailable(role) is None:
        return workload
    return None


def group_crash_ability(workload: object | None) -> bool:
    """The workload's consumer group has members the nemesis may crash: consumers in processes
    and a group (what ``consumer-crash-coordinator-crash`` needs)."""
    return (
        crash_ability(workload, "consumer") is not None
        and isinstance(workload, ConsumerChurn)
        and workload.churn_unavailable() is None
    )


def check_crash(faults: tuple[str, ...], workload: object | None) -> None:
    """PlanError now, naming the flag, if ``faults`` crash clients that ``workload`` cannot host."""
    for fault, role in CRASH_ROLES.items():
        if fault not in faults or crash_ability(workload, role) is not None:
            continue
        if isinstance(workload, ClientCrash):
            raise PlanError(f"--nemesis {fault}: {workload.crash_unavailable(role)}")
        raise PlanError(
            f"--nemesis {fault} needs the workload's clients in processes (--client-processes),"
            " and this nemesis was given no workload that has them"
        )


def check_workload_faults(faults: tuple[str, ...], workload: object | None) -> ConsumerChurn | None:
    """Both workload faults' checks (:func:`check_crash`, :func:`nemesis.consumer_churn.check_churn`):
    the churn ability ``faults`` need (None: none)."""
    check_crash(faults, workload)
    return check_churn(faults, workload)


def run_crash(recorder: Recorder, workload: object | None, pick: int, fault: str = CLIENT_CRASH) -> Op:
    """Crash client ``pick`` of ``workload`` by ``fault`` (a kind of :data:`CRASH_ROLES`), recorded
    as one nemesis op (see the module docstring)."""
    role = CRASH_ROLES[fault]
    value = {"pick": pick}
    invocation = recorder.invoke(NEMESIS_PROCESS, fault, value)
    ability = crash_ability(workload, role)
    if ability is None:
        why = workload.crash_unavailable(role) if isinstance(workload, ClientCrash) else None
        return recorder.complete(
            invocation, "fail", value, error=why or "the workload has no client processes"
        )
    try:
        report = dict(ability.crash_client(pick, role))
    except LookupError as error:
        return recorder.complete(invocation, "fail", value, error=str(error))
    except Exception as error:  # the workload failed part-way: what it did is unknown
        return recorder.complete(invocation, "info", value, error=f"{type(error).__name__}: {error}")
    problem = report.pop("error", None)
    done = {**value, "killed": report}
    if problem is not None:
        return recorder.complete(invocation, "info", done, error=str(problem))
    return recorder.complete(invocation, "ok", done)
