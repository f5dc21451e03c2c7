"""The hunt bench's pure parts: which catalogue scenario stands for each switch, and the nemesis a
mode's hunts get (no Docker: nothing here hunts)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench_hunt() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_hunt", REPO / "bench" / "hunt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_hunt"] = module
    spec.loader.exec_module(module)
    return module


def test_power_loss_modes_never_strike_a_majority_and_the_others_strike_anywhere(
    bench_hunt: ModuleType,
) -> None:
    catalogue = bench_hunt.catalogue()
    kip966 = catalogue["eligible.leader.replicas.enable=false"]
    spec = bench_hunt.spec_for(kip966, {"eligible.leader.replicas.enable": "false"}, 30.0, 5.0)
    assert "power-loss" in spec.nemesis.faults
    assert spec.nemesis.targets == ("one", "minority", "leader")
    kip101 = catalogue["truncation.mode=high-watermark"]
    spec = bench_hunt.spec_for(kip101, {"truncation.mode": "high-watermark"}, 30.0, 5.0)
    assert "power-loss" not in spec.nemesis.faults and spec.nemesis.targets is None


def test_the_safe_baseline_turns_every_switch_to_its_valid_value(bench_hunt: ModuleType) -> None:
    safe = bench_hunt.safe_settings(bench_hunt.catalogue())
    assert safe["eligible.leader.replicas.enable"] == "true"
    assert safe["truncation.mode"] != "high-watermark"
    assert safe["unclean.leader.election.enable"] == "false"


def test_a_two_replica_mode_hunts_with_only_the_packages_its_topic_can_take(bench_hunt: ModuleType) -> None:
    kip279 = bench_hunt.catalogue()["leader.epoch.lookup=single"]
    assert kip279.workload["replication_factor"] == 2
    spec = bench_hunt.spec_for(kip279, {"leader.epoch.lookup": "single"}, 30.0, 5.0)
    assert "leader-crash-storm" in spec.nemesis.faults
    assert "stale-leader-lagging-joiner" not in spec.nemesis.faults
    assert "zombie-fetch-across-epochs" not in spec.nemesis.faults


def test_baseline_minutes_per_mode_are_parsed_and_bad_ones_named(bench_hunt: ModuleType) -> None:
    names = {"kip101-loss", "kafka7128-isr-join"}
    assert bench_hunt.parse_minutes_per_mode("kip101-loss=6, kafka7128-isr-join=12.5", names) == {
        "kip101-loss": 6.0,
        "kafka7128-isr-join": 12.5,
    }
    assert bench_hunt.parse_minutes_per_mode("", names) == {}
    with pytest.raises(SystemExit, match="'kip999' is not a mode"):
        bench_hunt.parse_minutes_per_mode("kip999=3", names)
    with pytest.raises(SystemExit, match="expected MODE=MINUTES"):
        bench_hunt.parse_minutes_per_mode("kip101-loss=soon", names)


def test_a_candidate_mix_replaces_the_default_with_its_weights_where_the_cluster_takes_them(
    bench_hunt: ModuleType,
) -> None:
    mix, weights = bench_hunt.parse_mix("kill, elect-preferred*3, stale-leader-lagging-joiner*2")
    assert mix == ("kill", "elect-preferred", "stale-leader-lagging-joiner")
    assert weights == (("elect-preferred", 3), ("stale-leader-lagging-joiner", 2))
    catalogue = bench_hunt.catalogue()
    kafka7128 = catalogue["isr.join.offset=high-watermark"]
    spec = bench_hunt.spec_for(kafka7128, {"isr.join.offset": "high-watermark"}, 30.0, 5.0, mix, weights)
    assert spec.nemesis.faults == mix and spec.nemesis.weights == weights
    assert spec.nemesis.fault_weights() == [1, 3, 2]
    # KIP-279's two-replica topic cannot take the lagging-joiner choreography: it goes, its weight with it.
    kip279 = catalogue["leader.epoch.lookup=single"]
    spec = bench_hunt.spec_for(kip279, {"leader.epoch.lookup": "single"}, 30.0, 5.0, mix, weights)
    assert spec.nemesis.faults == ("kill", "elect-preferred")
    assert spec.nemesis.weights == (("elect-preferred", 3),)
    # A power-loss mode adds the power-loss packages once, whether the candidate names them or not.
    kip966 = catalogue["eligible.leader.replicas.enable=false"]
    spec = bench_hunt.spec_for(kip966, {}, 30.0, 5.0, ("kill", "power-loss"), ())
    assert spec.nemesis.faults.count("power-loss") == 1
    assert set(bench_hunt.POWER_LOSS_MIX) <= set(spec.nemesis.faults)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kill,nope", r"--mix.*'nope'"),
        ("kill*0", r"--mix\[0\]: the weight of 'kill' must be an integer >= 1, not '0'"),
        ("none", r"--mix: names no fault"),
    ],
)
def test_a_bad_candidate_mix_is_one_line_naming_the_flag(
    bench_hunt: ModuleType, text: str, message: str
) -> None:
    with pytest.raises(SystemExit, match=message) as raised:
        bench_hunt.parse_mix(text)
    assert "\n" not in str(raised.value)


def test_without_a_candidate_every_mode_draws_the_default_mix_with_its_weights(
    bench_hunt: ModuleType,
) -> None:
    catalogue = bench_hunt.catalogue()
    kafka7128 = catalogue["isr.join.offset=high-watermark"]
    spec = bench_hunt.spec_for(kafka7128, {"isr.join.offset": "high-watermark"}, 30.0, 5.0)
    assert spec.nemesis.faults == bench_hunt.HUNT_MIX
    assert dict(spec.nemesis.weights) == {
        "follower-restart-leader-crash": 2,
        "leader-crash-storm": 2,
        "isolate-followers-lose-leader": 2,
        "stale-leader-lagging-joiner": 2,
        "zombie-fetch-across-epochs": 4,
    }
    kip966 = catalogue["eligible.leader.replicas.enable=false"]
    spec = bench_hunt.spec_for(kip966, {"eligible.leader.replicas.enable": "false"}, 30.0, 5.0)
    assert dict(spec.nemesis.weights)["last-replica-standing"] == 4  # where power loss is hunted
