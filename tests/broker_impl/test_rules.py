"""The replication rules behind the bug switches, at the partition/replica level (no processes).

Each rule is exercised in its safe and its historical form (``broker_impl.rules``):

* KIP-279 -- the follower's truncation after OffsetsForLeaderEpoch, iterated against the
  divergence cases of the TLA+ description (different lineages; several epochs missing on
  the follower's side or the leader's), with the leader's answers computed by the real
  :class:`LeaderEpochCache`; and KAFKA-7415's epoch record on election;
* KAFKA-7128 -- ISR join against the leader's current-epoch start offset;
* KIP-320 -- fencing answers of a leader to requests from other epochs;
* KIP-966 -- the HW advances only while ISR >= min ISR.

A log is modelled as the list of the leader epochs of its records (offset = index), which is
all the rules look at; the epoch caches are real and persist to a temporary directory.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from broker_impl import wire
from broker_impl.checkpoints import LeaderEpochCache
from broker_impl.handlers import Handlers
from broker_impl.log import FlushPolicy
from broker_impl.partition import Partition
from broker_impl.records import iterate_batches
from broker_impl.replica_fetcher import truncation_step
from broker_impl.rules import ReplicationRules

from .batch_builder import make_batch

NEVER = 2**63 - 1
_directories = itertools.count()


def cache_of(log: list[int], root: Path) -> LeaderEpochCache:
    directory = root / f"cache-{next(_directories)}"
    directory.mkdir()
    cache = LeaderEpochCache(directory)
    for offset, epoch in enumerate(log):
        if offset == 0 or log[offset - 1] != epoch:
            cache.assign(epoch, offset)
    return cache


def reconcile(follower: list[int], leader: list[int], root: Path, *, iterative: bool) -> list[int]:
    """The follower's log after truncating against ``leader`` and fetching the rest from it."""
    follower = list(follower)
    leader_cache = cache_of(leader, root)
    follower_cache = cache_of(follower, root)
    for _round in range(20):
        latest = follower_cache.latest_epoch()
        if latest < 0:
            break
        answer_epoch, answer_end = leader_cache.end_offset_for(latest, len(leader))
        target, complete = truncation_step(
            follower_cache, len(follower), 0, answer_epoch, answer_end, iterative=iterative
        )
        del follower[target:]
        follower_cache.truncate_from_end(target)
        if complete:
            break
    else:
        raise AssertionError("truncation did not converge in 20 rounds")
    return follower + leader[len(follower) :]


# (follower log, leader log): each a lineage the TLA+ description discusses.
DIVERGENCE_CASES = {
    # KIP-279's fast failover: A wrote e0 then e2 while B wrote e1 then e3 on a common prefix.
    "fast-failover": ([0, 0, 0, 2], [1, 1, 1, 3, 3]),
    "fast-failover-longer-follower": ([0, 0, 2, 2, 2, 2], [1, 1, 3, 3]),
    "same-lineage-follower-behind": ([0, 0, 1], [0, 0, 1, 1, 2, 2]),
    "same-lineage-follower-ahead-uncommitted": ([0, 0, 1, 1, 1], [0, 0, 1, 2, 2]),
    "follower-missing-several-epochs": ([0, 0], [0, 0, 1, 2, 3, 4]),
    "leader-missing-several-epochs": ([0, 1, 2, 3, 3], [0, 4, 4]),
    "different-lineages-from-offset-zero": ([1, 1, 1], [2, 2]),
    "interleaved-epochs": ([0, 2, 2, 4, 4], [0, 1, 3, 3, 5]),
}


@pytest.mark.parametrize("case", sorted(DIVERGENCE_CASES))
def test_iterative_lookup_converges_to_the_leaders_lineage(tmp_path: Path, case: str) -> None:
    follower, leader = DIVERGENCE_CASES[case]
    assert reconcile(follower, leader, tmp_path, iterative=True) == leader


def test_single_lookup_keeps_a_divergent_lineage_after_fast_failover(tmp_path: Path) -> None:
    follower, leader = DIVERGENCE_CASES["fast-failover"]
    result = reconcile(follower, leader, tmp_path, iterative=False)
    assert len(result) == len(leader)
    assert result != leader  # the follower kept e0/e2 records where the leader has e1
    assert result[:3] == [0, 0, 0]


def test_single_lookup_is_enough_within_one_lineage(tmp_path: Path) -> None:
    follower, leader = DIVERGENCE_CASES["same-lineage-follower-ahead-uncommitted"]
    assert reconcile(follower, leader, tmp_path, iterative=False) == leader


def test_undefined_answer_truncates_to_the_high_watermark(tmp_path: Path) -> None:
    cache = cache_of([0, 0, 1, 1], tmp_path)
    assert truncation_step(cache, 4, 3, -1, -1, iterative=True) == (3, True)


# ---- partitions --------------------------------------------------------------------------


def partition(tmp_path: Path, rules: ReplicationRules, count: int = 0, epoch: int = 0) -> Partition:
    directory = tmp_path / f"t-{next(_directories)}"
    created = Partition("t", 0, 1, directory, 1 << 20, FlushPolicy(NEVER, NEVER), 0, rules)
    if count:
        created.become_leader(epoch, 0, [1], [1])
        append(created, count)
    return created


def append(target: Partition, count: int) -> None:
    for _ in range(count):
        batch = make_batch([b"x"])
        [(_, header)] = iterate_batches(batch)
        target.log.append_as_leader(batch, header, target.leader_epoch)
    target.maybe_increment_high_watermark()


