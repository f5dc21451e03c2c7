"""What a test spec tells the fault packages before the cluster starts: the ISR rules in force,
and the workload's send rate."""

from __future__ import annotations

from pathlib import Path

from harness.run.spec import TestSpec
from nemesis.package_context import ReplicationRules
from workloads.queue import QueueSpec


def test_the_isr_lag_is_the_one_in_force_on_the_bundled_broker() -> None:
    # The harness's own failure-detection default (testbed.cluster.bundled), then --set.
    assert TestSpec(name="q").replication_rules().isr_lag_seconds == 5.0
    longer = TestSpec(name="q", settings={"replica.lag.time.max.ms": "12000"})
    assert longer.replication_rules().isr_lag_seconds == 12.0
    context = TestSpec(name="q").package_context()
    assert context is not None and context.rules.isr_lag_seconds == 5.0


def test_the_send_rate_is_the_workload_s_where_it_fixes_one() -> None:
    # A slowed link is sized from it (nemesis.bug_packages.joiner_link_kbit); as fast as
    # acknowledgements allow, or transactions of a drawn number of sends, fix none.
    def send_rate(**workload: object) -> float | None:
        spec = TestSpec(name="q", workload=QueueSpec(**workload))  # type: ignore[arg-type]
        context = spec.package_context()
        assert context is not None and context.send_rate == spec.workload.send_rate
        return context.send_rate

    assert send_rate() == 200.0
    assert send_rate(rate=50.0) == 50.0
    assert send_rate(rate=0.0) is None
    assert send_rate(txn=True, rate=10.0) is None


def test_the_rules_of_a_system_whose_settings_are_not_known_are_unknown() -> None:
    assert TestSpec(name="q", target="tansu").replication_rules() == ReplicationRules()
    assert TestSpec(name="q", bootstrap="127.0.0.1:9092").replication_rules() == ReplicationRules()
    external = TestSpec(name="q", bootstrap="127.0.0.1:9092", settings={"replica.lag.time.max.ms": "30000"})
    assert external.replication_rules() == ReplicationRules(isr_lag_seconds=30.0)


def test_whether_a_crashed_broker_keeps_its_isr_memberships_follows_the_elr_in_force() -> None:
    # KIP-966 (ELR, on by default): a broker back from a crash leaves every ISR; packages that need
    # a bounced replica to stay in it stop it cleanly there (nemesis.bug_packages.bounce_stop).
    assert TestSpec(name="q").replication_rules().unclean_restart_keeps_isr is False
    without_elr = TestSpec(name="q", settings={"eligible.leader.replicas.enable": "false"})
    assert without_elr.replication_rules().unclean_restart_keeps_isr is True
    context = without_elr.package_context()
    assert context is not None and context.rules.unclean_restart_keeps_isr is True


def test_whether_unclean_elections_may_happen_is_the_setting_in_force() -> None:
    assert TestSpec(name="q").replication_rules().unclean_election is False
    allowed = TestSpec(name="q", settings={"unclean.leader.election.enable": "true"})
    assert allowed.replication_rules().unclean_election is True
    context = allowed.package_context()
    assert context is not None and context.rules.unclean_election is True


def test_min_isr_is_the_setting_in_force() -> None:
    # With eligible leader replicas it decides whether a follower cut off past the ISR lag stays
    # electable (nemesis.package_context.ReplicationRules.cut_follower_electable).
    assert TestSpec(name="q").replication_rules().min_insync_replicas == 1
    two = TestSpec(name="q", settings={"min.insync.replicas": "2"})
    assert two.replication_rules().min_insync_replicas == 2
    context = two.package_context()
    assert context is not None and context.rules.min_insync_replicas == 2


def test_a_run_hands_its_rules_and_send_rate_to_its_nemesis(tmp_path: Path) -> None:
    from harness.run.runner import _nemesis_for
    from testbed.record.recorder import Recorder
    from tests.nemesis.test_packages import PackageCluster

    spec = TestSpec(name="q", settings={"min.insync.replicas": "2"}, workload=QueueSpec(rate=50.0))
    nemesis = _nemesis_for(spec, None, PackageCluster(), Recorder(tmp_path / "history.jsonl"), None)  # type: ignore[arg-type]
    assert nemesis is not None and nemesis.packages is not None
    assert nemesis.packages.rules == spec.replication_rules()
    assert nemesis.packages.rules.min_insync_replicas == 2
    assert nemesis.packages.send_rate == 50.0  # a hunt's packages size slowed links from it
