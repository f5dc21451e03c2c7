"""``tidemark hunt``'s arguments: the default mix, ``--stop-on``, and what it refuses (no containers:
the hunt loop itself is replaced by one that records what it was given)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli import hunt as hunt_cli
from harness.cli.main import main
from harness.run.hunt import HuntResult
from nemesis.spec import HUNT_MIX, HUNT_WEIGHTS, TXN_HUNT_MIX


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_hunt(spec: Any, store: Path, budget: float, **options: Any) -> HuntResult:
        seen.append({"spec": spec, "budget": budget, **options})
        return HuntResult(tmp_path, [], 0.0, None, None, finished=True)

    monkeypatch.setattr(hunt_cli, "hunt", fake_hunt)
    monkeypatch.setattr(hunt_cli, "docker_unreachable", lambda: None)  # as if an engine answered
    return seen


def test_without_nemesis_a_hunt_draws_the_default_mix(calls: list[dict[str, Any]], tmp_path: Path) -> None:
    main(["hunt", "--budget", "2m", "--store", str(tmp_path)])
    # Every name that fits the defaults: the zombie's cut outlasts their 5-second ISR lag, and
    # without ELR below min ISR its next leader cannot be elected (nemesis.bug_packages).
    zombie = "zombie-fetch-across-epochs"
    assert calls[0]["spec"].nemesis.faults == tuple(name for name in HUNT_MIX if name != zombie)
    # drawn with the measured weights of the names it has (last-replica-standing needs power loss)
    assert calls[0]["spec"].nemesis.weights == tuple(
        (name, weight) for name, weight in HUNT_WEIGHTS if name not in ("last-replica-standing", zombie)
    )
    main(["hunt", "--budget", "2m", "--store", str(tmp_path), "--set", "min.insync.replicas=2"])
    assert calls[1]["spec"].nemesis.faults == HUNT_MIX
    assert dict(HUNT_WEIGHTS)["stale-leader-lagging-joiner"] == 2
    assert dict(HUNT_WEIGHTS)["zombie-fetch-across-epochs"] == 4
    assert calls[0]["budget"] == 120.0 and calls[0]["stop_on"] == frozenset()


def test_without_nemesis_a_transactional_hunt_draws_the_transactional_mix(
    calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    main(["hunt", "--budget", "2m", "--txn", "--store", str(tmp_path)])
    assert calls[0]["spec"].nemesis.faults == TXN_HUNT_MIX == ("request-hold",)
    assert calls[0]["spec"].nemesis.weights == ()


def test_stop_on_and_an_explicit_mix_are_passed_on(calls: list[dict[str, Any]], tmp_path: Path) -> None:
    main(["hunt", "--budget", "1m", "--nemesis", "kill", "--stop-on", "lost-write", "--store", str(tmp_path)])
    assert calls[0]["spec"].nemesis.faults == ("kill",)
    assert calls[0]["stop_on"] == frozenset({"lost-write"})


def test_an_unknown_stop_on_name_is_a_bad_argument(
    calls: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["hunt", "--budget", "1m", "--stop-on", "lost", "--store", str(tmp_path)])
    assert code == 254 and not calls
    assert "--stop-on[0]: unknown name 'lost'" in capsys.readouterr().err


def test_the_default_mix_leaves_out_the_packages_a_two_replica_topic_cannot_take(
    calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    main(["hunt", "--budget", "1m", "--replication-factor", "2", "--store", str(tmp_path)])
    nemesis = calls[0]["spec"].nemesis
    left_out = {
        "stale-leader-lagging-joiner",
        "zombie-fetch-across-epochs",
        "lagging-follower-leader-shutdown",
        "lagging-follower-outlives-the-isr",
    }
    assert left_out <= set(HUNT_MIX) and not left_out & set(nemesis.faults)
    assert nemesis.faults == tuple(name for name in HUNT_MIX if name not in left_out)
    assert not {name for name, _ in nemesis.weights} & left_out  # the packages went with their weights
    assert ("leader-crash-storm", 2) in nemesis.weights


def test_a_named_package_the_cluster_cannot_take_is_refused_in_one_line_before_any_run(
    calls: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "hunt",
            "--budget",
            "1m",
            "--replication-factor",
            "2",
            "--nemesis",
            "kill,stale-leader-lagging-joiner",
            "--store",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 254 and not calls
    assert "--nemesis: stale-leader-lagging-joiner needs a replication factor of at least 3" in err
    assert "Traceback" not in err
