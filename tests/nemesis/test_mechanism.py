"""The nemesis mechanism: op recording and heal-all logic on an in-memory cluster, then the real thing in namespaces.

The fake cluster below only keeps daemon states and the scripts it was asked to run, so the tests
can check exactly which op each outcome becomes (ok / fail / info) and what heal-all touches. The
second half runs the same Nemesis against network namespaces (``tests/nemesis/netns.py``): real
iptables, real SIGKILL/SIGSTOP of a real process, real restarts.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nemesis import broker_acts, iptables
from nemesis.fault_kinds import SHUTDOWN
from nemesis.mechanism import NETWORK_RESET_SCRIPT, Nemesis, NemesisConfig
from nemesis.plan import PlanError, PlannedStep, complete_grudge, isolate
from nemesis.spec import HEALS, NemesisSpec
from nemesis.steps import FaultStep
from testbed.nodes.remote import CommandFailed, ExecResult, RemoteError, RemoteTimeout
from testbed.record.faults import NemesisRow, fault_windows, nemesis_events
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import ECHO_PORT, ECHO_SERVER, PROBE, NetnsCluster

# --------------------------------------------------------------------------- in-memory cluster


class FakeRemote:
    """A node that keeps one daemon's state and records every call; ``errors`` makes a call raise once."""

    def __init__(self, node: str) -> None:
        self._node = node
        self.state = "running"  # running | stopped | dead
        self.scripts: list[str] = []
        self.signals: list[str] = []
        self.errors: dict[str, Exception] = {}
        self.exits_on_sigterm = True  # False: a broker whose shutdown hangs

    @property
    def node(self) -> str:
        return self._node

    def _maybe_fail(self, call: str) -> None:
        if call in self.errors:
            raise self.errors.pop(call)

    def exec(
        self, command: Any, *, timeout: float = 30, check: bool = True, env: Mapping[str, str] | None = None
    ) -> ExecResult:
        self._maybe_fail("exec")
        self.scripts.append(command)
        return ExecResult(0, b"", b"")

    def signal(self, name: str, sig: signal.Signals, *, timeout: float = 30) -> bool:
        assert name == ("controller" if self._node == "c" else "broker")
        self._maybe_fail("signal")
        self.signals.append(sig.name)
        if self.state == "dead":
            return False
        if sig.name in ("SIGTERM", "SIGINT"):
            self.state = "dead" if self.exits_on_sigterm else self.state
            return True
        self.state = (
            {"SIGKILL": "dead", "SIGSTOP": "stopped", "SIGCONT": "running"}[sig.name]
            if not (sig.name == "SIGCONT" and self.state == "running")
            else "running"
        )
        return True

    def is_alive(self, name: str, *, timeout: float = 30) -> bool:
        self._maybe_fail("is_alive")
        return self.state != "dead"

    def put(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the nemesis copies no files")

    def get(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the nemesis copies no files")

    def start_daemon(self, *args: Any, **kwargs: Any) -> int:
        raise AssertionError("the nemesis starts brokers through the cluster handle")

    def close(self) -> None:
        pass


class FakeCluster:
    def __init__(self, brokers: tuple[str, ...] = ("n1", "n2", "n3"), controller: str | None = "c") -> None:
        self.brokers = list(brokers)
        self.controller = controller
        nodes = [*brokers, *([controller] if controller else [])]
        self.remotes = {node: FakeRemote(node) for node in nodes}
        self.addresses = {node: f"10.9.0.{number}" for number, node in enumerate(nodes, start=1)}
        self.leader: str | None = "n2"
        self.leader_error: Exception | None = None
        self.starts: list[str] = []

    def remote(self, node: str) -> FakeRemote:
        return self.remotes[node]

    def ip(self, node: str) -> str:
        return self.addresses[node]

    def start_broker(self, node: str) -> None:
        self.starts.append(node)
        self.remotes[node].state = "running"

    def start_controller(self) -> None:
        assert self.controller is not None
        self.starts.append(self.controller)
        self.remotes[self.controller].state = "running"

    def leader_of(self, topic: str, partition: int) -> str | None:
        if self.leader_error is not None:
            raise self.leader_error
        return self.leader

    def calls(self) -> int:
        return sum(len(r.scripts) + len(r.signals) for r in self.remotes.values()) + len(self.starts)


def make(
    recorded: tuple[Recorder, list[Op]], spec: NemesisSpec | None = None, cluster: FakeCluster | None = None
) -> tuple[Nemesis, FakeCluster, list[Op]]:
    recorder, ops = recorded
    cluster = cluster or FakeCluster()
    nemesis = Nemesis(
        spec or NemesisSpec(faults=("kill", "pause", "partition")),
        cluster,
        recorder,
        NemesisConfig(leader_partitions=[("queue", 0)], settle_timeout=1),
    )
    return nemesis, cluster, ops


def pairs(ops: list[Op]) -> list[tuple[str, str, Any]]:
    return [(op.f, op.type, op.value) for op in ops]


def test_kill_then_start_are_recorded_as_nemesis_ops_and_tracked(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, ops = make(recorded)
    nemesis.kill(["n3", "n1"])
    assert cluster.remotes["n1"].state == cluster.remotes["n3"].state == "dead"
    assert nemesis.active_faults() == ["kill n1,n3"]
    nemesis.start(["n1", "n3"])
    assert cluster.starts == ["n1", "n3"] or sorted(cluster.starts) == ["n1", "n3"]
    assert nemesis.active_faults() == []
    assert pairs(ops) == [
        ("kill", "invoke", {"nodes": ["n1", "n3"]}),
        ("kill", "ok", {"nodes": ["n1", "n3"]}),
        ("start", "invoke", {"nodes": ["n1", "n3"]}),
        ("start", "ok", {"nodes": ["n1", "n3"]}),
    ]
    assert all(op.process == NEMESIS_PROCESS for op in ops)
    history = (recorded[0]._writer.path).read_text().splitlines()
    assert len(history) == 5 and '"process":"nemesis"' in history[1], "ops reach history.jsonl as they happen"


def test_a_shutdown_sigterms_the_broker_and_waits_for_its_exit_and_start_heals_it(
    recorded: tuple[Recorder, list[Op]], monkeypatch: pytest.MonkeyPatch
) -> None:
    nemesis, cluster, ops = make(recorded)
    done = nemesis.apply(FaultStep(SHUTDOWN, ("n1",)))
    assert (done.type, cluster.remotes["n1"].signals, cluster.remotes["n1"].state) == (
        "ok",
        ["SIGTERM"],
        "dead",
    )
    assert nemesis.active_faults() == ["shutdown n1"]
    nemesis.start(["n1"])
    assert cluster.starts == ["n1"] and nemesis.active_faults() == []
    # A broker still running when the wait is over is SIGKILLed, and the op says so: info, since
    # the history must not call a crash a clean stop; heal-all still owes it a start.
    monkeypatch.setattr(broker_acts, "SHUTDOWN_TIMEOUT_S", 0.05)
    cluster.remotes["n2"].exits_on_sigterm = False
    hung = nemesis.apply(FaultStep(SHUTDOWN, ("n2",)))
    assert hung.type == "info" and "SIGKILLed" in str(hung.error)
    assert (cluster.remotes["n2"].signals, cluster.remotes["n2"].state) == (["SIGTERM", "SIGKILL"], "dead")
    assert nemesis.active_faults() == ["shutdown n2"]
    assert HEALS[SHUTDOWN] == "start"
    assert [(op.f, op.type) for op in ops][-2:] == [("shutdown", "invoke"), ("shutdown", "info")]
    assert done.value["controlled"] is True


def test_an_uncontrolled_shutdown_sigints_the_broker_and_says_so(recorded: tuple[Recorder, list[Op]]) -> None:
    # SIGINT: the bundled broker's clean shutdown without the controlled handover (it keeps its
    # ISR memberships), the stop KAFKA-7128's package bounces B with where a crash would not.
    nemesis, cluster, _ = make(recorded)
    done = nemesis.apply(FaultStep(SHUTDOWN, ("n3",), controlled=False))
    assert (done.type, done.value["controlled"]) == ("ok", False)
    assert (cluster.remotes["n3"].signals, cluster.remotes["n3"].state) == (["SIGINT"], "dead")
    assert nemesis.active_faults() == ["shutdown n3"]


def test_definite_refusals_fail_and_unknown_outcomes_are_info(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, _ = make(recorded)
    cluster.remotes["n1"].state = "dead"
    failed = nemesis.kill(["n1"])
    assert (failed.type, failed.error) == ("fail", "n1: broker not running")
    assert failed.value == {"nodes": ["n1"], "errors": {"n1": "broker not running"}}
    assert nemesis.active_faults() == [], "a kill that certainly did nothing is not an active fault"

    cluster.remotes["n2"].errors["signal"] = RemoteTimeout("n2", "signal broker", 10)
    partial = nemesis.pause(["n2", "n3"])
    assert partial.type == "info" and set(partial.value["errors"]) == {"n2"}
    assert "RemoteTimeout" in str(partial.error)
    assert nemesis.active_faults() == ["pause n2,n3"], (
        "an unknown outcome stays tracked so heal-all covers it"
    )

    cluster.remotes["n3"].state = "dead"
    resumed = nemesis.resume(["n2", "n3"])
    assert resumed.type == "info" and resumed.value["errors"] == {"n3": "broker not running"}
    assert nemesis.active_faults() == [], "resumed, or nothing left to resume"


def test_partition_applies_the_grudge_on_every_node_of_the_scope_and_heal_flushes(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, _ = make(recorded)
    done = nemesis.partition(isolate(["n1", "n2", "n3"], "n1"), "isolate-one")
    assert done.type == "ok"
    assert done.value == {"kind": "isolate-one", "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}}
    assert cluster.remotes["n1"].scripts == [iptables.partition_script(["10.9.0.2", "10.9.0.3"])]
    assert cluster.remotes["n2"].scripts == [iptables.partition_script(["10.9.0.1"])]
    assert cluster.remotes["c"].scripts == [], "scope 'brokers' leaves the controller alone"
    assert nemesis.active_faults() == ["partition isolate-one n1 | n2,n3"]
    healed = nemesis.heal_partition()
    assert (healed.f, healed.type, healed.value) == ("heal", "ok", {"nodes": ["n1", "n2", "n3"]})
    assert all(cluster.remotes[node].scripts[-1] == iptables.heal_script() for node in ("n1", "n2", "n3"))
    assert nemesis.active_faults() == []


def test_heal_flushes_a_controller_the_grudge_named_outside_the_scope(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    """A scenario may cut the controller off although the schedule's scope is the brokers; its
    heal must lift the controller's rules too, or the isolated broker stays fenced for good."""
    nemesis, cluster, _ = make(recorded)
    grudge = {"n1": frozenset({"n2", "n3", "c"}), "c": frozenset({"n1"})}
    assert nemesis.partition(grudge, "isolate-with-controller").type == "ok"
    assert cluster.remotes["c"].scripts == [iptables.partition_script(["10.9.0.1"])]
    healed = nemesis.heal_partition()
    assert (healed.type, healed.value) == ("ok", {"nodes": ["n1", "n2", "n3", "c"]})
    assert cluster.remotes["c"].scripts[-1] == iptables.heal_script()
    assert nemesis.heal_partition().value == {"nodes": ["n1", "n2", "n3"]}, "nothing more once healed"


def test_partition_failures(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, _ = make(recorded)
    for node in ("n1", "n2", "n3"):
        cluster.remotes[node].errors["exec"] = CommandFailed(
            node, "sh", 4, b"", b"iptables: Permission denied"
        )
    refused = nemesis.partition(isolate(["n1", "n2", "n3"], "n1"), "isolate-one")
    assert refused.type == "fail" and "Permission denied" in str(refused.error)
    assert nemesis.active_faults() == []
    cluster.remotes["n3"].errors["exec"] = RemoteError("n3", "connection lost")
    assert nemesis.partition(complete_grudge([["n1"], ["n2", "n3"]]), "halves").type == "info"
    assert nemesis.active_faults() == ["partition halves n1 | n2,n3"]
    with pytest.raises(ValueError, match="unknown node"):
        nemesis.partition({"n1": frozenset({"n7"})})
    cluster.addresses["n2"] = "fd00::2"
    bad = nemesis.partition(isolate(["n1", "n2", "n3"], "n1"))
    assert bad.type == "fail" and "no rules applied: address of node n2" in str(bad.error)


def test_leader_steps_follow_the_leader_or_fail_without_touching_anything(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, _ = make(recorded, NemesisSpec(faults=("kill", "partition"), partition_scope="all"))
    step = PlannedStep(0, 1, "kill", "leader", leader_of=("queue", 0))
    completion, resolved = nemesis.execute_step(step)
    assert completion is not None and completion.type == "ok"
    assert completion.value == {
        "nodes": ["n2"],
        "target": "leader",
        "leader_of": {"topic": "queue", "partition": 0},
    }
    assert cluster.remotes["n2"].state == "dead" and resolved.nodes == ("n2",)
    nemesis.heal_step(resolved)
    assert cluster.remotes["n2"].state == "running"

    isolate_step = PlannedStep(0, 1, "partition", "isolate-leader", leader_of=("queue", 0))
    completion, _ = nemesis.execute_step(isolate_step)
    assert completion is not None and completion.value["grudge"]["n2"] == ["c", "n1", "n3"], (
        "scope all: controller too"
    )

    before = cluster.calls()
    cluster.leader = None
    completion, _ = nemesis.execute_step(step)
    assert completion is not None and (completion.type, completion.error) == (
        "fail",
        "no leader known for queue/0",
    )
    cluster.leader_error = RemoteError("n1", "metadata request timed out")
    completion, _ = nemesis.execute_step(step)
    assert (
        completion is not None
        and completion.type == "fail"
        and "metadata request timed out" in str(completion.error)
    )
    cluster.leader_error, cluster.leader = None, "c"
    completion, _ = nemesis.execute_step(step)
    assert (
        completion is not None
        and completion.type == "fail"
        and "not one of the brokers" in str(completion.error)
    )
    assert cluster.calls() == before, "no node was touched without a leader"


def test_heal_all_undoes_everything_blindly_once(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, ops = make(recorded)
    assert nemesis.heal_all() == [], "nothing injected, nothing to heal"
    assert cluster.calls() == 0
    nemesis.kill(["n1"])
    nemesis.pause(["n2"])
    nemesis.partition(isolate(["n1", "n2", "n3"], "n3"), "isolate-one")
    cluster.remotes["n3"].state = "dead"  # died on its own
    del ops[:]
    healed = nemesis.heal_all()
    assert [(op.f, op.type) for op in healed] == [("heal", "ok"), ("resume", "ok"), ("start", "ok")]
    assert healed[0].value == {"nodes": ["n1", "n2", "n3", "c"]}
    assert all(remote.scripts[-1] == NETWORK_RESET_SCRIPT for remote in cluster.remotes.values())
    assert healed[2].value == {"nodes": ["n1", "n3"], "not_killed_by_nemesis": ["n3"]}
    assert {node: remote.state for node, remote in cluster.remotes.items()} == dict.fromkeys(
        cluster.remotes, "running"
    )
    assert nemesis.active_faults() == []
    assert [op.type for op in ops] == ["invoke", "ok"] * 3
    calls = cluster.calls()
    assert nemesis.heal_all() == [] and cluster.calls() == calls, "idempotent: a second call does nothing"


def test_the_controller_is_killed_and_started_as_its_own_node_and_heal_all_starts_it_first(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, ops = make(recorded)
    nemesis.kill(["n1", "n2", "n3"])
    kill = nemesis.apply(FaultStep("controller-kill", ()))
    assert (kill.f, kill.type, kill.value) == ("controller-kill", "ok", {"nodes": ["c"]})
    assert cluster.remotes["c"].signals == ["SIGKILL"] and cluster.remotes["c"].state == "dead"
    assert nemesis.active_faults() == ["kill n1,n2,n3", "controller-kill c"]
    again = nemesis.apply(FaultStep("controller-kill", ()))
    assert again.type == "fail" and "controller not running" in str(again.value), "definite: nothing happened"
    healed = nemesis.heal_all()
    assert [(op.f, op.value["nodes"]) for op in healed] == [
        ("controller-start", ["c"]),
        ("heal", ["n1", "n2", "n3", "c"]),
        ("resume", ["n1", "n2", "n3"]),
        ("start", ["n1", "n2", "n3"]),
    ]
    assert cluster.starts == ["c", "n1", "n2", "n3"] and nemesis.active_faults() == []
    windows = fault_windows(
        nemesis_events(NemesisRow(i, i, op.type, op.f, op.value, None) for i, op in enumerate(ops))
    )
    assert ("controller-kill", ("c",), "controller-start") in {
        (w.kind, w.nodes, w.healed_by) for w in windows
    }
    assert all(window.end_ns is not None for window in windows), "every window closed by its heal"


def test_the_controller_kinds_act_on_the_controller_only_and_need_its_process(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, _ = make(recorded)
    with pytest.raises(ValueError, match="not the controller node of this cluster: n1"):
        nemesis.inject_on_nodes("controller-kill", ["n1"], {})
    with pytest.raises(ValueError, match="not brokers of this cluster: c"):
        nemesis.kill(["c"])
    started = nemesis.apply(FaultStep("controller-start", ()))
    assert (started.type, cluster.starts) == ("ok", []), "running already: nothing started"

    class NoControllerProcess(FakeCluster):
        start_controller = None  # type: ignore[assignment]  # tansu's "controller" is its PostgreSQL

    nemesis, cluster, _ = make(recorded, cluster=NoControllerProcess())
    with pytest.raises(PlanError, match="controller-kill needs a controller process"):
        nemesis.apply(FaultStep("controller-kill", ()))
    assert cluster.calls() == 0


def test_a_scheduled_controller_kill_kills_the_controller_and_its_heal_starts_it(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, ops = make(recorded, spec=NemesisSpec(faults=("controller-kill",), seed=5))
    step = next(nemesis.plan())
    killed, resolved = nemesis.execute_step(step, from_schedule=True)
    assert killed is not None and (killed.f, killed.type, killed.value) == (
        "controller-kill",
        "ok",
        {"nodes": ["c"]},
    )
    assert cluster.remotes["c"].state == "dead" and all(
        cluster.remotes[node].signals == [] for node in ("n1", "n2", "n3")
    ), "the brokers are not touched"
    healed = nemesis.heal_step(resolved, from_schedule=True)
    assert healed is not None and (healed.f, healed.type, healed.value) == (
        "controller-start",
        "ok",
        {"nodes": ["c"]},
    )
    assert cluster.starts == ["c"] and nemesis.active_faults() == []
    assert [op.f for op in ops] == ["controller-kill"] * 2 + ["controller-start"] * 2


@pytest.mark.parametrize(
    ("controller", "refusal"),
    [
        (None, "controller-kill needs a controller node, and this cluster has none"),
        ("c", "needs a controller process"),
    ],
)
def test_a_controller_kill_in_the_mix_is_refused_before_anything_is_recorded_where_it_cannot_act(
    recorded: tuple[Recorder, list[Op]], controller: str | None, refusal: str
) -> None:
    class NoControllerProcess(FakeCluster):
        start_controller = None  # type: ignore[assignment]  # tansu's "controller" is its PostgreSQL

    cluster = NoControllerProcess(controller=controller)
    with pytest.raises(PlanError, match=refusal):
        make(recorded, spec=NemesisSpec(faults=("kill", "controller-kill")), cluster=cluster)
    assert cluster.calls() == 0 and recorded[1] == []


def test_heal_all_that_did_not_fully_succeed_stays_due(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, _ = make(recorded)
    nemesis.kill(["n1"])
    cluster.remotes["n2"].errors["exec"] = RemoteTimeout("n2", "exec", 10)
    first = nemesis.heal_all()
    assert [(op.f, op.type) for op in first] == [("heal", "info"), ("resume", "ok"), ("start", "ok")]
    second = nemesis.heal_all()
    assert [(op.f, op.type) for op in second] == [("heal", "ok"), ("resume", "ok")]
    assert nemesis.heal_all() == []


def test_heal_all_is_reentrant_from_a_signal_handler(recorded: tuple[Recorder, list[Op]]) -> None:
    """SIGINT arriving while the main thread is inside a fault action must not deadlock heal_all."""
    nemesis, cluster, _ = make(recorded)
    healed: list[list[Op]] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: healed.append(nemesis.heal_all()))
    original = cluster.start_broker

    def start_and_get_interrupted(node: str) -> None:
        original(node)
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs in this thread, which holds the action lock

    cluster.start_broker = start_and_get_interrupted  # type: ignore[method-assign]
    try:
        nemesis.kill(["n1"])
        nemesis.start(["n1"])
    finally:
        signal.signal(signal.SIGUSR1, previous)
    # heal_all ran inside start(): n1 still counted as killed, so it checked it too (alive: nothing to start).
    assert len(healed) == 1 and [(op.f, op.type) for op in healed[0]] == [
        ("heal", "ok"),
        ("resume", "ok"),
        ("start", "ok"),
    ]
    assert cluster.starts == ["n1"]


# --------------------------------------------------------------------------- metadata delay (fake cluster)


def test_metadata_delay_and_its_heal_are_nemesis_ops_on_the_metadata_chain(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, ops = make(recorded)
    done = nemesis.metadata_delay(["n3", "n1"])
    assert (done.f, done.type, done.value) == ("metadata-delay", "ok", {"nodes": ["n1", "n3"]})
    controller_ip = cluster.addresses["c"]
    assert cluster.remotes["n1"].scripts == [iptables.metadata_delay_script(controller_ip)]
    assert "-A TIDEMARK-META -s 10.9.0.4/32 -j DROP" in cluster.remotes["n3"].scripts[0]
    assert cluster.remotes["n2"].scripts == cluster.remotes["c"].scripts == []
    assert nemesis.active_faults() == ["metadata-delay n1,n3"]

    nemesis.partition(isolate(["n1", "n2", "n3"], "n2"), "isolate-one")
    nemesis.heal_partition()
    assert nemesis.active_faults() == ["metadata-delay n1,n3"], "a partition heal leaves the delay"
    assert iptables.metadata_heal_script() not in cluster.remotes["n1"].scripts

    healed = nemesis.heal_metadata_delay(["n1"])
    assert (healed.f, healed.type, healed.value) == ("metadata-heal", "ok", {"nodes": ["n1"]})
    assert cluster.remotes["n1"].scripts[-1] == iptables.metadata_heal_script()
    assert nemesis.active_faults() == ["metadata-delay n3"]
    everywhere = nemesis.heal_metadata_delay()
    assert everywhere.value == {"nodes": ["n1", "n2", "n3"]} and nemesis.active_faults() == []
    assert [(op.f, op.type) for op in ops] == [
        ("metadata-delay", "invoke"),
        ("metadata-delay", "ok"),
        ("partition", "invoke"),
        ("partition", "ok"),
        ("heal", "invoke"),
        ("heal", "ok"),
        ("metadata-heal", "invoke"),
        ("metadata-heal", "ok"),
        ("metadata-heal", "invoke"),
        ("metadata-heal", "ok"),
    ]
    assert all(op.process == NEMESIS_PROCESS for op in ops)


def test_scheduled_metadata_delay_follows_the_leader_and_heals(recorded: tuple[Recorder, list[Op]]) -> None:
    nemesis, cluster, _ = make(recorded, NemesisSpec(faults=("metadata-delay",)))
    step = PlannedStep(0, 1, "metadata-delay", "followers", leader_of=("queue", 0))
    completion, resolved = nemesis.execute_step(step)
    assert completion is not None and (completion.f, completion.type) == ("metadata-delay", "ok")
    assert completion.value == {
        "nodes": ["n1", "n3"],
        "target": "followers",
        "leader_of": {"topic": "queue", "partition": 0},
    }
    assert cluster.remotes["n2"].scripts == [], "the leader keeps hearing from the controller"
    healed = nemesis.heal_step(resolved)
    assert healed is not None and (healed.f, healed.type, healed.value) == (
        "metadata-heal",
        "ok",
        {"nodes": ["n1", "n3"]},
    )
    assert resolved.heal_f == "metadata-heal"


def test_heal_all_closes_a_metadata_delay_and_removes_both_chains(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, _ = make(recorded)
    nemesis.metadata_delay(["n2"])
    healed = nemesis.heal_all()
    assert [(op.f, op.type, op.value) for op in healed] == [
        ("metadata-heal", "ok", {"nodes": ["n2"]}),
        ("heal", "ok", {"nodes": ["n1", "n2", "n3", "c"]}),
        ("resume", "ok", {"nodes": ["n1", "n2", "n3"]}),
    ]
    assert cluster.remotes["n2"].scripts[-2:] == [iptables.metadata_heal_script(), NETWORK_RESET_SCRIPT]
    assert "-X TIDEMARK-META" in iptables.remove_script() and "-X TIDEMARK;" in iptables.remove_script()
    assert nemesis.active_faults() == [] and nemesis.heal_all() == []

    nemesis.metadata_delay(["n1"])
    cluster.remotes["n1"].errors["exec"] = RemoteTimeout("n1", "exec", 10)  # the metadata heal times out
    first_try = nemesis.heal_all()
    assert [(op.f, op.type) for op in first_try] == [
        ("metadata-heal", "info"),
        ("heal", "ok"),
        ("resume", "ok"),
    ]
    assert nemesis.active_faults() == [], "the chain removal healed it anyway"
    assert [op.f for op in nemesis.heal_all()] == ["heal", "resume"], "an info op leaves heal-all due"


def test_metadata_delay_is_refused_without_a_controller_node(recorded: tuple[Recorder, list[Op]]) -> None:
    recorder, ops = recorded
    external = FakeCluster(controller=None)
    with pytest.raises(PlanError, match=r"metadata-delay drops the controller's packets.*no controller node"):
        Nemesis(
            NemesisSpec(faults=("kill", "metadata-delay")),
            external,
            recorder,
            NemesisConfig(leader_partitions=[("q", 0)]),
        )
    nemesis, cluster, _ = make(recorded, NemesisSpec(faults=("kill",)), external)
    with pytest.raises(PlanError, match="no controller node"):
        nemesis.metadata_delay(["n1"])
    assert ops == [] and cluster.calls() == 0, "refused before anything was recorded or touched"
    assert nemesis.heal_metadata_delay(["n1"]).type == "ok", "healing is harmless anywhere"


def test_a_bad_controller_address_fails_the_delay_without_touching_a_node(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, _ = make(recorded)
    cluster.addresses["c"] = "fd00::9"
    failed = nemesis.metadata_delay(["n1"])
    assert failed.type == "fail" and "address of node c: 'fd00::9' is IPv6" in str(failed.error)
    assert cluster.remotes["n1"].scripts == [] and nemesis.active_faults() == []


def run_in_thread(nemesis: Nemesis, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=nemesis.run, args=(stop,), daemon=True)
    thread.start()
    return thread


def wait_for_ops(ops: list[Op], count: int, timeout: float = 10) -> None:
    done = threading.Event()
    deadline_thread = threading.Timer(timeout, done.set)
    deadline_thread.start()
    try:
        while len(ops) < count and not done.wait(0.01):
            pass
    finally:
        deadline_thread.cancel()
    assert len(ops) >= count, f"only {len(ops)} ops after {timeout} s"


def run_schedule_briefly(nemesis: Nemesis, ops: list[Op], count: int) -> None:
    """Follow ``nemesis``'s schedule in a thread until ``count`` ops were recorded, then stop it."""
    stop = threading.Event()
    thread = threading.Thread(target=nemesis.run, args=(stop,), daemon=True)
    thread.start()
    wait_for_ops(ops, count)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_run_follows_the_seeded_schedule_with_each_fault_followed_by_its_heal(
    recorded: tuple[Recorder, list[Op]], tmp_path: Path
) -> None:
    spec = NemesisSpec(
        faults=("kill", "pause", "partition"), interval_seconds=0.02, fault_seconds=0.02, seed=11
    )
    nemesis, _, ops = make(recorded, spec)
    stop = threading.Event()
    thread = run_in_thread(nemesis, stop)
    wait_for_ops(ops, 24)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    heal_of = {"kill": "start", "pause": "resume", "partition": "heal"}
    completions = [op for op in ops if op.type != "invoke"]
    invokes = [op for op in ops if op.type == "invoke"]
    assert [op.f for op in invokes] == [op.f for op in completions], (
        "every invoke is completed before the next"
    )
    for fault, heal in zip(completions[0:-1:2], completions[1::2], strict=False):
        assert heal.f == heal_of[fault.f]
        if fault.f != "partition":
            assert heal.value["nodes"] == fault.value["nodes"]
    # The same seed on a fresh cluster makes the same faults in the same order.
    second_recorder = Recorder(tmp_path / "again.jsonl")
    again: list[Op] = []
    second_recorder.listeners.append(again.append)
    replay, _, _ = make((second_recorder, again), spec)
    thread = run_in_thread(replay, stop := threading.Event())
    wait_for_ops(again, 24)
    stop.set()
    thread.join(5)
    second_recorder.close()
    assert pairs(again[:24]) == pairs(ops[:24])


def test_run_returns_at_once_when_stopped_or_when_heal_all_took_over(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, _, ops = make(recorded, NemesisSpec(faults=("kill",), interval_seconds=3600))
    stop = threading.Event()
    thread = run_in_thread(nemesis, stop)
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and ops == [], "no sleeping through the stop event"

    busy, cluster, busy_ops = make(
        recorded, NemesisSpec(faults=("kill",), interval_seconds=0.01, fault_seconds=60)
    )
    thread = run_in_thread(busy, threading.Event())
    wait_for_ops(busy_ops, 2)
    healed = busy.heal_all()
    thread.join(5)
    assert not thread.is_alive(), "heal_all stops the schedule: run returns without any stop event"
    assert [op.f for op in healed] == ["heal", "resume", "start"]
    assert all(remote.state == "running" for remote in cluster.remotes.values())


def test_run_heals_every_scheduled_metadata_delay(recorded: tuple[Recorder, list[Op]]) -> None:
    spec = NemesisSpec(
        faults=("metadata-delay", "partition"), interval_seconds=0.01, fault_seconds=0.01, seed=5
    )
    nemesis, _, ops = make(recorded, spec)
    stop = threading.Event()
    thread = run_in_thread(nemesis, stop)
    wait_for_ops(ops, 16)
    stop.set()
    thread.join(5)
    completions = [op for op in ops if op.type != "invoke"][:8]
    assert "metadata-delay" in {op.f for op in completions}
    for fault, heal in zip(completions[0::2], completions[1::2], strict=True):
        assert heal.f == HEALS[fault.f]
        if fault.f == "metadata-delay":
            assert heal.value["nodes"] == fault.value["nodes"]


# --------------------------------------------------------------------------- real: network namespaces


def all_reach(cluster: NetnsCluster) -> bool:
    return all(cluster.reachable(a, b) for a in cluster.brokers for b in cluster.brokers if a != b)


def test_real_faults_and_heals_in_network_namespaces(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    recorder, ops = recorded
    nemesis = Nemesis(
        NemesisSpec(faults=("kill", "pause", "partition"), partition_scope="all"),
        netns,
        recorder,
        NemesisConfig(leader_partitions=[("queue", 0)]),
    )
    netns.wait_for(lambda: all_reach(netns), "echo servers up")

    netns.leader = "n2"
    completion, step = nemesis.execute_step(
        PlannedStep(0, 1, "partition", "isolate-leader", leader_of=("queue", 0))
    )
    assert completion is not None and completion.type == "ok", completion
    assert not netns.reachable("n1", "n2") and not netns.reachable("n2", "n3") and netns.reachable("n1", "n3")
    assert netns.reachable("c", "n1") and not netns.reachable("c", "n2"), "scope all cuts the controller too"
    assert nemesis.heal_step(step).type == "ok"  # type: ignore[union-attr]
    netns.wait_for(lambda: all_reach(netns), "connectivity after heal")

    assert nemesis.kill(["n3"]).type == "ok"
    assert netns.broker_state("n3") == "dead" and not netns.reachable("n1", "n3")
    assert nemesis.start(["n3"]).type == "ok" and netns.broker_starts == ["n3"]
    netns.wait_for(lambda: netns.reachable("n1", "n3"), "restarted n3 answers")

    assert nemesis.pause(["n1"]).type == "ok"
    # kill(2) returns once SIGSTOP is queued; the process stops when it next handles it (CI saw "R")
    netns.wait_for(lambda: netns.broker_state("n1") == "T", "paused n1 stopped")
    assert not netns.reachable("n2", "n1", timeout=0.5)
    assert nemesis.resume(["n1"]).type == "ok"
    netns.wait_for(lambda: netns.reachable("n2", "n1"), "resumed n1 answers")
    assert all(op.type in ("invoke", "ok") for op in ops)


def test_real_schedule_then_heal_all_leaves_the_nodes_as_they_were(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    recorder, ops = recorded
    rules_before = {node: netns.remote(node).exec(["iptables", "-S"]).stdout_text for node in netns.nodes}
    spec = NemesisSpec(
        faults=("kill", "pause", "partition"),
        interval_seconds=0.1,
        fault_seconds=0.3,
        partition_scope="all",
        seed=4,
    )
    nemesis = Nemesis(spec, netns, recorder, NemesisConfig(leader_partitions=[("queue", 0)]))
    planned = list(itertools.islice(nemesis.plan(), 40))
    needed = next(
        count for count in range(1, 41) if {step.fault for step in planned[:count]} == set(spec.faults)
    )
    stop = threading.Event()
    thread = run_in_thread(nemesis, stop)
    wait_for_ops(ops, 4 * needed, timeout=60)  # every fault kind injected and healed at least once
    stop.set()
    thread.join(30)
    assert not thread.is_alive()
    nemesis.heal_all()
    assert {op.f for op in ops} >= {"kill", "start", "pause", "resume", "partition", "heal"}, pairs(ops)
    assert all(op.type in ("invoke", "ok") for op in ops), [
        op for op in ops if op.type not in ("invoke", "ok")
    ]
    assert nemesis.active_faults() == []
    assert all(netns.broker_state(node) in ("S", "R") for node in netns.brokers)
    netns.wait_for(lambda: all_reach(netns), "full connectivity after heal-all")
    assert {
        node: netns.remote(node).exec(["iptables", "-S"]).stdout_text for node in netns.nodes
    } == rules_before


def test_real_metadata_delay_outlives_a_partition_heal_and_heal_all_removes_it(
    netns: NetnsCluster, recorded: tuple[Recorder, list[Op]]
) -> None:
    """The controller "c" runs no echo server, so "n1 hears from c" is probed from c's side."""
    recorder, ops = recorded
    rules_before = {node: netns.remote(node).exec(["iptables", "-S"]).stdout_text for node in netns.nodes}
    nemesis = Nemesis(
        NemesisSpec(faults=("metadata-delay", "partition")),
        netns,
        recorder,
        NemesisConfig(leader_partitions=[("q", 0)]),
    )
    netns.wait_for(lambda: all_reach(netns) and netns.reachable("c", "n1"), "echo servers up")

    assert nemesis.metadata_delay(["n1"]).type == "ok"
    assert not netns.reachable("c", "n1") and netns.reachable("c", "n2")
    assert all_reach(netns), "broker<->broker traffic is untouched"
    assert nemesis.partition(isolate(["n1", "n2", "n3"], "n3"), "isolate-one").type == "ok"
    assert nemesis.heal_partition().type == "ok"
    netns.wait_for(lambda: all_reach(netns), "brokers reach each other after the partition heal")
    assert not netns.reachable("c", "n1"), "the partition heal left the metadata delay in place"
    assert nemesis.heal_metadata_delay(["n1"]).type == "ok"
    netns.wait_for(lambda: netns.reachable("c", "n1"), "c reaches n1 after the metadata heal")

    assert nemesis.metadata_delay(["n2", "n3"]).type == "ok" and not netns.reachable("c", "n3")
    assert [op.f for op in nemesis.heal_all()] == ["metadata-heal", "heal", "resume"]
    netns.wait_for(
        lambda: netns.reachable("c", "n2") and netns.reachable("c", "n3"), "c reaches every broker"
    )
    assert {
        node: netns.remote(node).exec(["iptables", "-S"]).stdout_text for node in netns.nodes
    } == rules_before
    assert all(op.type in ("invoke", "ok") for op in ops)


# --------------------------------------------------------------------------- real: containers of the node image


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not true after {timeout} s")
        time.sleep(0.05)


class EchoBrokers:
    """A ClusterHandle over a DockerCluster whose "broker" daemon is the echo server of ``netns.py``."""

    def __init__(self, cluster: Any) -> None:
        from testbed.cluster.image import IMAGE_PYTHON

        self.cluster = cluster
        self.python = IMAGE_PYTHON
        self.brokers = list(cluster.broker_names)
        self.controller: str | None = "controller"
        self.leader: str | None = self.brokers[0]

    def remote(self, node: str) -> Any:
        return self.cluster.remote(node)

    def ip(self, node: str) -> str:
        return str(self.cluster.ip(node))

    def start_broker(self, node: str) -> None:
        self.remote(node).start_daemon("broker", [self.python, "-c", ECHO_SERVER], log_path="/tmp/echo.log")

    def leader_of(self, topic: str, partition: int) -> str | None:
        return self.leader

    def reachable(self, source: str, target: str, timeout: float = 1.0) -> bool:
        argv = [self.python, "-c", PROBE, self.ip(target), str(ECHO_PORT), str(timeout)]
        return int(self.remote(source).exec(argv, timeout=timeout * 2 + 5, check=False).exit_code) == 0


@pytest.mark.docker
def test_real_faults_in_containers_of_the_node_image(
    docker_client: Any, image: str, recorded: tuple[Recorder, list[Op]]
) -> None:
    from testbed.cluster.docker_cluster import DockerCluster

    recorder, ops = recorded
    with DockerCluster(docker_client, image, brokers=3, fuse=False) as cluster:
        handle = EchoBrokers(cluster)
        for node in handle.brokers:
            handle.start_broker(node)
        everyone = [*handle.brokers, "controller"]
        rules_before = {node: handle.remote(node).exec(["iptables", "-S"]).stdout_text for node in everyone}
        brokers_reach = lambda: all(  # noqa: E731
            handle.reachable(a, b) for a in handle.brokers for b in handle.brokers if a != b
        )
        wait_until(brokers_reach, 20, "echo servers answer")
        nemesis = Nemesis(
            NemesisSpec(faults=("kill", "pause", "partition"), partition_scope="all"),
            handle,
            recorder,
            NemesisConfig(leader_partitions=[("queue", 0)]),
        )
        completion, _ = nemesis.execute_step(
            PlannedStep(0, 1, "partition", "isolate-leader", leader_of=("queue", 0))
        )
        assert completion is not None and completion.type == "ok", completion
        assert not handle.reachable("n2", "n1") and not handle.reachable("n1", "n3")
        assert handle.reachable("n2", "n3") and not handle.reachable("controller", "n1")
        assert nemesis.kill(["n2"]).type == "ok" and not handle.reachable("n3", "n2")
        assert nemesis.pause(["n3"]).type == "ok" and not handle.reachable("n2", "n3", timeout=0.5)
        healed = nemesis.heal_all()
        assert [(op.f, op.type) for op in healed] == [("heal", "ok"), ("resume", "ok"), ("start", "ok")]
        wait_until(brokers_reach, 20, "every broker answers every broker after heal-all")
        assert {
            node: handle.remote(node).exec(["iptables", "-S"]).stdout_text for node in everyone
        } == rules_before
        assert all(op.type in ("invoke", "ok") for op in ops)


def test_an_unannounced_pause_is_recorded_as_such_and_opens_no_liveness_window(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    """The brokers are paused all the same; only the checker's fault windows leave it out."""
    nemesis, cluster, ops = make(recorded)
    nemesis.pause(["n1"], announced=False)
    assert nemesis.active_faults() == ["pause n1"]
    nemesis.resume(["n1"], announced=False)
    nemesis.pause(["n2"])
    nemesis.resume(["n2"])
    assert cluster.remotes["n1"].signals == ["SIGSTOP", "SIGCONT"]
    unannounced = {"nodes": ["n1"], "announced": False}
    assert pairs(ops)[:4] == [
        ("pause", "invoke", unannounced),
        ("pause", "ok", unannounced),
        ("resume", "invoke", unannounced),
        ("resume", "ok", unannounced),
    ]
    rows = [NemesisRow(op.index, op.time, op.type, op.f, op.value, op.error) for op in ops]
    windows = fault_windows(nemesis_events(rows))
    assert [(w.nodes, w.announced) for w in windows] == [(("n1",), False), (("n2",), True)]
    assert [w.nodes for w in fault_windows(nemesis_events(rows), announced_only=True)] == [("n2",)]


def test_wind_down_starts_nothing_new_and_leaves_a_fault_in_effect_to_heal_all(
    recorded: tuple[Recorder, list[Op]],
) -> None:
    nemesis, cluster, ops = make(
        recorded, NemesisSpec(faults=("kill",), interval_seconds=0.01, fault_seconds=60)
    )
    stop = threading.Event()
    thread = run_in_thread(nemesis, stop)
    wait_for_ops(ops, 2)
    nemesis.wind_down()
    thread.join(5)
    assert not thread.is_alive(), "the schedule ends at once: its fault lasts 60 s"
    assert not stop.is_set(), "winding down is not stopping the run"
    assert [(op.f, op.type) for op in ops] == [("kill", "invoke"), ("kill", "ok")]
    assert nemesis.active_faults() != []
    assert [op.f for op in nemesis.heal_all()][-1] == "start"
    assert all(remote.state == "running" for remote in cluster.remotes.values())


def test_a_fault_without_a_heal_runs_its_act_and_leaves_nothing_in_effect(
    recorded: tuple[Recorder, list[Op]], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    class Members:
        def elect_preferred(self, node: str) -> None:
            asked.append(node)

    monkeypatch.setattr(broker_acts.BrokerActs, "_members", lambda self: Members())
    nemesis, _, ops = make(recorded, NemesisSpec(faults=("elect-preferred",)))
    done = nemesis.apply(FaultStep("elect-preferred", ("n1", "n3")))
    assert (done.type, sorted(asked)) == ("ok", ["n1", "n3"])
    assert nemesis.active_faults() == [], "nothing to heal: heal-all owes it nothing"
    assert [(op.f, op.type) for op in ops] == [("elect-preferred", "invoke"), ("elect-preferred", "ok")]
    healed = {op.f for op in nemesis.heal_all()}  # its usual sweep (heal, resume), nothing for the election
    assert not healed & {"start", "recommission", "elect-preferred"} and healed <= {"heal", "resume"}
    rows = [NemesisRow(op.index, op.time, op.type, op.f, op.value, op.error) for op in ops[:2]]
    [window] = fault_windows(nemesis_events(rows))  # the report shades its op, invoke to completion
    assert (window.kind, window.start_ns, window.end_ns) == ("elect-preferred", ops[0].time, ops[1].time)
