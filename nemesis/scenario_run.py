"""Carrying out a parsed scenario (:mod:`nemesis.scenario`) against a running cluster.

:class:`ScenarioRun` walks the steps in order, resolves node names (bound aliases, roles,
``controller``) at the moment a step needs them, calls the nemesis for faults -- so every fault
is an op in the history -- and polls the cluster for waits.  It knows the cluster only through
:class:`~testbed.cluster.protocol.Cluster` (and :class:`~testbed.cluster.protocol.LiveReplicas`
for ``log-end-past`` and ``hw-checkpoint``, :class:`~nemesis.request_faults.RequestProxies` for
``request-held``) and asks partition state of the freshest broker
view, so a zombie's stale belief never satisfies a wait.  Partitions are the workload topic's, or ``offsets``: the
``__consumer_offsets`` partition of the workload's consumer group, found by Kafka's own rule
(:func:`testbed.cluster.kafka_admin.group_offsets_partition`) once that topic exists.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from nemesis.request_faults import RequestProxies
from nemesis.scenario import Scenario
from nemesis.steps import (
    CONTROLLER,
    OFFSETS_PARTITION,
    TRANSACTIONS_PARTITION,
    BindStep,
    FaultStep,
    ProduceStep,
    Role,
    ScenarioFailed,
    ScenarioStep,
    SleepStep,
    WaitStep,
    parse_role,
    role_node,
)
from testbed.cluster.kafka_admin import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    ClusterUnavailable,
    PartitionInfo,
    freshest_leader,
    freshest_partition_info,
    freshest_view,
    group_offsets_partition,
    transaction_state_partition,
    wait_until,
)
from testbed.cluster.protocol import Cluster, LiveReplicas
from testbed.cluster.request_proxy.control import ProxyControlError


class ScenarioNemesis(Protocol):
    """What a fault step needs of the nemesis (:class:`nemesis.mechanism.Nemesis` has it)."""

    def apply(self, step: FaultStep) -> object:
        """Carry out ``step`` (its names resolved to nodes) by its kind's mechanism, recorded as
        an op; ValueError (a PlanError) when the cluster or workload cannot have it."""
        ...


@runtime_checkable
class MarkerSender(Protocol):
    """What a ``produce`` step needs of the workload (an optional ability: fault packages use
    it where the workload has it, :attr:`nemesis.packages.PackageContext.markers`)."""

    def send_marker(self, partition: int, bootstrap: str | None = None) -> object:
        """One recorded send to ``partition`` from a fresh producer, bootstrapped at ``bootstrap``
        (``host:port[,...]``; default: the workload's own)."""
        ...


@dataclasses.dataclass
class ScenarioContext:
    """What a running scenario acts on; built by the runner."""

    cluster: Cluster
    nemesis: ScenarioNemesis
    workload: MarkerSender
    topic: str
    log: Callable[[str], None]
    stop: threading.Event | None = None
    """Set: the run is ending -- no further step starts, and a ``sleep`` step ends early."""
    group: str | None = None
    """The workload's consumer group (None: it has none), whose ``__consumer_offsets`` partition
    the partition name ``offsets`` means."""
    transactional_id: str | None = None
    """The transactional id of the workload's first producer (None: it runs no transactions),
    whose ``__transaction_state`` partition the partition name ``transactions`` means."""


class ScenarioRun:
    def __init__(self, scenario: Scenario, context: ScenarioContext) -> None:
        self.scenario = scenario
        self.context = context
        self.bound: dict[str, str] = {}
        self.unmet: list[str] = []
        """Each wait with ``required = false`` that timed out, as ``"<source>: step N: <why>"``."""

    def run(self) -> None:
        steps = zip(self.scenario.steps, self.scenario.parsed_steps, strict=True)
        for number, (table, step) in enumerate(steps, start=1):
            if self.context.stop is not None and self.context.stop.is_set():
                return
            where = f"{self.scenario.source}: step {number}"
            self.context.log(f"{where}: {describe_step(table)}")
            try:
                self._run_step(step)
            except TimeoutError as error:
                if isinstance(step, WaitStep) and not step.required:  # the system's decision, recorded
                    self.unmet.append(f"{where}: {error}")
                    self.context.log(f"{where}: not met, and not required: {error}")
                    continue
                raise ScenarioFailed(f"{where}: {error}") from None
            except (ClusterUnavailable, ValueError, ScenarioFailed) as error:
                # ValueError: the nemesis refused; ScenarioFailed: a role or partition named nothing
                raise ScenarioFailed(f"{where}: {error}") from None

    # ---- node names -------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """The node ``name`` means now: a bound alias, a role, ``controller``, or a node name."""
        if name in self.bound:
            return self.bound[name]
        if ":" in name:
            try:
                role = parse_role(name)
            except ValueError as error:
                raise ScenarioFailed(str(error)) from None
            return self._role(role)
        cluster = self.context.cluster
        if name == CONTROLLER and name not in cluster.brokers:
            if cluster.controller is None:
                raise ScenarioFailed(f"{CONTROLLER!r} names the controller node, and this cluster has none")
            return cluster.controller
        if name in cluster.brokers or name == cluster.controller:
            return name
        raise ScenarioFailed(f"unknown node {name!r} (bound: {', '.join(self.bound) or 'none'})")

    def _role(self, role: Role) -> str:
        cluster = self.context.cluster
        topic, partition = self._where(role.partition)
        info = wait_until(
            lambda: _partition_info(cluster.bootstrap, topic, partition),
            30,
            f"a leader of {_described(topic, partition)}",
        )
        return role_node(role, info, cluster.node_of)

    def _where(self, partition: int | str) -> tuple[str, int]:
        """(topic, index) of a step's or role's partition: a number is the workload topic's;
        ``offsets`` is the group's ``__consumer_offsets`` partition and ``transactions`` the first
        producer's ``__transaction_state`` partition (each waited for: the topic appears with the
        first FindCoordinator of its kind)."""
        if partition == OFFSETS_PARTITION:
            return self._internal_partition(
                partition,
                OFFSETS_TOPIC,
                group_offsets_partition,
                self.context.group,
                "group",
                "no group (--consume-via subscribe)",
            )
        if partition == TRANSACTIONS_PARTITION:
            return self._internal_partition(
                partition,
                TRANSACTION_STATE_TOPIC,
                transaction_state_partition,
                self.context.transactional_id,
                "transactional id",
                "no transactions (--txn)",
            )
        return self.context.topic, int(partition)

    def _internal_partition(
        self,
        name: str,
        topic: str,
        locate: Callable[[str, str], int | None],
        key: str | None,
        what: str,
        missing: str,
    ) -> tuple[str, int]:
        """The partition of internal ``topic`` that holds the workload's ``key`` (its ``what``),
        found by ``locate`` once the topic exists; ScenarioFailed saying ``missing`` without one."""
        if key is None:
            raise ScenarioFailed(
                f"partition {name!r} is the {topic} partition of the workload's {what}, and this run's workload has {missing}"
            )
        bootstrap = self.context.cluster.bootstrap
        found = wait_until(
            lambda: _boxed(locate(bootstrap, key)), 30, f"{topic} to exist (it holds {what} {key})"
        )
        return topic, found[0]

    # ---- steps --------------------------------------------------------------------------

    def _run_step(self, step: ScenarioStep) -> None:
        """One step by its type; a fault goes to the nemesis with its names resolved, and the
        nemesis dispatches it through the fault registry (:data:`nemesis.mechanism.MECHANISMS`)."""
        if isinstance(step, BindStep):
            for alias, name in step.names.items():
                self.bound[alias] = self.resolve(name)
            self.context.log(f"  bound {self.bound}")
        elif isinstance(step, FaultStep):
            self.context.nemesis.apply(step.resolved(self.resolve))
        elif isinstance(step, WaitStep):
            self._wait(step)
        elif isinstance(step, ProduceStep):
            self._produce_marker(step.partition)
        elif isinstance(step, SleepStep):  # the scenario says why: time itself is the point
            if self.context.stop is not None:
                self.context.stop.wait(step.seconds)
            else:
                time.sleep(step.seconds)

    def _produce_marker(self, partition: int) -> None:
        """The marker goes to the partition's leader in the freshest view, its producer
        bootstrapped there alone.  Bootstrapped at every broker, a fresh producer may take its
        metadata from a zombie, whose stale leader is dead -- seen in ``kip320-zombie-follower``
        under load: the marker meant for the new epoch timed out against the old leader, the epoch
        got no record, and there was nothing to diverge.  Without a leader (or its address) in
        view, the workload's bootstrap."""
        topic, partition = self._where(partition)
        bootstrap = self.context.cluster.bootstrap
        self.context.workload.send_marker(
            partition, _leader_address(bootstrap, topic, partition) or bootstrap
        )

    def _node(self, step: WaitStep) -> str:
        if step.node is None:  # parse_step refuses a wait on a node without one
            raise ScenarioFailed(f"wait {step.condition} names no node")
        return self.resolve(step.node)

    def _wait(self, step: WaitStep) -> None:
        cluster = self.context.cluster
        topic, partition = self._where(step.partition)
        timeout = step.timeout
        condition = step.condition
        if condition == "answers":
            node = self._node(step)
            wait_until(lambda: cluster.answers(node), timeout, f"{node} to answer Kafka requests")
            return
        if condition == "log-end-past":
            self._wait_log_end_past(self._node(step), self.resolve(str(step.than)), topic, partition, timeout)
            return
        if condition == "hw-checkpoint":
            self._wait_hw_checkpoint(self._node(step), topic, partition, timeout)
            return
        if condition == "request-held":
            self._wait_request_held(None if step.node is None else self._node(step), timeout)
            return
        if condition == "caught-up":
            wait_until(
                lambda: self._fully_replicated(topic, partition),
                timeout,
                f"{_described(topic, partition)} fully replicated",
            )
            return
        node = self._node(step)
        node_id = cluster.node_ids[node]

        def holds() -> bool:
            if condition == "deposed":  # another leader, or none: offline counts here
                view = freshest_view(cluster.bootstrap, topic, partition)
                return view is not None and view[0].leader != node_id
            info = _partition_info(cluster.bootstrap, topic, partition)
            if info is None:
                return False
            if condition == "leader-is":
                return bool(info.leader == node_id)
            if condition == "leader-is-not":
                return bool(info.leader != node_id)
            if condition == "in-isr":
                return node_id in info.isr
            return node_id not in info.isr

        wait_until(holds, timeout, f"{condition} {node} ({_described(topic, partition)})")

    def _fully_replicated(self, topic: str, partition: int) -> bool:
        """The ISR is every replica and, where the replicas' files can be read, every replica holds
        the partition.  A new partition's ISR lists every replica before the followers have heard
        of it: a fault that cuts one off from the controller then (``metadata-delay``) leaves a
        replica that never exists, not the zombie a scenario meant to make."""
        cluster = self.context.cluster
        info = _partition_info(cluster.bootstrap, topic, partition)
        if info is None or set(info.isr) != set(info.replicas):
            return False
        if not isinstance(cluster, LiveReplicas):
            return True
        names = {node_id: node for node, node_id in cluster.node_ids.items()}
        if any(replica not in names for replica in info.replicas):
            return False
        # Each read is a process started on its node (about 0.7 s): the replicas are read at once.
        with concurrent.futures.ThreadPoolExecutor(len(info.replicas)) as pool:
            ends = list(
                pool.map(
                    lambda replica: cluster.replica_log_end(names[replica], topic, partition), info.replicas
                )
            )
        return all(end is not None for end in ends)

    def _wait_log_end_past(self, node: str, than: str, topic: str, partition: int, timeout: float) -> None:
        """Until ``node``'s replica of the partition ends past ``than``'s (both read from their files)."""
        cluster = self.context.cluster
        if not isinstance(cluster, LiveReplicas):
            raise ScenarioFailed("wait log-end-past: this cluster's replicas cannot be read while it runs")
        seen: list[tuple[int | None, int | None]] = []

        def past() -> bool:
            ends = (
                cluster.replica_log_end(node, topic, partition),
                cluster.replica_log_end(than, topic, partition),
            )
            seen[:] = [ends]
            return ends[0] is not None and ends[1] is not None and ends[0] > ends[1]

        try:
            wait_until(past, timeout, f"{node}'s log of {_described(topic, partition)} to end past {than}'s")
        except TimeoutError as error:
            raise TimeoutError(f"{error} (last seen: log ends {seen[0] if seen else 'none'})") from None
        self.context.log(f"  log ends {node}: {seen[0][0]}, {than}: {seen[0][1]}")

    def _wait_request_held(self, node: str | None, timeout: float) -> None:
        """Until ``node``'s request proxy (without a node: any broker's) holds a request -- the
        moment a ``request-hold`` caught one.  A scenario times what follows from here, not from
        the hold's rule: the held request comes whenever the client next sends one (a commit after
        a run of aborts comes a second or more later), and a release timed from the rule could
        reach the broker before the client had even timed its request out.  A proxy that does not
        answer (its broker restarting) holds nothing yet."""
        cluster = self.context.cluster
        if not isinstance(cluster, RequestProxies):
            raise ScenarioFailed(
                "wait request-held: this cluster has no request proxies in front of its brokers"
            )
        nodes = [node] if node is not None else list(cluster.node_ids)
        held: list[str] = []

        def holding(name: str) -> bool:
            try:
                return bool(cluster.request_proxy(name).status()["held"])
            except (ValueError, ProxyControlError):  # not a broker (no proxy), or its proxy not up
                return False

        def any_held() -> bool:
            held[:] = [name for name in nodes if holding(name)]
            return bool(held)

        wait_until(any_held, timeout, f"a request held by the proxy of {' or '.join(nodes)}")
        self.context.log(f"  held by {', '.join(held)}")

    def _wait_hw_checkpoint(self, node: str, topic: str, partition: int, timeout: float) -> None:
        """Until ``node``'s HW checkpoint of the partition holds another value than it did at the
        first read: the broker rewrote its checkpoint between two reads, at most one read (a
        process on the node, under a second) before this returns."""
        cluster = self.context.cluster
        if not isinstance(cluster, LiveReplicas):
            raise ScenarioFailed("wait hw-checkpoint: this cluster's replicas cannot be read while it runs")
        seen: list[int] = []  # the values read, from the first read that found the replica

        def moved() -> bool:
            high_watermark = cluster.replica_checkpointed_high_watermark(node, topic, partition)
            if high_watermark is not None:
                seen.append(high_watermark)
            return len(seen) > 1 and seen[-1] != seen[0]

        try:
            wait_until(moved, timeout, f"{node}'s HW checkpoint of {_described(topic, partition)} to move")
        except TimeoutError as error:
            read = f"{seen[0]} on every read" if seen else "no replica on any read"
            raise TimeoutError(f"{error} (checkpointed HW: {read})") from None
        self.context.log(f"  {node} checkpointed HW {seen[-1]} (was {seen[0]})")


def _partition_info(bootstrap: str, topic: str, partition: int) -> PartitionInfo | None:
    """The freshest view any broker holds: a zombie's stale belief must not satisfy a wait."""
    return freshest_partition_info(bootstrap, topic, partition)


def _leader_address(bootstrap: str, topic: str, partition: int) -> str | None:
    """The freshest view's leader's advertised ``host:port`` (None: no leader or address in view)."""
    found = freshest_leader(bootstrap, topic, partition)
    return found[1] if found is not None else None


def describe_step(step: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in step.items() if key != "why") + (
        f"  ({step['why']})" if "why" in step else ""
    )


def _described(topic: str, partition: int) -> str:
    """A partition as messages name it: ``partition 0`` of the workload's topic, in full otherwise."""
    return f"partition {partition} of {OFFSETS_TOPIC}" if topic == OFFSETS_TOPIC else f"partition {partition}"


def _boxed(value: int | None) -> tuple[int] | None:
    """``value`` in a tuple, so that partition 0 is a truthy answer for :func:`wait_until`."""
    return None if value is None else (value,)
