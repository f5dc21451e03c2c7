"""Whether a scenario run met what its scenario expects, read from the stored run alone.

A scenario says, per configuration, what the checker must find (``[[expected]]``:
:class:`nemesis.scenario.Expectation`): ``kip101-loss`` under ``truncation.mode=high-watermark``
must lose writes.  An *invalid* verdict is then the point of the run, and the pages must say so
plainly, or the demo's reader sees a red badge and stops there (issue 36).  ``test.json`` embeds
the scenario's whole definition and the run's effective settings (``broker_config``), so the
expectation is judged here from the run directory -- the same judgement the runner and a
campaign make from the live spec (:meth:`harness.run.spec.TestSpec.scenario_problems`).

:func:`expectation_problems` is that judgement (None: not a scenario run, or not checked);
:func:`expectation_sentence` the line the run page, the index and ``tidemark check`` show:
``as expected: lost-write (permitted by truncation.mode=high-watermark)``, or ``NOT as
expected: lost-write not reported``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checker.anomaly_order import ordered
from nemesis.scenario import ScenarioError, parse_scenario

WARNING = "warning"


def expectation_problems(
    spec: Mapping[str, Any] | None, results: Mapping[str, Any] | None
) -> list[str] | None:
    """What in ``results`` contradicts the embedded scenario's expectation under the run's
    settings (``[]``: as expected); None for a run that is no scenario run or was not checked."""
    definition = (spec or {}).get("scenario_definition")
    if not isinstance(definition, dict) or results is None:
        return None
    try:
        scenario = parse_scenario(definition, f"scenario {(spec or {}).get('scenario')} (embedded)")
    except ScenarioError as error:
        return [f"its embedded scenario no longer loads: {error}"]
    settings = {str(key): str(value) for key, value in ((spec or {}).get("broker_config") or {}).items()}
    expectation = scenario.expectation_for(settings)
    if expectation is None:
        return ["no expectation written for these settings"]
    return expectation.problems(results)


def expectation_sentence(spec: Mapping[str, Any] | None, results: Mapping[str, Any] | None) -> str | None:
    """``as expected: ...`` (the anomalies found, causes first, each with the rule that permits
    it; or the verdict when none) or ``NOT as expected: ...`` (the problems); None when
    :func:`expectation_problems` is None."""
    problems = expectation_problems(spec, results)
    if problems is None or results is None:
        return None
    if problems:
        return "NOT as expected: " + "; ".join(problems)
    anomalies = results.get("anomalies", {})
    found = [
        f"{placed.name} (permitted by {anomalies[placed.name].get('rule')})"
        if anomalies[placed.name].get("expected")
        else placed.name
        for placed in ordered(anomalies)
        if placed.depth == 0 and anomalies[placed.name].get("severity") != WARNING
    ]
    verdict = {True: "valid", False: "invalid", "unknown": "unknown"}.get(results.get("valid"), "unknown")
    return "as expected: " + (", ".join(found) if found else verdict)
