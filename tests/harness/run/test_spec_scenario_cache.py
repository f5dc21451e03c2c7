"""The embedded scenario is parsed once per spec and held typed (issue 31: the record's scenario
was parsed again on every ``scenario_object()`` call, about four times per ``run --scenario``)."""

from __future__ import annotations

import dataclasses

import pytest

import harness.run.spec as spec_module
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario


def test_the_scenario_is_parsed_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = TestSpec().with_scenario(load_scenario("kip101-loss"))
    calls: list[object] = []
    real = spec_module.parse_scenario
    monkeypatch.setattr(spec_module, "parse_scenario", lambda *a: calls.append(a) or real(*a))
    first = spec.scenario_object()
    assert first is not None and spec.scenario_object() is first
    spec.scenario_faults()
    spec.scenario_problems({})
    assert len(calls) == 1
    # A changed spec is a new one: it parses its own definition, and does not compare unequal
    # to an equal spec because of the cache.
    renamed = dataclasses.replace(spec, name="other")
    assert renamed.scenario_object() is not first and len(calls) == 2
    assert dataclasses.replace(spec) == spec
    assert "_parsed_scenario" not in spec.to_dict()
