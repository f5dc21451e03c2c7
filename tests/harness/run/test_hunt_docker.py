"""A real hunt in Docker: the random nemesis with fault packages finds KIP-101's loss by itself
under high-watermark truncation, and the same draws find nothing with leader epochs.

Settings are Kafka's where the harness would otherwise shorten them (``replica.lag.time.max.ms``
30 s: a restarted follower stays in the ISR), and ELR is off as it was before KIP-966 (ELR takes
a crashed follower out of the ISR, which closes this window on its own).  The seeds are fixed so
the draws are the same in both modes; the first draw of seed 1 holds the re-fetch window open.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from harness.run.hunt import hunt
from harness.run.spec import TestSpec
from nemesis.spec import NemesisSpec
from workloads.queue import QueueSpec

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BUGGY = TestSpec(
    name="hunt",
    node_count=2,
    time_limit=30,
    settings={
        "truncation.mode": "high-watermark",
        "eligible.leader.replicas.enable": "false",
        "replica.lag.time.max.ms": "30000",
        "min.insync.replicas": "1",
    },
    workload=QueueSpec(partitions=1, replication_factor=2, producers=2, consumers=1, rate=100.0),
    nemesis=NemesisSpec(faults=("follower-restart-leader-crash",), interval_seconds=5.0),
)
SEEDS = [1, 2, 3, 4, 5, 6]


def test_a_hunt_finds_high_watermark_loss_and_not_with_leader_epochs(image: str, tmp_path: Path) -> None:
    seeds = iter(SEEDS)
    found = hunt(BUGGY, tmp_path / "store", 600, seeds=lambda: next(seeds), out=io.StringIO())
    assert found.first_invalid is not None, [run.problem for run in found.runs]
    assert "lost-write" in found.first_invalid.anomalies
    assert found.first_invalid.faults >= 2
    failing_seed = found.first_invalid.seed
    fixed = dataclasses.replace(BUGGY, settings={**BUGGY.settings, "truncation.mode": "leader-epoch"})
    # The same draws with leader epochs: a budget of 1 s starts exactly one run.
    clean = hunt(fixed, tmp_path / "store", 1, seeds=lambda: failing_seed, out=io.StringIO())
    assert [run.seed for run in clean.runs] == [failing_seed]
    assert clean.first_invalid is None and clean.runs[0].verdict is True, clean.runs
