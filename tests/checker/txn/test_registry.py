"""The transactional family's registry entries: data from :mod:`checker.txn.registry`, checked on
import like every entry; warnings where Kafka allows the anomaly, permits where data loss explains
it, and reports that fold each consequence under its cause."""

from __future__ import annotations

import pytest

from checker.anomalies import ANOMALIES, BY_NAME, TXN, WARNING, Anomaly, _check_registry
from checker.anomaly_order import causes_first
from checker.definitions import TXN_CHECKS, WARNINGS, severity
from checker.expectations import applicable_rules, expectation
from checker.pandas.engine import PandasEngine
from checker.spark.engine import SparkEngine

EXPECTED = (
    "precommitted-read",
    "int-nonmonotonic-send",
    "G1c",
    "G1c-process",
    "G1c-realtime",
    "consumed-twice",
    "consumed-skipped",
    "torn-transaction",
    "int-send-skip",
    "G0",
    "G0-process",
    "G0-realtime",
)
ALLOWED = {"int-send-skip", "G0", "G0-process", "G0-realtime"}
"""What Kafka's model allows in every configuration (Jepsen's ``allowed-error-types``): warnings."""


def test_the_family_is_its_twelve_entries_errors_before_warnings() -> None:
    assert TXN_CHECKS == EXPECTED
    assert {BY_NAME[name].family for name in EXPECTED} == {TXN}
    assert ALLOWED <= WARNINGS
    assert {name for name in EXPECTED if severity(name) == WARNING} == ALLOWED
    assert PandasEngine.implements >= set(EXPECTED) and SparkEngine.implements >= set(EXPECTED)


@pytest.mark.parametrize(
    ("config", "acks", "permitted"),
    [
        ({}, "all", set()),
        (
            {"unclean.leader.election.enable": "true"},
            "all",
            set(EXPECTED) - {"precommitted-read", *ALLOWED},
        ),
        ({}, "1", set(EXPECTED) - {"precommitted-read", *ALLOWED}),
    ],
)
def test_data_loss_permits_the_errors_it_explains_and_nothing_permits_precommitted_reads(
    config: dict[str, str], acks: str, permitted: set[str]
) -> None:
    rules = applicable_rules({"workload": {"acks": acks}, "broker_config": config, "nemesis": {"faults": []}})
    assert {name for name in EXPECTED if expectation(name, rules)[0]} == permitted


@pytest.mark.parametrize(
    ("workload", "permitted"),
    [
        ({"txn": True, "isolation": "read_uncommitted"}, {"isolation=read_uncommitted"}),
        ({"txn": True, "isolation": "read_committed"}, set()),
        ({"txn": False, "isolation": "read_uncommitted"}, set()),  # no transactions: nothing is aborted
    ],
)
def test_a_read_uncommitted_reader_may_read_aborted_values_and_nothing_else_follows(
    workload: dict[str, object], permitted: set[str]
) -> None:
    rules = applicable_rules({"workload": {"acks": "all", **workload}, "broker_config": {}, "nemesis": {}})
    assert {rule.name for rule in rules} == permitted
    assert expectation("G1a", rules)[0] is bool(permitted)
    for other in ("precommitted-read", "aborted-read", "lost-write", "unexpected", *EXPECTED):
        assert not expectation(other, rules)[0], other


def test_reports_fold_consequences_under_their_causes() -> None:
    placed = causes_first(
        ["G1c-realtime", "torn-transaction", "G1c-process", "lost-write", "G0"], warnings=["G0"]
    )
    assert [(p.name, p.depth, p.parent) for p in placed] == [
        ("lost-write", 0, None),
        ("torn-transaction", 1, "lost-write"),
        ("G1c-process", 0, None),
        ("G1c-realtime", 1, "G1c-process"),
        ("G0", 0, None),
    ]


def test_an_entry_with_unknown_evidence_breaks_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Anomaly("broken", TXN, "one line", ("a hunch",))
    monkeypatch.setattr("checker.anomalies.ANOMALIES", (*ANOMALIES, broken))
    monkeypatch.setattr("checker.anomalies.BY_NAME", {**BY_NAME, "broken": broken})
    with pytest.raises(ValueError, match="registry entry broken"):
        _check_registry()
