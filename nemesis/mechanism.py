"""The small mechanism that carries out planned faults on a cluster and records them as ops.

Planning (which nodes, which grudge, when) is pure and lives in :mod:`nemesis.plan`; this module
only acts, through :class:`ClusterHandle` and the nodes' :class:`~testbed.nodes.remote.Remote` s, and
writes every fault and heal to the history as an invoke/complete pair of process ``"nemesis"``.

Ops emitted (``value`` of the invoke; the completion repeats it and adds ``"errors"``
``{node: message}`` when some node did not do its part):

=============  ========================================================================
``f``          ``value``
=============  ========================================================================
``kill``       ``{"nodes": [...], "target": "minority"}`` -- SIGKILL the broker daemon; ok once
               it is dead (not merely signalled)
``start``      ``{"nodes": [...]}`` -- heal of ``kill``: start the broker where it is not running
               (heal-all adds ``"not_killed_by_nemesis": [...]`` for brokers found down that the
               nemesis never killed: a crash worth reading the node's log for)
``pause``      ``{"nodes": [...], "target": "leader"}`` -- SIGSTOP the broker's process group
``resume``     ``{"nodes": [...]}`` -- heal of ``pause``: SIGCONT
``partition``  ``{"kind": "halves", "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], ...}}`` --
               node -> the nodes it drops traffic from (iptables, chain ``TIDEMARK``)
``heal``       ``{"nodes": [...]}`` -- heal of ``partition``: flush the chain on those nodes
``metadata-``  ``{"nodes": [...], "target": "one"}`` -- ``metadata-delay``: the brokers drop every
``delay``      packet from the controller (chain ``TIDEMARK-META``, :mod:`nemesis.metadata_delay`)
``metadata-``  ``{"nodes": [...]}`` -- heal of ``metadata-delay``: flush ``TIDEMARK-META`` on those
``heal``       brokers (partitions stay)
``package``    a fault package around the ops of its steps (:mod:`nemesis.package_run`)
=============  ========================================================================

``target`` is present on node faults when the random schedule chose the nodes (absent for direct
calls); steps that follow a leader (``leader``, ``followers``, ``isolate-leader``) also carry
``"leader_of": {"topic": t, "partition": p}``.

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

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from nemesis import iptables
from nemesis.consumer_churn import check_churn, run_churn
from nemesis.metadata_delay import MetadataDelay
from nemesis.outcomes import Refused, complete, on_nodes
from nemesis.packages import PackageContext
from nemesis.plan import (
    ChurnPlan,
    Grudge,
    Layout,
    PlanError,
    PlannedStep,
    TopicPartition,
    check_plan,
    describe_grudge,
    grudge_to_json,
    metadata_source,
    resolve_leader_step,
    schedule,
)
from nemesis.scenario_run import MarkerSender
from nemesis.schedule_run import follow_schedule
from nemesis.spec import (
    CONSUMER_CHURN,
    HEALS,
    KILL,
    METADATA_DELAY,
    PARTITION,
    PAUSE,
    POWER_LOSS,
    NemesisSpec,
)
from testbed.cluster.protocol import Cluster, NodeControl, PowerLoss
from testbed.nodes.remote import RemoteError
from testbed.record.faults import ANNOUNCED
from testbed.record.ops import NEMESIS_PROCESS, Op
from testbed.record.recorder import Recorder

BROKER_DAEMON = "broker"
"""The Remote daemon name of the broker process on every broker node."""


class ClusterHandle(NodeControl, Protocol):
    """What the nemesis needs from a cluster: its node names and :class:`NodeControl`."""

    @property
    def brokers(self) -> Sequence[str]:
        """Broker node names, e.g. ``["n1", "n2", "n3"]``."""
        ...

    @property
    def controller(self) -> str | None:
        """The controller's node name, or None when the cluster's metadata lives elsewhere."""
        ...


@dataclasses.dataclass(frozen=True)
class _NodeFault:
    """How one node fault acts on a broker node and how it is healed.

    A new node fault (power loss) joins by adding its name to ``nemesis.spec.NODE_FAULT_KINDS`` and
    one entry to ``Nemesis._node_faults``; targets, tracking, op recording and heal-all (which
    restarts the brokers of every fault healed by ``start``) then work for it unchanged.
    """

    heal_f: str
    inject: Callable[[str], None]
    heal: Callable[[str], None]


class Nemesis:
    """Injects the faults of ``spec``'s random schedule into ``cluster`` and records them with ``recorder``.

    ``leader_partitions`` are the topic partitions whose leader the ``leader``/``followers``/
    ``isolate-leader`` targets follow (one is drawn per step); ``workload`` is asked for the
    optional abilities some faults need (``consumer-churn``: :mod:`nemesis.consumer_churn`; marker
    sends for packages' ``produce`` steps: :class:`nemesis.scenario_run.MarkerSender`).
    Raises PlanError at once when the spec cannot be carried out on this cluster or workload. ``remote_timeout`` bounds every remote call;
    ``settle_timeout`` bounds the wait for a SIGKILLed broker to be gone.  ``isr_lag_seconds``
    (``replica.lag.time.max.ms``, where the caller knows it) lets a package outlast the ISR lag.
    """

    def __init__(
        self,
        spec: NemesisSpec,
        cluster: ClusterHandle,
        recorder: Recorder,
        *,
        leader_partitions: Sequence[TopicPartition] = (),
        remote_timeout: float = 10.0,
        settle_timeout: float = 10.0,
        heal_all_wait: float = 30.0,
        package_cluster: Cluster | None = None,
        replication_factor: int | None = None,
        workload: object | None = None,
        isr_lag_seconds: float | None = None,
    ) -> None:
        self.spec = spec
        self.cluster = cluster
        self.recorder = recorder
        self.layout = Layout(tuple(cluster.brokers), cluster.controller, spec.partition_scope)
        self.leader_partitions = tuple(leader_partitions)
        self.package_cluster = package_cluster
        self.packages = (
            PackageContext(
                brokers=self.layout.brokers,
                partitions=len(self.leader_partitions),
                replication_factor=replication_factor or len(self.layout.brokers),
                power_loss=isinstance(cluster, PowerLoss),
                metadata_delay=cluster.controller is not None,
                quiet_seconds=spec.interval_seconds,
                markers=isinstance(workload, MarkerSender),
                isr_lag_seconds=isr_lag_seconds,
            )
            if package_cluster is not None and self.leader_partitions
            else None
        )
        check_plan(spec, self.layout, self.leader_partitions, self.packages)
        self.churn = check_churn(spec.faults, workload)  # the workload's optional ability, if needed
        self._workload = workload
        self.markers = workload if isinstance(workload, MarkerSender) else None
        """The workload's marker sends, for packages' ``produce`` steps (None: it has none)."""
        self.remote_timeout = remote_timeout
        self.settle_timeout = settle_timeout
        self.heal_all_wait = heal_all_wait
        self._action_lock = threading.RLock()  # one fault action at a time; re-entrant for the signal path
        self._state_lock = threading.RLock()
        self._partition: tuple[str, Grudge] | None = None
        self._dirty = False  # something may need healing since the last heal_all
        self._schedule_stopped = False
        self._run_stop_events: list[threading.Event] = []
        self._no_new_steps = threading.Event()  # wind_down: the schedule starts nothing more
        self._metadata = MetadataDelay(self.layout, cluster.ip, self._exec)
        self._node_faults: dict[str, _NodeFault] = {
            KILL: _NodeFault("start", self._kill_one, self._start_one),
            PAUSE: _NodeFault(
                "resume",
                lambda node: self._signal_broker(node, signal.SIGSTOP),
                lambda node: self._signal_broker(node, signal.SIGCONT),
            ),
            POWER_LOSS: _NodeFault("start", self._power_loss_one, self._start_one),
            METADATA_DELAY: _NodeFault(HEALS[METADATA_DELAY], self._metadata.inject, self._metadata.heal),
        }
        if POWER_LOSS in spec.faults and not isinstance(cluster, PowerLoss):
            raise PlanError("power-loss needs a cluster whose data directories are on the lazy filesystem")
        self._affected: dict[str, set[str]] = {fault: set() for fault in self._node_faults}

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
            extra: dict[str, Any] = {"target": step.target} if step.fault in self._node_faults else {}
            if step.leader_of is not None:
                topic, partition = step.leader_of
                extra["leader_of"] = {"topic": topic, "partition": partition}
            if step.needs_leader:
                step, problem = self._resolve_leader(step)
                if problem is not None:
                    value = {"kind": step.target} if step.fault == PARTITION else {}
                    invocation = self.recorder.invoke(NEMESIS_PROCESS, step.fault, {**value, **extra})
                    return self.recorder.complete(invocation, "fail", {**value, **extra}, error=problem), step
            if step.fault == PARTITION:
                if step.grudge is None:
                    raise ValueError(f"partition step {step} has neither a grudge nor a leader to isolate")
                return self.partition(step.grudge, step.target, extra=extra), step
            if step.fault not in self._node_faults:
                raise ValueError(f"unknown fault {step.fault!r} in step {step}")
            return self._node_fault(step.fault, step.nodes, extra), step

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
            if step.fault == PARTITION:
                return self.heal_partition()
            return self._node_heal(step.fault, step.nodes)

    # ----------------------------------------------------------------- direct faults (scenarios use these too)

    def kill(self, nodes: Sequence[str]) -> Op:
        """SIGKILL the broker on ``nodes`` and wait until it is gone."""
        return self._node_fault(KILL, nodes, {})

    def start(self, nodes: Sequence[str]) -> Op:
        """Start the broker on each of ``nodes`` where it is not running."""
        return self._node_heal(KILL, nodes)

    def power_loss(self, nodes: Sequence[str]) -> Op:
        """SIGKILL the broker on ``nodes``, wait until it is gone, then drop every write its
        data directory had not fsynced (the lazy filesystem's ``drop``).  Healed by ``start``."""
        return self._node_fault(POWER_LOSS, nodes, {})

    def pause(self, nodes: Sequence[str], announced: bool = True) -> Op:
        """SIGSTOP the broker on ``nodes``; ``announced=False`` marks the op as a planted liveness bug
        that opens no fault window for the checker (:mod:`testbed.record.faults`)."""
        return self._node_fault(PAUSE, nodes, {} if announced else {ANNOUNCED: False})

    def resume(self, nodes: Sequence[str], announced: bool = True) -> Op:
        """SIGCONT the broker on ``nodes`` (``announced``: as for :meth:`pause`)."""
        return self._node_heal(PAUSE, nodes, {} if announced else {ANNOUNCED: False})

    def metadata_delay(self, nodes: Sequence[str]) -> Op:
        """Make the brokers ``nodes`` drop every packet from the controller: they stop learning
        metadata until :meth:`heal_metadata_delay`. PlanError, recording nothing, without a controller."""
        metadata_source(self.layout)
        return self._node_fault(METADATA_DELAY, nodes, {})

    def heal_metadata_delay(self, nodes: Sequence[str] = ()) -> Op:
        """Let ``nodes`` (default: every broker) hear from the controller again; partitions stay."""
        return self._node_heal(METADATA_DELAY, nodes or self.layout.brokers)

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

        Heals (``metadata-heal``) the brokers that may carry a metadata delay, removes both nemesis
        chains (flush, unhook, delete) on every node, SIGCONTs every broker, starts every broker
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
                delayed = [node for node in self.layout.brokers if node in self._affected[METADATA_DELAY]]
            nodes = list(self.layout.all_nodes)
            brokers = list(self.layout.brokers)
            ops: list[Op] = []
            if delayed:  # the chain removal below undoes it too; this op closes its window in the history
                ops.append(self._act(HEALS[METADATA_DELAY], {"nodes": delayed}, delayed, self._metadata.heal))
            ops.append(
                self._act(
                    "heal", {"nodes": nodes}, nodes, lambda node: self._exec(node, iptables.remove_script())
                )
            )
            if ops[-1].type == "ok":
                with self._state_lock:
                    self._partition = None
                    self._affected[METADATA_DELAY].clear()
            ops.append(self._act("resume", {"nodes": brokers}, brokers, self._resume_if_running))
            if ops[-1].type == "ok":
                with self._state_lock:
                    self._affected[PAUSE].clear()
            down = [node for node in brokers if node in killed or not self._surely_alive(node)]
            if down:
                value: dict[str, Any] = {"nodes": down}
                if set(down) - killed:
                    value["not_killed_by_nemesis"] = [node for node in down if node not in killed]
                ops.append(self._act("start", value, down, self._start_one))
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

    def heal_in_effect(self) -> list[Op]:
        """Heal exactly what is in effect now (a fault package that stopped half-way), unlike
        :meth:`heal_all` leaving the schedule running; one op per heal kind, returned."""
        with self._state_lock:
            partitioned = self._partition is not None
            by_heal: dict[str, tuple[str, set[str]]] = {}
            for fault, nodes in self._affected.items():
                if nodes:
                    by_heal.setdefault(self._node_faults[fault].heal_f, (fault, set()))[1].update(nodes)
        ops = [self.heal_partition()] if partitioned else []
        return ops + [self._node_heal(fault, sorted(nodes)) for fault, nodes in by_heal.values()]

    def _stopping_faults(self) -> list[str]:
        """The node faults that leave the broker down until a ``start`` (kill; later power loss)."""
        return [fault for fault, actions in self._node_faults.items() if actions.heal_f == "start"]

    def active_faults(self) -> list[str]:
        """Short descriptions of the faults in effect, for the live progress line (e.g. ``kill n2``)."""
        with self._state_lock:
            faults = [f"{kind} {','.join(sorted(nodes))}" for kind, nodes in self._affected.items() if nodes]
            if self._partition is not None:
                kind, grudge = self._partition
                faults.append(f"partition {kind} {describe_grudge(grudge)}")
            return faults

    # ----------------------------------------------------------------- node faults

    def _node_fault(self, fault: str, nodes: Sequence[str], extra: Mapping[str, Any]) -> Op:
        nodes = self._brokers(nodes)
        value = {"nodes": nodes, **extra}
        with self._action_lock:
            with self._state_lock:
                self._affected[fault] |= set(nodes)  # before acting: heal_all must see a fault in flight
                self._dirty = True
            invocation = self.recorder.invoke(NEMESIS_PROCESS, fault, value)
            failures = on_nodes(nodes, self._node_faults[fault].inject, parallel=True)
            with self._state_lock:
                self._affected[fault] -= {node for node, failure in failures.items() if failure.definite}
            return complete(self.recorder, invocation, value, failures, len(nodes))

    def _node_heal(self, fault: str, nodes: Sequence[str], extra: Mapping[str, Any] | None = None) -> Op:
        nodes = self._brokers(nodes)
        value = {"nodes": nodes, **(extra or {})}
        with self._action_lock:
            invocation = self.recorder.invoke(NEMESIS_PROCESS, self._node_faults[fault].heal_f, value)
            failures = on_nodes(nodes, self._node_faults[fault].heal, parallel=True)
            heal_f = self._node_faults[fault].heal_f
            with self._state_lock:
                for kind, actions in self._node_faults.items():
                    if actions.heal_f != heal_f:
                        continue  # a start heals a kill and a power loss alike
                    self._affected[kind] -= {
                        node
                        for node in nodes
                        if node not in failures or (kind == PAUSE and failures[node].definite)
                    }
            return complete(self.recorder, invocation, value, failures, len(nodes))

    def _kill_one(self, node: str) -> None:
        self._signal_broker(node, signal.SIGKILL)
        remote = self.cluster.remote(node)
        deadline = time.monotonic() + self.settle_timeout
        delay = 0.01
        while remote.is_alive(BROKER_DAEMON, timeout=self.remote_timeout):
            if time.monotonic() >= deadline:
                raise RemoteError(node, f"broker still alive {self.settle_timeout:g} s after SIGKILL")
            time.sleep(delay)  # polling a condition, bounded by the deadline
            delay = min(delay * 2, 0.2)

    def _power_loss_one(self, node: str) -> None:
        self._kill_one(node)  # the process must be gone before the cache is: no write may land after
        cluster = self.cluster
        assert isinstance(cluster, PowerLoss)
        cluster.drop_unsynced(node)

    def _start_one(self, node: str) -> None:
        if not self.cluster.remote(node).is_alive(BROKER_DAEMON, timeout=self.remote_timeout):
            self.cluster.start_broker(node)

    def _signal_broker(self, node: str, sig: signal.Signals) -> None:
        if not self.cluster.remote(node).signal(BROKER_DAEMON, sig, timeout=self.remote_timeout):
            raise Refused("broker not running")

    def _resume_if_running(self, node: str) -> None:
        self.cluster.remote(node).signal(BROKER_DAEMON, signal.SIGCONT, timeout=self.remote_timeout)

    def _surely_alive(self, node: str) -> bool:
        try:
            return self.cluster.remote(node).is_alive(BROKER_DAEMON, timeout=self.remote_timeout)
        except Exception:
            return False  # cannot tell: include it in the start, which checks again

    def _exec(self, node: str, script: str) -> None:
        self.cluster.remote(node).exec(script, timeout=self.remote_timeout)

    def _brokers(self, nodes: Sequence[str]) -> list[str]:
        if not nodes:
            raise ValueError("a node fault needs at least one node")
        unknown = [node for node in nodes if node not in self.layout.brokers]
        if unknown:
            raise ValueError(f"not brokers of this cluster: {', '.join(unknown)}")
        return [node for node in self.layout.brokers if node in nodes]

    # ----------------------------------------------------------------- recording

    def _act(self, f: str, value: dict[str, Any], nodes: Sequence[str], action: Callable[[str], None]) -> Op:
        """Record ``f``, run ``action`` on each node in turn (no threads: heal-all's path), complete it."""
        invocation = self.recorder.invoke(NEMESIS_PROCESS, f, value)
        failures = on_nodes(nodes, action, parallel=False)
        return complete(self.recorder, invocation, value, failures, len(nodes))
