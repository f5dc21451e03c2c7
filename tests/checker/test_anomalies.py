"""The anomaly registry (``checker.anomalies``): every entry documented and implemented by both
engines, the names and tuples derived from it, and reports that list causes first."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import checker.definitions as definitions
from checker.anomalies import ANOMALIES, BY_NAME, CONDITIONS, FAMILIES, WARNING
from checker.anomaly_order import anomaly_phrases, causes_first
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine
from checker.summary import _anomaly_text
from tests.checker.synthetic import Plan, write_run

NAMES = [anomaly.name for anomaly in ANOMALIES]
DEMO = (
    "hw-regression",
    "incomplete-leader",
    "inconsistent-offsets",
    "duplicate",
    "lost-read",
    "lost-write",
    "nonmonotonic-poll",
    "nonmonotonic-send",
    "poll-skip",
    "realtime-order",
    "stale-read",
    "truncated-committed",
)
"""Twelve kinds as the demo's high-watermark run reports them (alphabetical in ``results.json``)."""


@pytest.mark.parametrize("engine", [PandasEngine, SparkEngine], ids=["pandas", "spark"])
def test_every_entry_has_an_implementation_in_the_engine(engine: type[Any]) -> None:
    """Each engine module declares what it flags (``IMPLEMENTS``); the engine is their union."""
    assert sorted(set(NAMES) - engine.implements) == [], f"{engine.name} implements no such check"
    assert sorted(engine.implements - set(NAMES)) == [], f"{engine.name} implements checks the registry lacks"


def test_the_driver_refuses_a_check_its_engine_does_not_implement(tmp_path: Path) -> None:
    write_run(tmp_path, Plan(seed=3))
    engine = PandasEngine()
    engine.implements = frozenset(NAMES) - {"lost-read"}
    with pytest.raises(ValueError, match="the pandas engine does not implement lost-read"):
        check_pass(engine, [load_run(tmp_path)], NAMES, 5)


def _definitions(module: str) -> list[str]:
    """The names a module's docstring defines: its ``* **name** --`` bullets."""
    doc = __import__(module, fromlist=["_"]).__doc__ or ""
    return re.findall(r"^\* \*\*([A-Za-z0-9-]+)\*\* --", doc, re.MULTILINE)


def test_every_entry_has_one_doc_line_and_one_long_definition() -> None:
    defined: dict[str, list[str]] = {}
    for module in sorted({anomaly.definition for anomaly in ANOMALIES}):
        for name in _definitions(module):
            defined.setdefault(name, []).append(module)
    for anomaly in ANOMALIES:
        assert anomaly.doc.strip() and "\n" not in anomaly.doc, f"{anomaly.name} lacks its one-line doc"
        assert defined.get(anomaly.name) == [anomaly.definition], f"{anomaly.name}: defined in {defined}"
    assert sorted(set(defined) - set(NAMES)) == [], "a definition of no registry entry"


def test_the_names_and_tuples_of_definitions_are_the_registrys() -> None:
    assert tuple(NAMES) == definitions.ALL_CHECKS
    for anomaly in ANOMALIES:
        assert getattr(definitions, anomaly.name.upper().replace("-", "_")) == anomaly.name
    families = {
        "VALUE_CHECKS": "value",
        "POLL_CHECKS": "poll order",
        "SEND_CHECKS": "send order",
        "REPLICA_CHECKS": "replica",
        "GROUP_CHECKS": "group",
        "INVARIANT_CHECKS": "invariant",
        "LIVENESS_CHECKS": "liveness",
    }
    for constant, family in families.items():
        assert getattr(definitions, constant) == tuple(a.name for a in ANOMALIES if a.family.name == family)
    # unseen and divergent-tail: an uncommitted tail may be anything; int-send-skip and G0: Kafka's
    # transaction model allows them (Jepsen's tests/kafka.clj keeps them as allowed too).
    assert {
        "unseen",
        "divergent-tail",
        "int-send-skip",
        "G0",
        "G0-process",
        "G0-realtime",
    } == definitions.WARNINGS
    assert [
        definitions.severity("stalled", definitions.Liveness(mode=mode)) for mode in ("warn", "strict")
    ] == [
        "warning",
        "error",
    ]


def test_every_family_is_one_engine_question_and_every_entry_well_formed() -> None:
    questions = {family.question for family in FAMILIES}
    assert questions == {
        "value_anomalies",
        "offset_anomalies",
        "order_anomalies",
        "divergence",
        "group_anomalies",
        "invariant_anomalies",
        "liveness",
        "txn_anomalies",
    }
    for anomaly in ANOMALIES:
        assert anomaly.family in FAMILIES and anomaly.evidence
        assert anomaly.permitted_by <= set(CONDITIONS)
        assert all(BY_NAME[name].severity != WARNING for name in anomaly.implies), anomaly.name


def test_the_demos_report_order_puts_the_causes_first() -> None:
    placed = causes_first(DEMO)
    order = [p.name for p in placed]
    assert order[0] == "lost-write"
    for consequence in ("lost-read", "hw-regression", "inconsistent-offsets", "realtime-order", "stale-read"):
        assert order.index("lost-write") < order.index(consequence)
    causes = [p.name for p in placed if p.depth == 0]
    assert causes == ["lost-write", "truncated-committed"]
    under = {p.name: p.parent for p in placed}
    assert under["stale-read"] == "nonmonotonic-poll"  # every nonmonotonic-poll is a stale-read
    assert under["realtime-order"] == "nonmonotonic-send"  # every nonmonotonic-send is a realtime-order
    assert under["lost-read"] == "lost-write" and under["hw-regression"] == "incomplete-leader"


def test_a_consequence_without_its_reported_cause_is_a_cause_and_warnings_come_last() -> None:
    placed = causes_first(["unseen", "stale-read", "realtime-order"], warnings=["unseen"])
    assert [(p.name, p.depth) for p in placed] == [("stale-read", 0), ("realtime-order", 0), ("unseen", 0)]
    # Implication is followed through kinds that were not reported: lost-write -> lost-read -> stale-read.
    assert [(p.name, p.depth) for p in causes_first(["stale-read", "lost-write"])] == [
        ("lost-write", 0),
        ("stale-read", 1),
    ]


def test_phrases_fold_consequences_under_their_cause() -> None:
    results = {
        "anomalies": {
            "incomplete-leader": {"count": 1, "severity": "error"},
            "lost-write": {"count": 3, "expected": True, "rule": "acks=1", "severity": "error"},
            "realtime-order": {"count": 2, "severity": "error"},
            "unseen": {"count": 4, "severity": "warning"},
        }
    }
    assert anomaly_phrases(results) == [
        "lost-write x3 (expected: acks=1) (-> realtime-order x2)",
        "incomplete-leader x1",
        "unseen x4 [warning]",
    ]


def test_the_campaign_summary_sums_runs_and_lists_causes_first() -> None:
    def result(**counts: int) -> dict[str, Any]:
        anomalies = {
            name.replace("_", "-"): {"count": n, "expected": name != "lost_read", "severity": "error"}
            for name, n in counts.items()
        }
        return {"anomalies": anomalies}

    text = _anomaly_text([result(lost_read=1, realtime_order=2), result(lost_write=3, realtime_order=1)])
    assert text == ["lost-write x3* (-> lost-read x1, realtime-order x3*)"]
