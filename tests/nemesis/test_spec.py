"""The nemesis spec: round trip through JSON and clear errors for every bad value."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from nemesis.spec import (
    FAULT_KINDS,
    HEALS,
    METADATA_DELAY,
    NEMESIS_CHOICES,
    NODE_FAULT_KINDS,
    NemesisSpec,
    NemesisSpecError,
    parse_name_list,
    parse_weighted_list,
    weights_within,
    written_mix,
)


def test_round_trip_through_json_keeps_every_field() -> None:
    spec = NemesisSpec(
        faults=("kill", "partition"),
        interval_seconds=7.5,
        fault_seconds=3.0,
        jitter=0.2,
        targets=("one", "leader"),
        partitions=("halves",),
        partition_scope="all",
        seed=99,
    )
    assert NemesisSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert NemesisSpec.from_dict(NemesisSpec().to_dict()) == NemesisSpec()


def test_missing_keys_take_defaults_and_fault_seconds_defaults_to_the_interval() -> None:
    spec = NemesisSpec.from_dict({"faults": ["pause"], "interval_seconds": 4})
    assert spec.faults == ("pause",) and spec.targets is None and spec.seed == 0
    assert spec.mean_fault_seconds == 4.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "test.json: nemesis: must be an object, not list"),
        ({"fault": ["kill"]}, "test.json: nemesis: unknown key(s) fault"),
        ({"faults": "kill"}, "test.json: nemesis.faults: must be a list of names, not 'kill'"),
        ({"faults": ["kill", "kil"]}, "test.json: nemesis.faults[1]: unknown name 'kil'"),
        ({"faults": ["kill", "kill"]}, "test.json: nemesis.faults[1]: 'kill' is listed twice"),
        ({"faults": [3]}, "test.json: nemesis.faults[0]: must be a string, not 3"),
        (
            {"interval_seconds": 0},
            "test.json: nemesis.interval_seconds: must be a finite number of seconds > 0, not 0",
        ),
        ({"interval_seconds": "10"}, "test.json: nemesis.interval_seconds: must be a number, not '10'"),
        (
            {"fault_seconds": float("inf")},
            "test.json: nemesis.fault_seconds: must be a finite number of seconds > 0",
        ),
        ({"jitter": 1}, "test.json: nemesis.jitter: must be a number in [0, 1), not 1"),
        ({"targets": []}, "test.json: nemesis.targets: must name at least one of one, minority"),
        ({"targets": ["leaders"]}, "test.json: nemesis.targets[0]: unknown name 'leaders'"),
        ({"partitions": ["ring"]}, "test.json: nemesis.partitions[0]: unknown name 'ring'"),
        (
            {"partition_scope": "controller"},
            "test.json: nemesis.partition_scope: must be one of brokers, all",
        ),
        ({"seed": True}, "test.json: nemesis.seed: must be an integer, not True"),
        ({"seed": 1.5}, "test.json: nemesis.seed: must be an integer, not 1.5"),
    ],
)
def test_bad_values_name_the_field(data: Any, message: str) -> None:
    with pytest.raises(NemesisSpecError) as caught:
        NemesisSpec.from_dict(data, where="test.json: nemesis")
    assert str(caught.value).startswith(message), str(caught.value)


def test_cli_lists() -> None:
    assert parse_name_list("kill, partition", FAULT_KINDS, "--nemesis") == ("kill", "partition")
    assert parse_name_list("none", FAULT_KINDS, "--nemesis") == ()
    with pytest.raises(
        NemesisSpecError,
        match=re.escape(f"--nemesis[1]: unknown name 'crash' (known: {', '.join(FAULT_KINDS)})"),
    ):
        parse_name_list("kill,crash", FAULT_KINDS, "--nemesis")


def test_metadata_delay_is_a_node_fault_with_its_own_heal() -> None:
    assert parse_name_list("metadata-delay", FAULT_KINDS, "--nemesis") == (METADATA_DELAY,)
    assert METADATA_DELAY == "metadata-delay" and METADATA_DELAY in NODE_FAULT_KINDS
    assert HEALS[METADATA_DELAY] == "metadata-heal"
    # elect-preferred has no heal; controller-kill is drawn only inside packages (whole-cluster-crash)
    assert set(HEALS) == set(FAULT_KINDS) - {"elect-preferred"}
    # elect-preferred does its whole change in its op: a leadership moved to its preferred replica
    # is where the cluster means it to be (nemesis.membership_kinds)
    spec = NemesisSpec.from_dict({"faults": ["metadata-delay", "kill"], "targets": ["leader", "followers"]})
    assert spec.faults == ("metadata-delay", "kill")
    assert NemesisSpec.from_dict(spec.to_dict()) == spec
    assert NemesisSpec().faults == (), "the default mix is unchanged: no faults unless asked for"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"faults": ["metadata_delay"]}, "run.json: nemesis.faults[0]: unknown name 'metadata_delay'"),
        ({"faults": ["metadata-heal"]}, "run.json: nemesis.faults[0]: unknown name 'metadata-heal'"),
        (
            {"faults": ["metadata-delay", "metadata-delay"]},
            "run.json: nemesis.faults[1]: 'metadata-delay' is listed twice",
        ),
        (
            {"faults": ["metadata-delay"], "targets": ["controller"]},
            "run.json: nemesis.targets[0]: unknown name 'controller'",
        ),
    ],
)
def test_bad_metadata_delay_names_name_the_field(data: Any, message: str) -> None:
    with pytest.raises(NemesisSpecError) as caught:
        NemesisSpec.from_dict(data, where="run.json: nemesis")
    assert str(caught.value).startswith(message), str(caught.value)
    with pytest.raises(NemesisSpecError, match=r"--nemesis\[0\]: unknown name 'metadata'"):
        parse_name_list("metadata", FAULT_KINDS, "--nemesis")


def test_weighted_cli_lists_and_their_round_trip() -> None:
    names, weights = parse_weighted_list("kill, whole-cluster-crash*4", NEMESIS_CHOICES, "--nemesis")
    assert names == ("kill", "whole-cluster-crash") and weights == (("whole-cluster-crash", 4),)
    spec = NemesisSpec(faults=names, weights=weights)
    assert spec.fault_weights() == [1, 4]
    assert NemesisSpec.from_dict(spec.to_dict()) == spec
    assert NemesisSpec.from_dict({"faults": ["kill"]}).weights == (), "a test.json from before weights reads"
    assert written_mix(names, weights) == "kill,whole-cluster-crash*4"
    assert parse_weighted_list(written_mix(names, weights), NEMESIS_CHOICES, "--nemesis") == (names, weights)


def test_a_mix_cut_to_its_cluster_keeps_the_weights_of_the_names_left() -> None:
    weights = (("stale-leader-lagging-joiner", 3), ("kill", 2))
    assert weights_within(weights, ("kill", "partition")) == (("kill", 2),)
    assert weights_within(weights, ("partition",)) == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kill,partition*x", "--nemesis[1]: the weight of 'partition' must be an integer >= 1, not 'x'"),
        ("kill*0", "--nemesis[0]: the weight of 'kill' must be an integer >= 1, not '0'"),
        ("kill,crash*2", "--nemesis[1]: unknown name 'crash'"),
        ("kill*2,kill", "--nemesis[1]: 'kill' is listed twice"),
    ],
)
def test_bad_weights_on_the_command_line_name_the_item(text: str, message: str) -> None:
    with pytest.raises(NemesisSpecError) as caught:
        parse_weighted_list(text, NEMESIS_CHOICES, "--nemesis")
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"faults": ["kill"], "weights": {"pause": 2}},
            "run.json: nemesis.weights: 'pause' is not one of the faults",
        ),
        (
            {"faults": ["kill"], "weights": {"kill": 0}},
            "run.json: nemesis.weights: the weight of 'kill' must be",
        ),
        ({"faults": ["kill"], "weights": [["kill", 2]]}, "run.json: nemesis.weights: must be an object"),
    ],
)
def test_bad_stored_weights_name_the_field(data: Any, message: str) -> None:
    with pytest.raises(NemesisSpecError) as caught:
        NemesisSpec.from_dict(data, where="run.json: nemesis")
    assert str(caught.value).startswith(message), str(caught.value)
