"""JUnit XML for CI: one test case per run, written with the ``junit-xml`` library.

CI systems (GitHub Actions test reporters, Jenkins, GitLab) read JUnit XML and show a
failed test per broken run with its message, so a nightly campaign's morning reading
starts with the runs that need attention.

**The rule** (:func:`case_outcome`), per run, first match wins:

1. no readable ``results.json`` -> **error** ("not checked": the harness or the checker
   broke; there is no verdict to judge);
2. a scenario expectation was given for the run (``expectation_problems[run]`` is a
   list, possibly empty; without one, a scenario run's is judged from its directory:
   :mod:`harness.report.expectation`) -> **passed** when the list is empty ("as expected": a scenario
   built to show loss in high-watermark mode passes when the loss is found), **failure**
   carrying the problems otherwise;
3. ``valid`` -> **passed**;
4. ``invalid`` and every anomaly permitted by the run's configuration
   (``expected_only``) -> **failure** by default, **passed** with
   ``expected_is_pass=True``.  Default failure because an expected anomaly is still data
   loss: a campaign that sets ``acks=1`` on purpose says so by passing the flag;
5. ``invalid`` -> **failure**;
6. ``unknown`` -> **skipped**, with the incomplete-evidence reasons: nothing was proven
   either way (CI shows skipped tests apart from passes, so it is not silently green).

A failure's message is the one-line anomaly summary, causes first with their consequences
after an arrow (``lost-write x3 (expected: acks=1) (-> lost-read x1 ...), ...``:
:mod:`checker.anomaly_order`); its text lists every anomaly in that order, each consequence
indented under its cause, with its rule and first example, then the incomplete reasons and the
report path.  Test case ``classname`` is
``tidemark.<scenario or test name>``; ``name`` is the run directory relative to ``base``
plus the settings that tell runs apart, so two runs of one campaign never share a name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

from junit_xml import TestCase, TestSuite, to_xml_report_string

from checker.anomaly_order import anomaly_phrases, ordered
from harness.report.expectation import expectation_problems as stored_expectation_problems
from testbed.record.rundir import REPORT_FILE
from testbed.record.stored_run import (
    StoredRun,
    history_span_seconds,
    load_stored_run,
    settings_phrase,
)

Outcome = Literal["passed", "failure", "error", "skipped"]
JUNIT_FILE: Final = "junit.xml"
"""A campaign's JUnit file name, beside its index."""
MAX_EXAMPLE_TEXT: Final = 600


@dataclasses.dataclass(frozen=True, slots=True)
class CaseOutcome:
    outcome: Outcome
    message: str
    """One line: why the case did not pass (empty when it passed)."""
    details: str
    """Several lines for the failure/error/skipped body, or the passed case's system-out."""


def _details(run: StoredRun) -> str:
    lines: list[str] = [f"run: {run.run_dir.resolve()}", f"settings: {settings_phrase(run.spec)}"]
    if run.scenario:
        lines.append(f"scenario: {run.scenario}")
    results = run.results or {}
    anomalies = results.get("anomalies", {})
    for placed in ordered(anomalies):  # causes first, each consequence indented under its cause
        name, anomaly, indent = placed.name, anomalies[placed.name], "  " * placed.depth
        rule = (
            f"expected under {anomaly.get('rule')}"
            if anomaly.get("expected")
            else "NOT expected under this config"
        )
        arrow = "-> " if placed.depth else ""
        lines.append(
            f"{indent}{arrow}{name} x{anomaly['count']} ({anomaly.get('severity', 'error')}; {rule})"
        )
        examples = anomaly.get("examples") or []
        if examples:
            text = json.dumps(examples[0], sort_keys=True, default=str)
            lines.append(
                f"{indent}  first example: "
                + (text if len(text) <= MAX_EXAMPLE_TEXT else text[:MAX_EXAMPLE_TEXT] + "…")
            )
    lines += [f"incomplete: {reason}" for reason in results.get("incomplete", [])]
    lines += [f"problem: {problem}" for problem in run.problems]
    report = run.run_dir / REPORT_FILE
    if report.is_file():
        lines.append(f"report: {report.resolve()}")
    return "\n".join(lines)


