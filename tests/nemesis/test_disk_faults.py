"""``disk-error``, ``slow-disk`` and ``disk-heal``: their declarations, the ability they need, their ops
carrying the lazy filesystem's rule, the heal restarting a halted broker, heal-all, scenario steps
(bad values refused naming the step), a schedule's drawn delay, and shrink replaying the rule --
without containers (the rule's semantics: ``test_lazyfs_faults.py``; the broker's halt:
``tests/broker_impl/test_log_dir_failure.py``)."""

from __future__ import annotations

import itertools

import pytest

from harness.report import plots
from harness.run.spec import needs_lazy_filesystem
from nemesis.broker_acts import NODE_ACTS, VALUE_ACTS
from nemesis.disk_faults import checked_delay, disk_error_command, slow_disk_command
from nemesis.fault_declaration import DISK_FAULTS_ABILITY, POWER_LOSS_ABILITY
from nemesis.fault_kinds import SLOW_DISK_MS_DRAWN, kind_of
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.nemesis_config import cluster_abilities
from nemesis.plan import PlanError, schedule
from nemesis.scenario import parse_scenario
from nemesis.shrink import timeline_steps
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from nemesis.steps import FaultStep, ScenarioError
from testbed.record import faults as record
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_mechanism import FakeCluster
from tests.nemesis.test_plan import LAYOUT3, TOPIC


class FakeDiskCluster(FakeCluster):
    """A FakeCluster on the lazy filesystem: it remembers each node's control commands."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: dict[str, list[str]] = {}

    def drop_unsynced(self, node: str) -> None:
        raise AssertionError("no power loss here")

    def lazyfs_control(self, node: str, command: str) -> None:
        self.commands.setdefault(node, []).append(command)


def nemesis_on(recorded: tuple[Recorder, list[Op]], cluster: FakeCluster) -> Nemesis:
    spec = NemesisSpec(faults=("disk-error", "slow-disk"))
    return Nemesis(spec, cluster, recorded[0], NemesisConfig(leader_partitions=[("q", 0)]))


def test_the_disk_kinds_are_declared_once_with_their_heal_parameters_ability_and_colour() -> None:
    error, slow, heal = kind_of("disk-error"), kind_of("slow-disk"), kind_of("disk-heal")
    assert error.heal == slow.heal == "disk-heal" and heal.nodes == "optional"
    assert [p.name for p in error.params] == ["op", "errno", "files"]
    assert [p.name for p in slow.params] == ["delay_ms", "files"]
    for kind in (error, slow, heal):
        assert {POWER_LOSS_ABILITY, DISK_FAULTS_ABILITY} <= kind.needs
        assert kind.name in MECHANISMS and kind.name in NODE_ACTS
    assert plots.fault_colour("disk-error") == error.colour != plots.fault_colour("slow-disk")
    assert {"disk-error", "slow-disk"} <= set(VALUE_ACTS)
    assert record.HEALS["disk-error"] == record.HEALS["slow-disk"] == "disk-heal"
    assert {"disk-error", "slow-disk"} <= set(NEMESIS_CHOICES) and "disk-heal" not in NEMESIS_CHOICES
    assert needs_lazy_filesystem(["kill", "disk-error"]) and not needs_lazy_filesystem(["kill", "pause"])


def test_the_rules_are_the_lazy_filesystem_s_and_bad_values_say_which() -> None:
    assert disk_error_command() == "fail fsync EIO * always"
    assert disk_error_command("write", "ENOSPC", "*.log") == "fail write ENOSPC *.log always"
    assert slow_disk_command(50, "*checkpoint*") == "slow-fsync 50 *checkpoint*"
    for call, message in (
        (lambda: disk_error_command(op="sync"), "OP must be one of write, fsync, read, not 'sync'"),
        (lambda: disk_error_command(errno="EPERM"), "ERRNO must be one of EIO, ENOSPC, EROFS"),
        (lambda: disk_error_command(files="a b"), "one glob without spaces"),
        (lambda: checked_delay(0), "delay_ms must be a whole number in 1..60000, not 0"),
        (lambda: checked_delay(2.5), "whole number"),
    ):
        with pytest.raises(ValueError, match=message):
            call()


def test_a_cluster_without_disk_rules_refuses_the_faults_before_any_op(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    assert DISK_FAULTS_ABILITY in cluster_abilities(FakeDiskCluster())
    assert DISK_FAULTS_ABILITY not in cluster_abilities(FakeCluster())
    for fault in ("disk-error", "slow-disk", "disk-heal"):
        with pytest.raises(PlanError, match="lazy filesystem"):
            nemesis_on(recorded, FakeCluster()).apply(FaultStep(fault, ("n1",)))
    assert recorded[1] == []


def test_disk_faults_are_ops_carrying_their_rule_and_the_heal_restarts_a_halted_broker(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    _, ops = recorded
    cluster = FakeDiskCluster()
    nemesis = nemesis_on(recorded, cluster)
    step = FaultStep("disk-error", ("n1",), op="write", errno="ENOSPC", files="*.log")
    assert nemesis.apply(step).type == "ok"
    assert nemesis.apply(FaultStep("slow-disk", ("n2",))).type == "ok"
    assert nemesis.active_faults() == ["disk-error n1", "slow-disk n2"]
    cluster.remotes["n1"].state = "dead"  # the broker halted on the error
    assert nemesis.apply(FaultStep("disk-heal")).type == "ok"  # no node: every broker
    assert cluster.commands == {
        "n1": ["fail write ENOSPC *.log always", "clear"],
        "n2": ["slow-fsync 200 *", "clear"],
        "n3": ["clear"],
    }
    assert cluster.starts == ["n1"] and nemesis.active_faults() == []
    assert [(op.f, op.value) for op in ops if op.type == "ok"] == [
        ("disk-error", {"nodes": ["n1"], "op": "write", "errno": "ENOSPC", "files": "*.log"}),
        ("slow-disk", {"nodes": ["n2"], "delay_ms": 200, "files": "*"}),
        ("disk-heal", {"nodes": ["n1", "n2", "n3"]}),
    ]


def test_heal_all_clears_the_disk_before_it_starts_the_broker(recorded: tuple[Recorder, list[Op]]) -> None:
    cluster = FakeDiskCluster()
    nemesis = nemesis_on(recorded, cluster)
    nemesis.apply(FaultStep("disk-error", ("n3",)))
    cluster.remotes["n3"].state = "dead"
    healed = nemesis.heal_all()
    assert (healed[0].f, healed[0].type, healed[0].value) == ("disk-heal", "ok", {"nodes": ["n3"]})
    assert cluster.commands["n3"] == ["fail fsync EIO * always", "clear"] and cluster.starts == ["n3"]


class FakePowerCluster(FakeDiskCluster):
    """A FakeDiskCluster whose power loss is recorded instead of refused."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped: list[str] = []

    def drop_unsynced(self, node: str) -> None:
        self.dropped.append(node)


