"""Following the random schedule in time: each planned step at its moment, then its heal.

:meth:`nemesis.mechanism.Nemesis.run` registers its stop event and hands the loop to
:func:`follow_schedule`, which walks :meth:`Nemesis.plan` (pure, :mod:`nemesis.plan`) and, at
each step's time, carries it out by its kind:

* a fault package -- its planned steps through the scenario runner (:mod:`nemesis.package_run`);
  it heals itself;
* consumer churn -- one op through the workload's ability (:mod:`nemesis.consumer_churn`); the
  op leaves nothing to heal; so does a client crash (:mod:`nemesis.client_crash`), the workload
  being the config's;
* a single fault -- :meth:`Nemesis.execute_step`, then at the step's heal time
  :meth:`Nemesis.heal_step` (a fault that certainly did nothing is not healed).

It starts no further step once the *no-new-steps* event is set (:meth:`Nemesis.wind_down`, at
the run's time limit) and returns as soon as the stop event is set (heal-all sets both),
leaving whatever is in effect to :meth:`Nemesis.heal_all`.  A fault package already running
when the run winds down goes on to its end -- it gets the stop event, not the no-new-steps one
-- because a package cut mid-way tests nothing it was drawn for (measured in stop 24: 2 of 7
draws of a KAFKA-7128 package were cut off by a 30 s run).  Waits are on the events with a
deadline, never bare sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Protocol

from nemesis.client_crash import run_crash
from nemesis.client_crash_plan import CRASH_ROLES
from nemesis.consumer_churn import ConsumerChurn, run_churn
from nemesis.fault_kinds import HEALS
from nemesis.nemesis_config import NemesisConfig
from nemesis.package_run import PackageNemesis, run_package
from nemesis.plan import PlannedStep, TopicPartition
from testbed.cluster.protocol import Cluster
from testbed.record.ops import Op


class ScheduledNemesis(PackageNemesis, Protocol):
    """What following the schedule needs of the nemesis (:class:`nemesis.mechanism.Nemesis` has
    it; a protocol, so this module does not import the mechanism that calls it)."""

    @property
    def package_cluster(self) -> Cluster | None: ...

    @property
    def leader_partitions(self) -> tuple[TopicPartition, ...]: ...

    @property
    def churn(self) -> ConsumerChurn | None: ...

    config: NemesisConfig

    def plan(self) -> Iterator[PlannedStep]: ...

    def execute_step(
        self, step: PlannedStep, *, from_schedule: bool = ...
    ) -> tuple[Op | None, PlannedStep]: ...

    def heal_step(self, step: PlannedStep, *, from_schedule: bool = ...) -> Op | None: ...


def follow_schedule(
    nemesis: ScheduledNemesis, stop_event: threading.Event, no_new_steps: threading.Event
) -> None:
    """Carry out ``nemesis``'s schedule until ``stop_event`` is set, starting no step once
    ``no_new_steps`` is (times: seconds since this call)."""
    started = time.monotonic()
    for step in nemesis.plan():
        if not wait_until(started + step.at_seconds, stop_event, no_new_steps):
            return
        if step.is_package:
            assert nemesis.package_cluster is not None  # check_plan refused packages otherwise
            topic, group = nemesis.leader_partitions[0][0], nemesis.config.group
            run_package(nemesis, step, nemesis.package_cluster, topic, stop_event, group)
            continue
        if step.churn is not None:
            assert nemesis.churn is not None  # check_churn refused the spec otherwise
            run_churn(nemesis.recorder, nemesis.churn, step.churn)
            continue
        if step.fault in CRASH_ROLES:  # no action lock, as churn: it may wait for a busy victim
            run_crash(nemesis.recorder, nemesis.config.workload, step.params.get("pick", 0), step.fault)
            continue
        completion, resolved = nemesis.execute_step(step, from_schedule=True)
        if completion is None:
            return
        if completion.type == "fail" or step.fault not in HEALS:  # certainly nothing, or nothing to heal
            continue
        if not wait_until(started + step.heal_at_seconds, stop_event, no_new_steps):
            return
        if nemesis.heal_step(resolved, from_schedule=True) is None:
            return


POLL_SECONDS = 0.1
"""How often a wait on several events looks at the ones it is not blocked on."""


def wait_until(deadline: float, stop_event: threading.Event, *also: threading.Event) -> bool:
    """Wait until the monotonic ``deadline``; False as soon as ``stop_event`` or one of ``also`` is set."""
    events = (stop_event, *also)
    while (remaining := deadline - time.monotonic()) > 0:
        if stop_event.wait(min(remaining, POLL_SECONDS) if also else remaining) or any(
            e.is_set() for e in also
        ):
            return False
    return not any(event.is_set() for event in events)