def case_outcome(
    run: StoredRun, *, expected_is_pass: bool = False, expectation_problems: Sequence[str] | None = None
) -> CaseOutcome:
    """How one run reads in JUnit terms (the rule is in the module docstring)."""
    details = _details(run)
    results = run.results
    if results is None:
        reason = "; ".join(run.problems) or "no results.json"
        return CaseOutcome("error", f"not checked: {reason}", details)
    summary = ", ".join(anomaly_phrases(results)) or "no anomalies"
    verdict = run.verdict
    if expectation_problems is not None:
        if not expectation_problems:
            return CaseOutcome(
                "passed", "", f"as expected (verdict {results.get('valid')!r}: {summary})\n{details}"
            )
        return CaseOutcome("failure", "not as expected: " + "; ".join(expectation_problems), details)
    if verdict == "valid":
        return CaseOutcome("passed", "", details)
    if verdict == "expected":
        if expected_is_pass:
            return CaseOutcome(
                "passed", "", f"invalid, every anomaly expected under its configuration: {summary}\n{details}"
            )
        return CaseOutcome(
            "failure", f"invalid (every anomaly expected under its configuration): {summary}", details
        )
    if verdict == "invalid":
        return CaseOutcome("failure", f"invalid: {summary}", details)
    reasons = "; ".join(str(r) for r in results.get("incomplete", [])) or "evidence incomplete"
    return CaseOutcome("skipped", f"unknown: {reasons}", details)


def _case_name(run: StoredRun, base: Path) -> str:
    try:
        relative = run.run_dir.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        relative = str(run.run_dir)
    return f"{relative} [{settings_phrase(run.spec)}]"


def junit_case(
    run_dir: Path | str,
    *,
    base: Path | str | None = None,
    expected_is_pass: bool = False,
    expectation_problems: Sequence[str] | None = None,
) -> TestCase:
    """The JUnit test case of one run directory."""
    run = load_stored_run(run_dir)
    if expectation_problems is None:  # judged from the run directory: a scenario run without a live spec
        expectation_problems = stored_expectation_problems(run.spec, run.results)
    outcome = case_outcome(run, expected_is_pass=expected_is_pass, expectation_problems=expectation_problems)
    case = TestCase(
        _case_name(run, Path(base) if base is not None else run.run_dir.parent),
        classname=f"tidemark.{run.scenario or run.name}",
        elapsed_sec=history_span_seconds(run.run_dir),
        file=str(run.run_dir / REPORT_FILE) if (run.run_dir / REPORT_FILE).is_file() else None,
    )
    if outcome.outcome == "failure":
        case.add_failure_info(message=outcome.message, output=outcome.details)
    elif outcome.outcome == "error":
        case.add_error_info(message=outcome.message, output=outcome.details)
    elif outcome.outcome == "skipped":
        case.add_skipped_info(message=outcome.message, output=outcome.details)
    else:
        case.stdout = outcome.details
    return case


def _common_base(run_dirs: Sequence[Path]) -> Path:
    if not run_dirs:
        return Path.cwd()
    parents = [str(path.resolve().parent) for path in run_dirs]
    return Path(os.path.commonpath(parents))


def write_junit(
    run_dirs: Iterable[Path | str],
    path: Path | str,
    *,
    suite_name: str = "tidemark",
    base: Path | str | None = None,
    expected_is_pass: bool = False,
    expectation_problems: Mapping[Path, Sequence[str]] | None = None,
) -> Path:
    """Write one JUnit test suite with a test case per run directory to ``path`` (atomically).

    ``base``: names are run directories relative to it (default: the runs' common parent).
    ``expectation_problems``: run directory -> the scenario expectation's problems for that
    run (``[]`` = as expected); runs absent from it are judged by their verdict.  Keys are
    compared after ``Path.resolve()``.
    """
    runs = [Path(run_dir) for run_dir in run_dirs]
    root = Path(base) if base is not None else _common_base(runs)
    problems = {Path(k).resolve(): list(v) for k, v in (expectation_problems or {}).items()}
    cases = [
        junit_case(
            run,
            base=root,
            expected_is_pass=expected_is_pass,
            expectation_problems=problems.get(run.resolve()),
        )
        for run in runs
    ]
    text = to_xml_report_string([TestSuite(suite_name, cases)], prettyprint=True, encoding="utf-8")
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)
    return target
