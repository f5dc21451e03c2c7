"""The fault registry is whole: every kind has a heal (or says it has none), a mechanism and a
colour, and every other table of fault names -- the history's pairs, the report's colours, the
spec's mixes, the scenario vocabulary -- agrees with it.

The checks are one function, :func:`registry_problems`, run on the real registry (no problems)
and on planted bad entries (each one found), so a new kind missing a part fails here."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import pytest

from harness.report import plots
from nemesis import spec
from nemesis.broker_acts import NODE_ACTS
from nemesis.fault_declaration import ABILITIES, OTHER_COLOUR, FaultKind, NoHeal, Param
from nemesis.fault_kinds import HEAL_KINDS, HEALS, KINDS, REGISTRY, kind_of, names_drawn_as
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.nemesis_config import ABILITY_PROTOCOLS
from nemesis.scenario import FAULTS
from nemesis.shrink import HEAL_STEPS, OPENERS
from testbed.record import faults as record

COLOUR = re.compile(r"#[0-9a-f]{6}")


def registry_problems(kinds: Iterable[FaultKind], mechanisms: Mapping[str, object]) -> list[str]:
    """What is missing or wrong in ``kinds`` given the ``mechanisms`` table (empty: whole)."""
    kinds = list(kinds)
    names = [kind.name for kind in kinds]
    problems = [f"{name}: declared twice" for name in sorted(set(names)) if names.count(name) > 1]
    heals = {kind.name for kind in kinds if isinstance(kind.heal, NoHeal)}
    for kind in kinds:
        if isinstance(kind.heal, NoHeal):
            if not kind.heal.why.strip():
                problems.append(f"{kind.name}: 'no heal' must say why")
        elif not isinstance(kind.heal, str):
            problems.append(f"{kind.name}: no heal (name one, or NoHeal(why))")
        elif kind.heal not in heals:
            problems.append(f"{kind.name}: its heal {kind.heal!r} is no declared heal kind")
        if kind.name not in mechanisms:
            problems.append(f"{kind.name}: no mechanism")
        if not isinstance(kind.colour, str) or not COLOUR.fullmatch(kind.colour):
            problems.append(f"{kind.name}: no colour (#rrggbb)")
        if not kind.needs <= ABILITIES:
            problems.append(f"{kind.name}: needs unknown abilities {sorted(kind.needs - ABILITIES)}")
        if not kind.op_value.strip() or not kind.doc.strip():
            problems.append(f"{kind.name}: no op value shape or doc")
    return problems


def test_the_registry_is_whole() -> None:
    assert registry_problems(KINDS, MECHANISMS) == []
    assert set(MECHANISMS) == set(REGISTRY), "one mechanism per kind, none for kinds not declared"


def planted(**changes: object) -> FaultKind:
    fields: dict[str, object] = {
        "name": "disk-full",
        "doc": "fill the data directory",
        "heal": "start",
        "drawn_as": "node-target",
        "nodes": "required",
        "op_value": '{"nodes": [...]}',
        "colour": "#123456",
    }
    return FaultKind(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (planted(heal=None), "disk-full: no heal (name one, or NoHeal(why))"),
        (planted(heal="unplug"), "disk-full: its heal 'unplug' is no declared heal kind"),
        (planted(heal=NoHeal(" ")), "disk-full: 'no heal' must say why"),
        (planted(colour=""), "disk-full: no colour (#rrggbb)"),
        (planted(needs=frozenset({"a-disk"})), "disk-full: needs unknown abilities ['a-disk']"),
        (planted(), "disk-full: no mechanism"),
    ],
)
def test_a_kind_without_a_heal_a_mechanism_or_a_colour_is_found(bad: FaultKind, problem: str) -> None:
    assert problem in registry_problems([*KINDS, bad], MECHANISMS)


def test_a_kind_must_declare_its_heal_to_exist() -> None:
    with pytest.raises(TypeError, match="heal"):
        FaultKind("disk-full", "d", drawn_as="never", nodes="none", op_value="{}", colour="#000000")  # type: ignore[call-arg]


def test_every_node_shaped_kind_has_its_per_node_act() -> None:
    node_shaped = {
        kind.name
        for kind in KINDS
        if kind.drawn_as == "node-target"
        or (kind.name in HEAL_KINDS and kind.name in HEALS.values() and kind.nodes != "none")
    }
    assert node_shaped <= set(NODE_ACTS)
    assert set(NODE_ACTS) <= set(REGISTRY)


def test_the_history_vocabulary_agrees_with_the_registry() -> None:
    """``testbed.record.faults`` may not import the nemesis (the checker reads it): its plain table
    must say what the registry says."""
    assert dict(record.HEALS) == dict(HEALS)
    assert set(record.FAULT_KINDS) == set(HEALS)
    assert frozenset(HEALS.values()) == record.HEAL_KINDS
    for name in (record.KILL, record.PAUSE, record.PARTITION, record.POWER_LOSS, record.METADATA_DELAY):
        assert kind_of(name).heal == record.HEALS[name]
    for name in record.FAULT_KINDS:  # every fault the record pairs, new kinds too, without naming them
        assert kind_of(name).heal == record.HEALS[name]


def test_the_report_colours_come_from_the_registry() -> None:
    for kind in KINDS:
        assert plots.fault_colour(kind.name) == kind.colour
    assert plots.fault_colour("package") == OTHER_COLOUR, "ops that are no fault kind"


def test_the_spec_scenarios_and_shrink_read_the_registry() -> None:
    assert (
        *names_drawn_as("node-target"),
        *names_drawn_as("partition-shape"),
        *names_drawn_as("controller"),
    ) == spec.FAULT_KINDS
    assert names_drawn_as("workload") == spec.WORKLOAD_FAULT_KINDS
    assert spec.HEALS is HEALS
    assert tuple(REGISTRY) == FAULTS
    assert {f: h for f, h in HEALS.items() if f != "partition"} == {**OPENERS}
    assert set(HEAL_STEPS) == set(HEALS.values())


def test_abilities_map_to_the_protocols_a_target_lists() -> None:
    assert set(ABILITY_PROTOCOLS) <= ABILITIES
    assert all(isinstance(protocol, type) for protocol in ABILITY_PROTOCOLS.values())


def test_parameters_are_declared_with_their_kind() -> None:
    assert [param.name for param in kind_of("partition").params] == ["grudge", "kind"]
    for kind in KINDS:  # what a schedule draws is a parameter the kind takes, from a real choice
        for name, choices in kind.drawn:
            assert kind.takes(name) and kind.drawn_as != "never", (kind.name, name)
            assert choices and len(set(choices)) == len(choices), (kind.name, name)
    assert {kind.name for kind in KINDS if kind.takes("announce")} == {"pause", "resume"}
    assert all(isinstance(param, Param) for kind in KINDS for param in kind.params)
    with pytest.raises(KeyError, match="no fault kind 'crash'"):
        kind_of("crash")
