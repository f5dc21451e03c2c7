"""The small mechanism that carries out planned faults on a cluster and records them as ops.

Planning (which nodes, which grudge, when) is pure and lives in :mod:`nemesis.plan`; this module
only acts, through :class:`ClusterHandle` and the nodes' :class:`~testbed.nodes.remote.Remote` s, and
writes every fault and heal to the history as an invoke/complete pair of process ``"nemesis"``.

Ops emitted: one invoke/complete pair per fault or heal, ``f`` the kind's name and ``value``
the shape its declaration gives (:data:`nemesis.fault_kinds.REGISTRY`, ``op_value``); the
completion repeats the value and adds ``"errors"`` ``{node: message}`` when some node did not do
its part.  A fault package is one ``package`` op around the ops of its steps
(:mod:`nemesis.package_run`).

**Dispatch.**  Every fault, whether a scenario's step, a package's or the random schedule's,
goes through :meth:`Nemesis.apply` and the kind's entry of :data:`MECHANISMS`: node-shaped kinds share one
mechanism (track, record, run the kind's per-node act of :data:`nemesis.broker_acts.NODE_ACTS` on each
node); partitions, their heal, workload faults have their own.

``target`` is present on node faults when the random schedule chose the nodes (absent for direct calls);
steps that follow a leader (``leader``, ``followers``, ``isolate-leader``) also carry ``"leader_of"``.

Completion types follow the op model (:mod:`nemesis.outcomes`): ``ok``, ``fail`` only when certainly
nothing happened, ``info`` otherwise.

Concurrency: one fault action at a time (an ``RLock``); a partition is applied on all nodes in
parallel so the cut lands at nearly the same moment everywhere. :meth:`Nemesis.heal_all` is
blind and idempotent -- it flushes and removes both chains on every node, SIGCONTs every broker
and starts every broker that is down -- so it is right even when the tracked state is not (a
fault in flight when the harness was interrupted); it starts no threads, so it can run on the
teardown path of a signal handler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from nemesis import iptables
from nemesis.broker_acts import NODE_ACTS, VALUE_ACTS, BrokerActs
from nemesis.churn_plan import ChurnPlan
from nemesis.client_crash import check_workload_faults, crash_ability, group_crash_ability
from nemesis.consumer_churn import check_churn, run_churn
from nemesis.controller_kinds import CONTROLLER_START, acted_on
from nemesis.fault_declaration import CONSUMER_GROUP, CONTROLLER_NODE, CONTROLLER_PROCESS, FaultKind
from nemesis.fault_kinds import (
    CONSUMER_CHURN,
    HEALS,
    KILL,
    METADATA_DELAY,
    METADATA_HEAL,
    PARTITION,
    PAUSE,
    POWER_LOSS,
    REGISTRY,
    RESUME,
    START,
    names_drawn_as,
)
from nemesis.kind_mechanisms import MECHANISMS
from nemesis.metadata_delay import MetadataDelay
from nemesis.nemesis_config import ABILITY_MISSING, ClusterHandle, cluster_abilities
from nemesis.nemesis_config import NemesisConfig as NemesisConfig
from nemesis.outcomes import complete, on_nodes
from nemesis.packages import PackageContext
from nemesis.plan import (
    Grudge,
    Layout,
    PlanError,
    PlannedStep,
    check_plan,
    describe_grudge,
    grudge_to_json,
    metadata_source,
    resolve_leader_step,
    schedule,
)
from nemesis.scenario_run import MarkerSender
from nemesis.schedule_run import follow_schedule
from nemesis.slow_link import slow_link_heal_script
from nemesis.spec import NemesisSpec
from nemesis.steps import FaultStep
from testbed.cluster.protocol import PowerLoss
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder

NETWORK_RESET_SCRIPT = f"{iptables.remove_script()}\n{slow_link_heal_script()}"
"""Heal-all's blanket network program for every node: every nemesis chain removed, then the
nemesis' root qdisc (``slow-link``), so the node's network is as it was before the first fault."""


class Nemesis:
    """Injects the faults of ``spec``'s random schedule into ``cluster`` and records them with ``recorder``.

    ``config`` (:class:`NemesisConfig`) says the rest.  Raises PlanError at once when the spec
    cannot be carried out on this cluster or workload.
    """

    def __init__(
        self,
        spec: NemesisSpec,
        cluster: ClusterHandle,
        recorder: Recorder,
        config: NemesisConfig | None = None,
    ) -> None:
        config = config or NemesisConfig()
        self.spec, self.cluster, self.recorder = spec, cluster, recorder
        self.config = config
        self.layout = Layout(tuple(cluster.brokers), cluster.controller, spec.partition_scope)
        self._abilities = abilities = cluster_abilities(cluster)
        self.leader_partitions = tuple(config.leader_partitions)
        self.package_cluster = config.package_cluster
        workload = config.workload
        self.packages = (
            PackageContext(
                brokers=self.layout.brokers,
                partitions=len(self.leader_partitions),
                replication_factor=config.replication_factor or len(self.layout.brokers),
                power_loss=isinstance(cluster, PowerLoss),
                metadata_delay=cluster.controller is not None,
                controller_crash=CONTROLLER_PROCESS in abilities,
                quiet_seconds=spec.interval_seconds,
                markers=isinstance(workload, MarkerSender),
                client_crash=crash_ability(workload) is not None,
                consumer_crash=group_crash_ability(workload),
                rules=config.rules,
                send_rate=config.send_rate,
            )
            if config.package_cluster is not None and self.leader_partitions
            else None
        )
        check_plan(spec, self.layout, self.leader_partitions, self.packages)
        for fault in spec.faults:  # a single fault this cluster cannot have: refused now, not mid-run
            if fault in REGISTRY:
                self._require(REGISTRY[fault])
        self.churn = check_workload_faults(spec.faults, workload)  # the churn ability, if needed
        self._workload = workload
        self.markers = workload if isinstance(workload, MarkerSender) else None
        """The workload's marker sends, for packages' ``produce`` steps (None: it has none)."""
        self.heal_all_wait = config.heal_all_wait
        self._action_lock = threading.RLock()  # one fault action at a time; re-entrant for the signal path
        self._state_lock = threading.RLock()
        self._partition: tuple[str, Grudge] | None = None
        self._dirty = False  # something may need healing since the last heal_all
        self._schedule_stopped = False
        self._run_stop_events: list[threading.Event] = []
        self._no_new_steps = threading.Event()  # wind_down: the schedule starts nothing more
        self._remote_timeout = config.remote_timeout
        metadata = MetadataDelay(self.layout, cluster.ip, self._exec)
        self._acts = BrokerActs(cluster, metadata, config.remote_timeout, config.settle_timeout)
        # What a heal must undo, node by node: the brokers' faults and the controller's.
        tracked = (*names_drawn_as("node-target"), *names_drawn_as("controller"))
        self._affected: dict[str, set[str]] = {f: set() for f in tracked if f in HEALS}

    # ----------------------------------------------------------------- schedule

    def plan(self) -> Iterator[PlannedStep]:
        """The seeded schedule this nemesis follows (infinite; pure)."""
        return schedule(self.spec, self.layout, self.leader_partitions, self.packages)

    def run(self, stop_event: threading.Event) -> None:
        """Follow the schedule until ``stop_event`` is set; run it in a thread of its own.

        Returns promptly when the event is set, leaving any active fault for :meth:`heal_all`;
        :meth:`heal_all` sets ``stop_event`` itself, so a schedule never outlives the heal.
        Times are seconds since this call. Remote failures become ops; only a bug raises.
        """
        with self._state_lock:
            self._run_stop_events.append(stop_event)
            if self._schedule_stopped:
                return
        follow_schedule(self, stop_event, self._no_new_steps)

    def wind_down(self) -> None:
        """Start no further scheduled step: the run's time is up.  A fault package in flight goes
        on to its end (its steps stop only at the run's stop event or :meth:`heal_all`); a single
        fault in effect is left to :meth:`heal_all`.  Returns at once."""
        self._no_new_steps.set()

    def execute_step(
        self, step: PlannedStep, *, from_schedule: bool = False
    ) -> tuple[Op | None, PlannedStep]:
        """Inject ``step``'s fault (resolving the leader first if needed); returns the completion and the resolved step.

        With ``from_schedule``, returns ``(None, step)`` without acting once heal_all stopped the schedule.
        """
        with self._action_lock:
            if from_schedule and self._schedule_stopped:
                return None, step
            node_fault = REGISTRY[step.fault].drawn_as == "node-target"
            extra: dict[str, Any] = {"target": step.target} if node_fault else {}
            if step.leader_of is not None:
                topic, partition = step.leader_of
                extra["leader_of"] = {"topic": topic, "partition": partition}
            if step.needs_leader:
                step, problem = self._resolve_leader(step)
                if problem is not None:
                    value = {"kind": step.target} if step.fault == PARTITION else {}
                    invocation = self.recorder.invoke(NEMESIS_PROCESS, step.fault, {**value, **extra})
                    return self.recorder.complete(invocation, "fail", {**value, **extra}, error=problem), step
            if step.fault == PARTITION and step.grudge is None:
                raise ValueError(f"partition step {step} has neither a grudge nor a leader to isolate")
            fault = FaultStep(step.fault, nodes=step.nodes, grudge=step.grudge, kind=step.target)
            return self._apply(fault.with_drawn(step.params), extra), step

    def _resolve_leader(self, step: PlannedStep) -> tuple[PlannedStep, str | None]:
        """``step`` resolved from the current leader, or the step and why that was impossible."""
        assert step.leader_of is not None  # needs_leader implies it
        topic, partition = step.leader_of
        try:
            leader = self.cluster.leader_of(topic, partition)
            if leader is None:
                return step, f"no leader known for {topic}/{partition}"
            return resolve_leader_step(step, self.layout, leader), None
        except Exception as error:  # PlanError (the leader is no broker) or a failed lookup
            return step, f"finding the leader of {topic}/{partition} failed: {error}"

    def heal_step(self, step: PlannedStep, *, from_schedule: bool = False) -> Op | None:
        """Heal what ``execute_step(step)`` did (None: heal_all stopped the schedule and heals instead)."""
        with self._action_lock:
            if from_schedule and self._schedule_stopped:
                return None
            return self._apply(FaultStep(HEALS[step.fault], nodes=step.nodes), {})

    # ----------------------------------------------------------------- faults by kind

    def apply(self, step: FaultStep) -> Op:
        """Carry out ``step`` (its names already nodes) by its kind's mechanism (:data:`MECHANISMS`).

        PlanError, recording nothing, when the cluster lacks an ability the kind needs (a
        metadata delay without a controller node); ValueError for nodes that are no brokers.
        """
        return self._apply(step, {})

    def _apply(self, step: FaultStep, extra: Mapping[str, Any]) -> Op:
        """The lock is each mechanism's to take (a consumer churn, which may wait for a stalled
        consumer, holds none, so heal-all is never kept waiting by it)."""
        if step.fault not in MECHANISMS:
            raise ValueError(f"unknown fault {step.fault!r} in step {step}")
        kind = REGISTRY[step.fault]
        self._require(kind)
        return MECHANISMS[kind.name](self, step, extra)

    def _require(self, kind: FaultKind) -> None:
        """PlanError when this cluster lacks an ability ``kind`` needs (the workload's are the
        mechanism's to check: :func:`nemesis.consumer_churn.check_churn` names the flag)."""
        missing = sorted(kind.needs - self._abilities - {CONSUMER_GROUP})
        if CONTROLLER_NODE in missing:
            metadata_source(self.layout)  # raises, saying why in the words of the plan
        if missing:
            raise PlanError(f"{kind.name} needs {ABILITY_MISSING[missing[0]]}")

    def kill(self, nodes: Sequence[str]) -> Op:
        """SIGKILL the broker on ``nodes`` and wait until it is gone."""
        return self.apply(FaultStep(KILL, tuple(nodes)))

    def start(self, nodes: Sequence[str]) -> Op:
        """Start the broker on each of ``nodes`` where it is not running."""
        return self.apply(FaultStep(START, tuple(nodes)))

    def power_loss(self, nodes: Sequence[str]) -> Op:
        """SIGKILL the broker on ``nodes``, wait until it is gone, then drop every write its
        data directory had not fsynced (the lazy filesystem's ``drop``).  Healed by ``start``."""
        return self.apply(FaultStep(POWER_LOSS, tuple(nodes)))

    def pause(self, nodes: Sequence[str], announced: bool = True) -> Op:
        """SIGSTOP the broker on ``nodes``; ``announced=False`` marks the op as a planted liveness bug
        that opens no fault window for the checker (:mod:`testbed.record.faults`)."""
        return self.apply(FaultStep(PAUSE, tuple(nodes), announced=announced))

    def resume(self, nodes: Sequence[str], announced: bool = True) -> Op:
        """SIGCONT the broker on ``nodes`` (``announced``: as for :meth:`pause`)."""
        return self.apply(FaultStep(RESUME, tuple(nodes), announced=announced))

    def metadata_delay(self, nodes: Sequence[str]) -> Op:
        """Make the brokers ``nodes`` drop every packet from the controller: they stop learning
        metadata until :meth:`heal_metadata_delay`. PlanError, recording nothing, without a controller."""
        return self.apply(FaultStep(METADATA_DELAY, tuple(nodes)))

    def heal_metadata_delay(self, nodes: Sequence[str] = ()) -> Op:
        """Let ``nodes`` (default: every broker) hear from the controller again; partitions stay."""
        return self.apply(FaultStep(METADATA_HEAL, tuple(nodes)))

    def consumer_churn(self, stop: str, pick: int) -> Op:
        """Replace one of the workload's group consumers (``stop``: leave or stall; ``pick``: which,
        see :mod:`nemesis.consumer_churn`) -- a scenario's churn step.  PlanError, recording
        nothing, when the workload has no consumer group to churn."""
        ability = self.churn or check_churn((CONSUMER_CHURN,), self._workload)
        assert ability is not None  # check_churn raises rather than answer None for a churn fault
        return run_churn(self.recorder, ability, ChurnPlan(stop, pick))

    def partition(
        self, grudge: Grudge, kind: str = "custom", *, extra: Mapping[str, Any] | None = None
    ) -> Op:
        """Make every node drop traffic from the nodes ``grudge`` names for it, replacing any previous partition.

        Nodes of the partition universe that ``grudge`` omits are left dropping nothing.
        """
        known = set(self.layout.all_nodes)
        named = set(grudge).union(*grudge.values()) if grudge else set()
        if named - known:
            raise ValueError(f"grudge names unknown node(s) {', '.join(sorted(named - known))}")
        full = {
            node: frozenset(grudge.get(node, frozenset())) for node in {*self.layout.partition_nodes, *grudge}
        }
        value = {"kind": kind, "grudge": grudge_to_json(full), **(extra or {})}
        with self._action_lock:
            with self._state_lock:
                self._partition = (kind, full)
                self._dirty = True
            invocation = self.recorder.invoke(NEMESIS_PROCESS, PARTITION, value)
            try:
                scripts = iptables.partition_scripts(full, self.cluster.ip)
            except Exception as error:  # a bad address: nothing was applied anywhere
                with self._state_lock:
                    self._partition = None
                return self.recorder.complete(invocation, "fail", value, error=f"no rules applied: {error}")
            failures = on_nodes(sorted(full), lambda node: self._exec(node, scripts[node]), parallel=True)
            if len(failures) == len(full) and all(failure.definite for failure in failures.values()):
                with self._state_lock:
                    self._partition = None
            return complete(self.recorder, invocation, value, failures, len(full))

    def heal_partition(self) -> Op:
        """Flush the nemesis chain on every node of the partition universe, and on every other
        node the partition in effect named (a scenario's grudge may cut the controller off
        although the random schedule's universe leaves it out)."""
        with self._action_lock:
            with self._state_lock:
                named = set(self._partition[1]) if self._partition is not None else set()
            nodes = [*self.layout.partition_nodes, *sorted(named - set(self.layout.partition_nodes))]
            invocation = self.recorder.invoke(NEMESIS_PROCESS, "heal", {"nodes": nodes})
            failures = on_nodes(nodes, lambda node: self._exec(node, iptables.heal_script()), parallel=True)
            if not failures:
                with self._state_lock:
                    self._partition = None
            return complete(self.recorder, invocation, {"nodes": nodes}, failures, len(nodes))

    # ----------------------------------------------------------------- heal-all and progress

    def heal_all(self) -> list[Op]:
        """Undo every fault on every node, blindly; stop the schedule for good. Idempotent; returns the ops recorded.

        Heals each node fault that has a heal of its own on its nodes (``metadata-heal``; a killed
        controller's ``controller-start`` first, so the brokers come back to it), removes every nemesis
        chain (flush, unhook, delete) and the slow-link qdisc on every node (:data:`NETWORK_RESET_SCRIPT`), SIGCONTs every broker, starts every broker
        that is not running. Waits up to ``heal_all_wait`` for a fault action in flight, then
        heals anyway. Returns ``[]`` without touching anything when no fault was injected since
        the last heal_all; a heal_all whose ops did not all succeed stays due.
        """
        with self._state_lock:
            self._schedule_stopped = True
            self._no_new_steps.set()
            for event in self._run_stop_events:
                event.set()  # wakes run() out of its wait at once
        acquired = self._action_lock.acquire(timeout=self.heal_all_wait)
        try:
            with self._state_lock:
                if not self._dirty:
                    return []
                self._dirty = False
                killed = set().union(*(self._affected[fault] for fault in self._stopping_faults()))
            nodes = list(self.layout.all_nodes)
            brokers = list(self.layout.brokers)
            ops = self._heal_own_kinds()
            ops.append(
                self._act(
                    "heal", {"nodes": nodes}, nodes, lambda node: self._exec(node, NETWORK_RESET_SCRIPT)
                )
            )
            if ops[-1].type == "ok":
                with self._state_lock:
                    self._partition = None
                    self._affected[METADATA_DELAY].clear()
            ops.append(self._act(RESUME, {"nodes": brokers}, brokers, self._acts.resume_if_running))
            if ops[-1].type == "ok":
                with self._state_lock:
                    self._affected[PAUSE].clear()
            down = [node for node in brokers if node in killed or not self._acts.surely_alive(node)]
            if down:
                value: dict[str, Any] = {"nodes": down}
                if set(down) - killed:
                    value["not_killed_by_nemesis"] = [node for node in down if node not in killed]
                ops.append(self._act(START, value, down, self._acts.start))
                with self._state_lock:
                    for fault in self._stopping_faults():
                        self._affected[fault] -= set(down) - set(ops[-1].value.get("errors", {}))
            if any(op.type != "ok" for op in ops):
                with self._state_lock:
                    self._dirty = True
            return ops
        finally:
            if acquired:
                self._action_lock.release()

    def _heal_own_kinds(self) -> list[Op]:
        """Heal-all's first ops: each node fault healed neither by the blanket ``start`` nor the
        blanket ``resume`` (a metadata delay) is healed on its tracked nodes by its own heal, one
        op per heal kind, so its window closes in the history.  (The chain removal after them
        undoes a metadata delay too.)"""
        ops: list[Op] = []
        for heal in dict.fromkeys(HEALS[fault] for fault in self._affected):
            if heal in (START, RESUME):
                continue
            healed = [fault for fault in self._affected if HEALS[fault] == heal]
            with self._state_lock:
                tracked = [
                    node for node in self.layout.all_nodes if any(node in self._affected[f] for f in healed)
                ]
            if heal == CONTROLLER_START:  # also one whose kill found it dead already, or that died unasked
                tracked = list(dict.fromkeys([*tracked, *self._acts.controller_down(self.layout.controller)]))
            if not tracked:
                continue
            ops.append(
                self._act(heal, {"nodes": tracked}, tracked, functools.partial(NODE_ACTS[heal], self._acts))
            )
            if ops[-1].type == "ok":
                with self._state_lock:
                    for fault in healed:
                        self._affected[fault].clear()
        return ops

    def heal_in_effect(self) -> list[Op]:
        """Heal exactly what is in effect now (a fault package that stopped half-way), unlike
        :meth:`heal_all` leaving the schedule running; one op per heal kind, returned."""
        with self._state_lock:
            partitioned = self._partition is not None
            by_heal: dict[str, set[str]] = {}
            for fault, nodes in self._affected.items():
                if nodes:
                    by_heal.setdefault(HEALS[fault], set()).update(nodes)
        ops = [self.heal_partition()] if partitioned else []
        return ops + [self.heal_on_nodes(heal, sorted(nodes)) for heal, nodes in by_heal.items()]

    def _stopping_faults(self) -> list[str]:
        """The node faults that leave the broker down until a ``start`` (kill; later power loss)."""
        return [fault for fault in self._affected if HEALS[fault] == START]

    def active_faults(self) -> list[str]:
        """Short descriptions of the faults in effect, for the live progress line (e.g. ``kill n2``)."""
        with self._state_lock:
            faults = [f"{kind} {','.join(sorted(nodes))}" for kind, nodes in self._affected.items() if nodes]
            if self._partition is not None:
                kind, grudge = self._partition
                faults.append(f"partition {kind} {describe_grudge(grudge)}")
            return faults

    # ----------------------------------------------------------------- node faults

    def inject_on_nodes(self, fault: str, nodes: Sequence[str], extra: Mapping[str, Any]) -> Op:
        """The mechanism of a node fault: track it on ``nodes``, record it, run its per-node act."""
        nodes = acted_on(REGISTRY[fault], nodes, self.layout.brokers, self.layout.controller)
        value = {"nodes": nodes, **extra}
        act = NODE_ACTS[fault]
        with self._action_lock:
            tracked = self._affected.get(fault, set())  # a kind without a heal: nothing to track
            with self._state_lock:
                tracked |= set(nodes)  # before acting: heal_all must see a fault in flight
                self._dirty = True
            invocation = self.recorder.invoke(NEMESIS_PROCESS, fault, value)
            valued = VALUE_ACTS.get(fault)
            if valued is not None:
                failures = on_nodes(nodes, lambda node: valued(self._acts, node, value), parallel=True)
            else:
                failures = on_nodes(nodes, lambda node: act(self._acts, node), parallel=True)
            with self._state_lock:
                tracked -= {node for node, failure in failures.items() if failure.definite}
            return complete(self.recorder, invocation, value, failures, len(nodes))

    def heal_on_nodes(self, heal: str, nodes: Sequence[str], extra: Mapping[str, Any] | None = None) -> Op:
        """The mechanism of a node fault's heal: record it, run its per-node act, and stop tracking
        every fault it heals on the nodes it reached (a ``start`` heals a kill and a power loss alike)."""
        nodes = acted_on(REGISTRY[heal], nodes, self.layout.brokers, self.layout.controller)
        value = {"nodes": nodes, **(extra or {})}
        act = NODE_ACTS[heal]
        with self._action_lock:
            invocation = self.recorder.invoke(NEMESIS_PROCESS, heal, value)
            failures = on_nodes(nodes, lambda node: act(self._acts, node), parallel=True)
            with self._state_lock:
                for kind in self._affected:
                    if HEALS[kind] != heal:
                        continue
                    self._affected[kind] -= {
                        node
                        for node in nodes
                        if node not in failures or (kind == PAUSE and failures[node].definite)
                    }
            return complete(self.recorder, invocation, value, failures, len(nodes))

    def _exec(self, node: str, script: str) -> None:
        self.cluster.remote(node).exec(script, timeout=self._remote_timeout)

    # ----------------------------------------------------------------- recording

    def _act(self, f: str, value: dict[str, Any], nodes: Sequence[str], action: Callable[[str], None]) -> Op:
        """Record ``f``, run ``action`` on each node in turn (no threads: heal-all's path), complete it."""
        invocation = self.recorder.invoke(NEMESIS_PROCESS, f, value)
        failures = on_nodes(nodes, action, parallel=False)
        return complete(self.recorder, invocation, value, failures, len(nodes))
