"""Running one fault package: its planned steps through the scenario runner, framed by an op.

A package (:mod:`nemesis.packages`) is planned as scenario steps; this module carries them out
with :class:`nemesis.scenario_run.ScenarioRun` against the same :class:`~nemesis.mechanism.Nemesis`
the schedule uses, so each fault and heal inside it is recorded exactly as a single fault's is.
Around them it records one op of its own, so a reader of the history (and a shrinker) knows
which choreography the faults belonged to:

=============  ========================================================================
``f``          ``value``
=============  ========================================================================
``package``    ``{"package": "leader-crash-storm", "steps": [...]}`` -- the planned steps, in
               the scenario file's vocabulary; completed ``ok`` when every step ran, ``info``
               with ``"error"`` when one could not (a wait timed out) or the run ended first;
               ``"unmet"`` lists the waits with ``required = false`` that timed out (an
               election the system under test refused is its decision, not a failed step)
=============  ========================================================================

Whatever the package leaves in effect -- because a step failed, or because a role had no node
-- is healed before the schedule goes on (:meth:`Nemesis.heal_in_effect`); when the run is
ending, :meth:`Nemesis.heal_all` does that instead.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from nemesis.plan import PlannedStep
from nemesis.scenario import ScenarioError, ScenarioFailed, parse_scenario
from nemesis.scenario_run import MarkerSender, ScenarioContext, ScenarioNemesis, ScenarioRun
from testbed.cluster.protocol import Cluster
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder

logger = logging.getLogger(__name__)

PACKAGE_OP = "package"


class PackageNemesis(ScenarioNemesis, Protocol):
    """What running a package needs of the nemesis (:class:`nemesis.mechanism.Nemesis` has it;
    a protocol, so this module does not import the mechanism that calls it)."""

    @property
    def recorder(self) -> Recorder: ...

    @property
    def markers(self) -> MarkerSender | None:
        """The workload's marker sends (None: it has none)."""
        ...

    def heal_in_effect(self) -> list[Op]:
        """Heal whatever is in effect now, leaving the schedule running."""
        ...


class _NoMarkers:
    """The workload sends no markers: a package plans none then
    (:attr:`nemesis.packages.PackageContext.markers`), so one reaching here is a planning bug."""

    def send_marker(self, partition: int, bootstrap: str | None = None) -> object:
        raise ScenarioFailed("this run's workload sends no markers")


def run_package(
    nemesis: PackageNemesis,
    step: PlannedStep,
    cluster: Cluster,
    topic: str,
    stop_event: threading.Event,
    group: str | None = None,
) -> None:
    """Run the package ``step`` on ``cluster`` (``topic`` is the workload's, ``group`` its consumer
    group, whose ``__consumer_offsets`` partition a package's roles may name), recording it."""
    steps = [dict(planned) for planned in step.steps]
    value = {"package": step.fault, "steps": steps}
    invocation = nemesis.recorder.invoke(NEMESIS_PROCESS, PACKAGE_OP, value)
    problem: str | None = None
    scenario_run: ScenarioRun | None = None
    try:
        scenario = parse_scenario({"name": step.fault, "step": steps}, f"fault package {step.fault}")
        context = ScenarioContext(
            cluster=cluster,
            nemesis=nemesis,
            workload=nemesis.markers or _NoMarkers(),
            topic=topic,
            log=logger.info,
            stop=stop_event,
            group=group,
        )
        scenario_run = ScenarioRun(scenario, context)
        scenario_run.run()
        if stop_event.is_set():
            problem = "the run ended before the package did"
    except (ScenarioFailed, ScenarioError) as error:
        problem = str(error)
        logger.info("fault package %s stopped: %s", step.fault, error)
    if scenario_run is not None and scenario_run.unmet:  # the system's decisions, not the package's failures
        value["unmet"] = scenario_run.unmet
    if problem is None:
        nemesis.recorder.complete(invocation, "ok", value)
    else:
        nemesis.recorder.complete(invocation, "info", value, error=problem)
    if not stop_event.is_set():
        nemesis.heal_in_effect()
