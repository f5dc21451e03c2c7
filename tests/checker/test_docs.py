"""``docs/anomalies.md`` says what the code does: its names table is the registry's, its other table the rules' permits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.anomaly_docs import names_table
from checker.definitions import ALL_CHECKS, ISR_DIVERGENCE, MIN_ISR_VIOLATION, REPLICA_DIVERGENCE
from checker.expectations import applicable_rules

PAGE = Path(__file__).resolve().parents[2] / "docs" / "anomalies.md"


def _table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table after ``heading``, header and rule lines left out."""
    lines = PAGE.read_text(encoding="utf-8").split(heading, 1)[1].splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_page_names_every_anomaly_in_the_checkers_order() -> None:
    assert [row[0] for row in _table("## Names")] == list(ALL_CHECKS)


def test_the_names_table_is_generated_from_the_registry() -> None:
    """A doc line for every entry and no stray row; regenerate with
    ``python -c 'from checker.anomaly_docs import names_table; print(*names_table(), sep=chr(10))'``."""
    text = PAGE.read_text(encoding="utf-8")
    table = (
        "| anomaly | family | implies | in one line |\n|---|---|---|---|\n"
        + "\n".join(names_table())
        + "\n\n"
    )
    assert table in text.split("## Names", 1)[1]


def _spec(
    broker_config: dict[str, str], acks: str = "all", faults: tuple[str, ...] = ("kill",)
) -> dict[str, Any]:
    return {"workload": {"acks": acks}, "broker_config": broker_config, "nemesis": {"faults": list(faults)}}


GROUPS = {
    "acks=0/1": [_spec({}, acks="0"), _spec({}, acks="1")],
    "committed data may vanish": [
        _spec({"unclean.leader.election.enable": "true"}),
        _spec({}, faults=("power-loss",)),
        _spec(
            {"min.insync.replicas": "1", "eligible.leader.replicas.enable": "false"}, faults=("power-loss",)
        ),
        _spec({"truncation.mode": "high-watermark"}),
        _spec({"leader.epoch.lookup": "single"}),
        _spec({"isr.join.offset": "high-watermark"}),
        _spec({"leader.epoch.fencing.enable": "false"}),
        _spec({"min.insync.replicas.strict": "false"}),
    ],
    "replicas may diverge": [
        _spec({"truncation.mode": "high-watermark"}),
        _spec({"leader.epoch.lookup": "single"}),
        _spec({"leader.epoch.fencing.enable": "false"}),
    ],
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_the_expectation_table_matches_every_rule_of_its_group(group: str) -> None:
    rows = _table("## When an anomaly is expected")
    assert [row[0] for row in rows] == list(ALL_CHECKS)
    column = ["anomaly", *GROUPS].index(group)
    said = {row[0] for row in rows if row[column] == "yes"}
    for spec in GROUPS[group]:
        rules = applicable_rules(spec)
        assert rules
        for rule in rules:
            permits = set(rule.permits)
            if group == "committed data may vanish":
                # The divergence column says which also permit these; min-isr-violation's cell names its one rule.
                permits -= {REPLICA_DIVERGENCE, ISR_DIVERGENCE, MIN_ISR_VIOLATION}
                said -= {REPLICA_DIVERGENCE, ISR_DIVERGENCE}
            assert permits == said, rule.name


def test_min_isr_violation_is_permitted_by_the_non_strict_rule_alone() -> None:
    (row,) = [row for row in _table("## When an anomaly is expected") if row[0] == MIN_ISR_VIOLATION]
    assert row[1:] == ["-", "only `min.insync.replicas.strict=false`", "-"]
    permitting = {
        rule.name
        for specs in GROUPS.values()
        for spec in specs
        for rule in applicable_rules(spec)
        if MIN_ISR_VIOLATION in rule.permits
    }
    assert permitting == {"min.insync.replicas.strict=false"}


def test_the_results_format_lists_every_anomaly_name() -> None:
    text = (PAGE.parent / "history.md").read_text(encoding="utf-8")
    listed = text.split("each named by one of `checker.definitions.ALL_CHECKS`", 1)[1].split(";", 1)[0]
    assert [name.strip(" ()\n") for name in listed.replace("\n", " ").split(",")] == list(ALL_CHECKS)