def test_power_loss_of_a_broker_that_halted_on_a_disk_error_still_drops_its_cache(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    """A halted broker's unsynced tail is exactly what a disk error leaves behind; a power loss
    that refused a dead process (as a kill does) would make that tail immune to power loss."""
    cluster = FakePowerCluster()
    spec = NemesisSpec(faults=("disk-error", "power-loss"))
    nemesis = Nemesis(
        spec, cluster, recorded[0], NemesisConfig(leader_partitions=[("q", 0)], settle_timeout=1)
    )
    nemesis.apply(FaultStep("disk-error", ("n1",)))
    cluster.remotes["n1"].state = "dead"  # the broker halted on the error
    lost = nemesis.power_loss(["n1", "n2"])
    assert (lost.type, lost.value) == ("ok", {"nodes": ["n1", "n2"]})
    assert cluster.dropped == ["n1", "n2"] and cluster.remotes["n2"].state == "dead"


def test_a_schedule_draws_the_slow_disk_delay_from_the_seed(recorded: tuple[Recorder, list[Op]]) -> None:
    spec = NemesisSpec(faults=("slow-disk", "disk-error"), seed=3)
    steps = list(itertools.islice(schedule(spec, LAYOUT3, TOPIC), 80))
    drawn = [step.params["delay_ms"] for step in steps if step.fault == "slow-disk"]
    assert set(drawn) <= set(SLOW_DISK_MS_DRAWN) and len(set(drawn)) >= 2
    assert all(not step.params for step in steps if step.fault == "disk-error")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"fault": "disk-error", "errno": "EPERM"}, "ERRNO must be one of EIO, ENOSPC, EROFS"),
        ({"fault": "disk-error", "op": 3}, "op must be a string"),
        ({"fault": "disk-error", "files": "/abs/*.log"}, "relative to the mount"),
        ({"fault": "slow-disk", "op": "write"}, "op is for disk-error only, not slow-disk"),
        ({"fault": "slow-disk", "delay_ms": 0}, "delay_ms.*1..60000"),
        ({"fault": "kill", "files": "*.log"}, "files is for disk-error and slow-disk only, not kill"),
    ],
)
def test_a_bad_disk_step_is_refused_naming_the_step(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=rf"x\.toml.*step 1.*{message}") as raised:
        parse_scenario({"name": "x", "step": [{"node": "n1", **extra}]}, "x.toml")
    assert "\n" not in str(raised.value)


def test_a_scenario_step_names_its_rule_and_shrink_replays_it() -> None:
    table = {"fault": "disk-error", "node": "n1", "op": "fsync", "errno": "EIO", "files": "*.log"}
    parse_scenario({"name": "x", "step": [table, {"fault": "slow-disk", "node": "n2", "delay_ms": 30}]}, "x")
    value = {"nodes": ["n1"], "target": "one", "op": "fsync", "errno": "EIO", "files": "*.log"}
    ops = [
        Op(0, 10 * 10**9, NEMESIS_PROCESS, "invoke", "disk-error", value),
        Op(1, 10 * 10**9 + 1, NEMESIS_PROCESS, "ok", "disk-error", value),
    ]
    assert timeline_steps(ops)[-1] == {
        "fault": "disk-error",
        "node": "n1",
        "op": "fsync",
        "errno": "EIO",
        "files": "*.log",
    }
