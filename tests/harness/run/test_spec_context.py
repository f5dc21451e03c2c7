"""What a test spec tells the fault packages before the cluster starts: the ISR lag in force."""

from __future__ import annotations

from harness.run.spec import TestSpec


def test_the_isr_lag_is_the_one_in_force_on_the_bundled_broker() -> None:
    # The harness's own failure-detection default (testbed.cluster.bundled), then --set.
    assert TestSpec(name="q").isr_lag_seconds() == 5.0
    assert TestSpec(name="q", settings={"replica.lag.time.max.ms": "12000"}).isr_lag_seconds() == 12.0
    context = TestSpec(name="q").package_context()
    assert context is not None and context.isr_lag_seconds == 5.0


def test_the_isr_lag_of_a_system_whose_settings_are_not_known_is_unknown() -> None:
    assert TestSpec(name="q", target="tansu").isr_lag_seconds() is None
    assert TestSpec(name="q", bootstrap="127.0.0.1:9092").isr_lag_seconds() is None
    external = TestSpec(name="q", bootstrap="127.0.0.1:9092", settings={"replica.lag.time.max.ms": "30000"})
    assert external.isr_lag_seconds() == 30.0


def test_whether_a_crashed_broker_keeps_its_isr_memberships_follows_the_elr_in_force() -> None:
    # KIP-966 (ELR, on by default): a broker back from a crash leaves every ISR; packages that need
    # a bounced replica to stay in it stop it cleanly there (nemesis.bug_packages.bounce_stop).
    assert TestSpec(name="q").unclean_restart_keeps_isr() is False
    without_elr = TestSpec(name="q", settings={"eligible.leader.replicas.enable": "false"})
    assert without_elr.unclean_restart_keeps_isr() is True
    context = without_elr.package_context()
    assert context is not None and context.unclean_restart_keeps_isr is True
    assert TestSpec(name="q", target="tansu").unclean_restart_keeps_isr() is None


def test_whether_unclean_elections_may_happen_is_the_setting_in_force() -> None:
    assert TestSpec(name="q").unclean_election() is False
    allowed = TestSpec(name="q", settings={"unclean.leader.election.enable": "true"})
    assert allowed.unclean_election() is True
    context = allowed.package_context()
    assert context is not None and context.unclean_election is True
    assert TestSpec(name="q", target="tansu").unclean_election() is None
