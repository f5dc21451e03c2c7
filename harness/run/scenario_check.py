"""A scenario file checked against the checker: every anomaly its expectations name must be one
the checker reports.

``anomalies = ["lost-writes"]`` (a typo of ``lost-write``) parses as TOML and as a scenario, then
runs for minutes and ends in "lost-writes not reported" -- an expectation no run can meet.  The
scenario format lives in :mod:`nemesis.scenario`, which may not import the checker; the harness,
which knows both, refuses such a file before anything starts, naming the file, the line and the
names the checker knows.  ``tidemark scenario show``, ``tidemark campaign`` and ``tidemark run
--scenario`` load scenario files through :func:`load_checked_scenario`.
"""

from __future__ import annotations

from pathlib import Path

from checker.definitions import ALL_CHECKS
from nemesis.scenario import Scenario, ScenarioError, line_of, load_scenario


def load_checked_scenario(name_or_path: str) -> Scenario:
    """:func:`nemesis.scenario.load_scenario`, then :func:`check_expected_anomalies`; ScenarioError
    (one line naming the file) for either."""
    scenario = load_scenario(name_or_path)
    check_expected_anomalies(scenario)
    return scenario


def check_expected_anomalies(scenario: Scenario) -> None:
    """ScenarioError naming ``file:line``, the expectation and the name, for an anomaly an
    expectation's ``anomalies`` or ``absent`` gives that no check reports."""
    try:
        text = Path(scenario.source).read_text(encoding="utf-8")
    except (OSError, ValueError):
        text = ""  # a scenario that was not read from a file (embedded in a spec): no line to name
    for number, expectation in enumerate(scenario.expected, start=1):
        for key, names in (("anomalies", expectation.anomalies), ("absent", expectation.absent)):
            for name in names:
                if name not in ALL_CHECKS:
                    line = line_of(text, "expected", number, key)
                    raise ScenarioError(
                        f"{scenario.source}{line}: expected {number}: {key}: no anomaly {name!r}"
                        f" (known: {', '.join(sorted(ALL_CHECKS))})"
                    )