@pytest.mark.parametrize("record", [True, False])
def test_new_leader_records_its_epoch_on_election_only_with_kafka_7415(tmp_path: Path, record: bool) -> None:
    rules = ReplicationRules(iterative_epoch_lookup=record, record_epoch_on_election=record)
    replica = partition(tmp_path, rules, count=3, epoch=1)
    replica.become_leader(2, 1, [1, 2], [1, 2])
    assert (replica.log.epochs.latest_epoch() == 2) is record
    append(replica, 1)
    assert replica.log.epochs.entries[-1] == (2, 3)


@pytest.mark.parametrize("needs_epoch_start", [True, False])
def test_isr_join_against_the_epoch_start_offset(tmp_path: Path, needs_epoch_start: bool) -> None:
    """A new leader with a stale HW (5) and LEO 10: a follower at 6 joins only under the old rule."""
    rules = ReplicationRules(isr_join_needs_epoch_start=needs_epoch_start)
    replica = partition(tmp_path, rules, count=10, epoch=1)
    replica.become_follower(2, 2, 1, [1, 2, 3], [1, 2])
    replica.high_watermark = 5  # a follower's HW lags its leader's
    replica.become_leader(3, 2, [1, 2, 3], [1, 2])
    assert replica.high_watermark == 5  # replica 2's LEO is unknown: the HW cannot move yet
    replica.record_follower_fetch(3, 6)
    assert (replica.isr_expansion_candidates() == [3]) is not needs_epoch_start
    replica.record_follower_fetch(3, 10)  # caught up with the epoch start: joins either way
    assert replica.isr_expansion_candidates() == [3]


@pytest.mark.parametrize("strict", [True, False])
def test_high_watermark_advances_under_min_isr_only_without_strict_min_isr(
    tmp_path: Path, strict: bool
) -> None:
    rules = ReplicationRules(min_insync_replicas=2, strict_min_isr=strict)
    replica = partition(tmp_path, rules)
    replica.become_leader(1, 0, [1, 2], [1, 2])
    append(replica, 3)
    replica.record_follower_fetch(2, 3)
    assert replica.high_watermark == 3
    append(replica, 2)  # appended under a full ISR, then the follower drops out
    replica.update_isr(1, [1])
    assert replica.high_watermark == (3 if strict else 5)
    replica.update_isr(2, [1, 2])
    replica.record_follower_fetch(2, 5)
    assert replica.high_watermark == 5


class _FakeBroker:
    def __init__(self, replica: Partition) -> None:
        self.partitions = {("t", 0): replica}

    def metadata_topics(self) -> dict[str, object]:
        return {"t": {"partitions": [{}]}}


@pytest.mark.parametrize("fencing", [True, False])
def test_leader_fences_requests_from_other_epochs(tmp_path: Path, fencing: bool) -> None:
    replica = partition(tmp_path, ReplicationRules(epoch_fencing=fencing))
    replica.become_leader(5, 0, [1, 2], [1, 2])
    handlers = Handlers(_FakeBroker(replica))  # type: ignore[arg-type]
    answers = {epoch: handlers._lookup("t", 0, epoch)[0] for epoch in (4, 5, 6, -1)}
    if fencing:
        assert answers == {
            4: wire.FENCED_LEADER_EPOCH,
            5: wire.NONE,
            6: wire.UNKNOWN_LEADER_EPOCH,
            -1: wire.NONE,
        }
    else:
        assert answers == {4: wire.NONE, 5: wire.NONE, 6: wire.NONE, -1: wire.NONE}


def test_rules_from_settings_follow_the_switches() -> None:
    from broker_impl.config import BROKER_KEYS

    defaults = {key.name: key.default for key in BROKER_KEYS}
    assert ReplicationRules.from_settings(defaults) == ReplicationRules()
    buggy = {
        **defaults,
        "leader.epoch.lookup": "single",
        "isr.join.offset": "high-watermark",
        "leader.epoch.fencing.enable": False,
        "min.insync.replicas.strict": False,
        "min.insync.replicas": 2,
    }
    assert ReplicationRules.from_settings(buggy) == ReplicationRules(
        min_insync_replicas=2,
        strict_min_isr=False,
        iterative_epoch_lookup=False,
        record_epoch_on_election=False,
        isr_join_needs_epoch_start=False,
        epoch_fencing=False,
    )


def test_a_follower_that_stopped_fetching_does_not_rejoin_on_its_old_log_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict min ISR freezes the HW when the follower leaves; its remembered LEO still
    reaches that HW, so without the recency rule it would rejoin at once (the ISR flaps)."""
    clock = [1000.0]
    monkeypatch.setattr("broker_impl.partition.time.monotonic", lambda: clock[0])
    replica = partition(tmp_path, ReplicationRules(min_insync_replicas=2))
    replica.become_leader(1, 0, [1, 2, 3], [1, 2, 3])
    append(replica, 3)
    replica.record_follower_fetch(2, 3)
    replica.record_follower_fetch(3, 3)
    replica.update_isr(1, [1, 2])  # 3 was cut off and removed
    clock[0] += 5.0  # no fetch from 3 since
    replica.record_follower_fetch(2, 3)
    assert replica.isr_expansion_candidates(fetched_within=3.0) == []
    replica.record_follower_fetch(3, 3)  # it fetches again
    assert replica.isr_expansion_candidates(fetched_within=3.0) == [3]
