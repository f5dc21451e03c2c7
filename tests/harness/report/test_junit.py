"""JUnit XML: one test case per run, the pass/fail rule, and a file CI parsers accept."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from harness.report.junit import case_outcome, write_junit
from testbed.record.stored_run import load_stored_run
from tests.harness.report.report_runs import RunShape, make_checked_run, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("campaign")
    made = {
        "valid": RunShape(),
        "invalid": RunShape(lost_writes=3, divergent_offsets=1),
        "expected": RunShape(truncation="high-watermark", lost_writes=2, scenario="kip101-loss"),
        "unknown": RunShape(drain_complete=False),
    }
    for name, shape in made.items():
        make_checked_run(root / name, shape)
    write_run(root / "not-checked")
    return {name: root / name for name in [*made, "not-checked"]}


@pytest.mark.parametrize(
    ("run", "expected_is_pass", "outcome", "message"),
    [
        ("valid", False, "passed", ""),
        ("invalid", False, "failure", "invalid: lost-write x3, replica-divergence x1"),
        ("invalid", True, "failure", "invalid: lost-write x3"),  # the flag only excuses expected anomalies
        (
            "expected",
            False,
            "failure",
            "invalid (every anomaly expected under its configuration): lost-write x2 "
            "(expected: truncation.mode=high-watermark)",
        ),
        ("expected", True, "passed", ""),
        (
            "unknown",
            False,
            "skipped",
            "unknown: partition(s) 1 of topic tidemark have no complete final drain",
        ),
        ("not-checked", False, "error", "not checked: no results.json"),
    ],
)
def test_the_verdict_rule(
    runs: dict[str, Path], run: str, expected_is_pass: bool, outcome: str, message: str
) -> None:
    case = case_outcome(load_stored_run(runs[run]), expected_is_pass=expected_is_pass)
    assert case.outcome == outcome
    assert case.message.startswith(message)
    assert f"run: {runs[run]}" in case.details


def test_a_scenario_passes_when_its_expectation_holds_whatever_the_verdict(runs: dict[str, Path]) -> None:
    as_expected = case_outcome(load_stored_run(runs["expected"]), expectation_problems=[])
    assert (as_expected.outcome, as_expected.message) == ("passed", "")
    assert as_expected.details.startswith("as expected (verdict False: lost-write x2")
    surprised = case_outcome(
        load_stored_run(runs["valid"]),
        expectation_problems=["verdict True, expected False", "lost-write not reported"],
    )
    assert surprised.outcome == "failure"
    assert surprised.message == "not as expected: verdict True, expected False; lost-write not reported"
    unchecked = case_outcome(load_stored_run(runs["not-checked"]), expectation_problems=[])
    assert unchecked.outcome == "error"  # no verdict: nothing to compare with the expectation


def test_the_failure_text_lists_anomalies_examples_and_the_report(runs: dict[str, Path]) -> None:
    (runs["invalid"] / "report.html").write_text("<html></html>")
    details = case_outcome(load_stored_run(runs["invalid"])).details
    assert "lost-write x3 (error; NOT expected under this config)" in details
    assert '  first example: {"offset":' in details
    assert f"report: {runs['invalid'] / 'report.html'}" in details
    assert (
        "settings: truncation=leader-epoch acks=all min-isr=2 unclean=false flush=never faults=kill,pause,partition"
        in details
    )


def parse(path: Path) -> ElementTree.Element:
    return ElementTree.parse(path).getroot()


def test_the_file_has_one_case_per_run_with_the_counts_ci_reads(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    target = write_junit(runs.values(), tmp_path / "junit.xml", suite_name="nightly")
    suite = parse(target).find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("name", "tests", "failures", "errors", "skipped")} == {
        "name": "nightly",
        "tests": "5",
        "failures": "2",
        "errors": "1",
        "skipped": "1",
    }
    cases = {case.get("name", "").split(" ")[0]: case for case in suite.iter("testcase")}
    assert sorted(cases) == ["expected", "invalid", "not-checked", "unknown", "valid"]
    assert cases["expected"].get("classname") == "tidemark.kip101-loss"
    assert cases["valid"].get("classname") == "tidemark.queue"
    assert cases["valid"].get("name") == (
        "valid [truncation=leader-epoch acks=all min-isr=2 unclean=false flush=never faults=kill,pause,partition]"
    )
    assert float(cases["valid"].get("time") or 0) == pytest.approx(22.3, abs=0.2)  # the history's span
    failure = cases["invalid"].find("failure")
    assert failure is not None and (failure.get("message") or "").startswith("invalid: lost-write x3")
    assert cases["unknown"].find("skipped") is not None and cases["not-checked"].find("error") is not None
    assert cases["valid"].find("system-out") is not None


def test_expectation_problems_are_matched_by_resolved_path(runs: dict[str, Path], tmp_path: Path) -> None:
    roundabout = runs["invalid"].parent / "valid" / ".." / "invalid"
    target = write_junit([runs["invalid"]], tmp_path / "junit.xml", expectation_problems={roundabout: []})
    suite = parse(target).find("testsuite")
    assert suite is not None and suite.get("failures") == "0"


def test_names_are_relative_to_the_base_given(runs: dict[str, Path], tmp_path: Path) -> None:
    target = write_junit([runs["valid"]], tmp_path / "junit.xml", base=runs["valid"].parent.parent)
    case = parse(target).find("testsuite/testcase")
    assert case is not None and case.get("name", "").startswith(f"{runs['valid'].parent.name}/valid [")


def test_characters_xml_cannot_carry_do_not_break_the_file(tmp_path: Path) -> None:
    make_checked_run(tmp_path / "run", RunShape(lost_writes=1))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    results["anomalies"]["lost-write"]["examples"][0]["value"] = "<&>\x01\x1b]0;\"'"
    results["incomplete"] = ["a reason with <xml> & \x00 in it"]
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    target = write_junit([tmp_path / "run"], tmp_path / "junit.xml")
    failure = parse(target).find("testsuite/testcase/failure")
    assert failure is not None and "a reason with <xml> &" in (failure.text or "")


def test_the_file_is_replaced_atomically(runs: dict[str, Path], tmp_path: Path) -> None:
    write_junit([runs["valid"]], tmp_path / "junit.xml")
    write_junit([runs["valid"]], tmp_path / "junit.xml")
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]
