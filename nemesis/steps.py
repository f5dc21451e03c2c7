"""Scenario steps, typed: the five verbs of a scenario file parsed once into dataclasses.

A scenario file's ``[[step]]`` tables (and a fault package's planned steps, and what
:mod:`nemesis.shrink` writes) are checked and turned into one of :data:`ScenarioStep` here --
:class:`BindStep`, :class:`FaultStep`, :class:`WaitStep`, :class:`ProduceStep`,
:class:`SleepStep` -- so the runner (:mod:`nemesis.scenario_run`) dispatches on a type, never on
strings again.  What a ``fault`` step may say (its ``node``/``nodes``, ``grudge``, ``announce``,
``stop``, ``pick``) is read from the fault kind's declaration in :mod:`nemesis.fault_kinds`; a
:class:`FaultStep` whose names are resolved to nodes is exactly what
:meth:`nemesis.mechanism.Nemesis.apply` carries out.

Also here, because parsing needs them: node roles (``leader-of:P``, ``follower-of:P#N``), the
wait conditions, and the two errors (:class:`ScenarioError`: the file is wrong;
:class:`ScenarioFailed`: a step could not be carried out).  :mod:`nemesis.scenario` re-exports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from nemesis.disk_faults import checked_delay, disk_error_command, slow_disk_command
from nemesis.fault_kinds import (
    CHURN_STOPS,
    NAMED_REQUESTS,
    PARTITION,
    REGISTRY,
    SLOW_DISK,
    checked_rate,
)
from testbed.cluster.fake_clock import checked_offset
from testbed.cluster.fake_clock import checked_rate as checked_clock_rate
from testbed.cluster.kafka_admin import PartitionInfo

ROLES = ("leader-of", "follower-of", "preferred-of")
"""``preferred-of:P``: the partition's first assigned replica, whom a preferred-leader election
makes leader -- leading or not."""
OFFSETS_PARTITION = "offsets"
"""The partition name, in roles and waits, of the ``__consumer_offsets`` partition that holds the
workload's consumer group -- the partition its coordinator leads."""
TRANSACTIONS_PARTITION = "transactions"
"""The partition name, in roles and waits, of the ``__transaction_state`` partition that holds the
transactional id of the workload's first producer (``--txn``) -- the partition its transaction
coordinator leads."""
NAMED_PARTITIONS = (OFFSETS_PARTITION, TRANSACTIONS_PARTITION)
"""The partitions of internal topics a role or a wait may name instead of a number."""
CONTROLLER = "controller"
"""The name that always means the cluster's controller node."""
WAITS = (
    "leader-is",
    "leader-is-not",
    "deposed",
    "caught-up",
    "in-isr",
    "not-in-isr",
    "answers",
    "log-end-past",
    "hw-checkpoint",
    "request-held",
)
PARTITION_WAITS = frozenset(WAITS) - {"answers", "request-held"}
"""The waits whose condition is about one partition (a step without ``partition`` means
partition 0)."""
NODELESS_WAITS = ("caught-up",)
"""Waits that name no node."""
NODE_OPTIONAL_WAITS = ("request-held",)
"""Waits that may name a node or not: ``request-held`` without one waits on every broker's proxy."""
VERBS = ("bind", "fault", "wait", "produce", "sleep")
FAULTS = tuple(REGISTRY)
"""Every fault kind a ``fault`` step may name (:data:`nemesis.fault_kinds.REGISTRY`)."""


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the step."""


class ScenarioFailed(RuntimeError):
    """A step could not be carried out (a wait timed out, a role had no node)."""


@dataclasses.dataclass(frozen=True)
class Role:
    """A node named by what it is for a partition: ``leader-of:P``, ``follower-of:P[#N]``,
    ``preferred-of:P``."""

    name: str
    """As written in the scenario (for messages)."""
    kind: str
    partition: int | str
    """A partition of the workload's topic, or one of :data:`NAMED_PARTITIONS`."""
    index: int = 1
    """follower-of only: which follower, 1-based, in replica-assignment order without the leader."""


def parse_role(name: str) -> Role:
    """``name`` (``leader-of:0``, ``follower-of:0``, ``follower-of:0#2``) as a Role.

    ValueError naming the role and what is wrong with it (unknown kind, a partition or N that
    is not a whole number, N < 1, ``#N`` on ``leader-of``).
    """
    kind, _, rest = name.partition(":")
    if kind not in ROLES:
        raise ValueError(f"role {name!r}: {kind!r} is not one of {', '.join(ROLES)}")
    partition_text, hash_sign, index_text = rest.partition("#")
    if not _whole_number(partition_text) and partition_text not in NAMED_PARTITIONS:
        named = " or ".join(map(repr, NAMED_PARTITIONS))
        raise ValueError(
            f"role {name!r}: the partition must be a whole number, {named}, not {partition_text!r}"
        )
    partition: int | str = int(partition_text) if _whole_number(partition_text) else partition_text
    if not hash_sign:
        return Role(name, kind, partition)
    if kind != "follower-of":
        raise ValueError(f"role {name!r}: only follower-of takes #N ({kind} names the one node it is)")
    if not _whole_number(index_text) or int(index_text) < 1:
        raise ValueError(f"role {name!r}: N in #N must be a whole number >= 1 (1: the first follower)")
    return Role(name, kind, partition, int(index_text))


def role_node(role: Role, info: PartitionInfo, node_of: Callable[[int], str | None]) -> str:
    """The node ``role`` names in partition ``info``; ScenarioFailed naming the role when none does."""
    name = role.name
    if role.kind == "leader-of":
        broker_id = info.leader
    elif role.kind == "preferred-of":
        broker_id = info.replicas[0]
    else:
        followers = [replica for replica in info.replicas if replica != info.leader]
        if role.index > len(followers):
            raise ScenarioFailed(
                f"role {name!r}: partition {role.partition} has {len(followers)} follower(s) "
                f"(replicas {list(info.replicas)}, leader {info.leader}), no follower #{role.index}"
            )
        broker_id = followers[role.index - 1]
    node = node_of(broker_id)
    if node is None:
        raise ScenarioFailed(f"role {name!r}: broker id {broker_id} is none of this cluster's nodes")
    return node


def _whole_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


# ---- typed steps ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BindStep:
    """``bind = { A = "leader-of:0" }``: name nodes by role, node name or ``controller``, now."""

    names: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class FaultStep:
    """``fault = "..."``: one fault or heal of :data:`nemesis.fault_kinds.REGISTRY`.

    ``nodes`` and the ``grudge``'s names are as written (aliases, roles, node names) until
    :meth:`resolved`; the other fields are the kind's parameters, defaulted as the file format
    says (a partition's ``kind`` ``"scenario"``, ``announce`` true, churn ``leave`` of pick 0).
    """

    fault: str
    nodes: tuple[str, ...] = ()
    grudge: Mapping[str, frozenset[str]] | None = None
    kind: str = "scenario"
    announced: bool = True
    controlled: bool = True
    """``shutdown``: false stops the broker cleanly without Kafka's controlled handover (SIGINT)."""
    stop: str = CHURN_STOPS[0]
    pick: int = 0
    requests: tuple[str, ...] = ()
    """``request-hold``, ``-duplicate``, ``-reset``: the requests acted on (empty: the kind's default, every one it knows)."""
    rate_kbit: int | None = None
    """``slow-link``: the rate of the node's links to its peers (None: the kind's default)."""
    peers: tuple[str, ...] = ()
    """``slow-link``: the peers whose links slow down, names as ``nodes`` (empty: every other node)."""
    offset_s: int | None = None
    """``clock-skew``: how far the wall clock jumps, in seconds (None: the kind's default)."""
    rate_pct: int | None = None
    """``clock-drift``: how fast the wall clock runs, in % of real speed (None: the kind's default)."""
    op: str | None = None
    """``disk-error``: the call that fails (None: the kind's default)."""
    errno: str | None = None
    """``disk-error``: the error it fails with (None: the kind's default)."""
    files: str | None = None
    """``disk-error``, ``slow-disk``: the glob of the files hit (None: the kind's default)."""
    delay_ms: int | None = None
    """``slow-disk``: how long each fsync waits; ``request-delay``: each request (None: the kind's default)."""

    def with_drawn(self, params: Mapping[str, int]) -> FaultStep:
        """This step with the parameters a schedule drew for it (``FaultKind.drawn``: each names a
        field of this class, checked against the kind's ``params`` by the registry's tests)."""
        unknown = set(params) - {field.name for field in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"{self.fault}: no drawn parameter {', '.join(sorted(unknown))}")
        changes: dict[str, Any] = dict(params)
        return dataclasses.replace(self, **changes)

    def resolved(self, resolve: Callable[[str], str]) -> FaultStep:
        """This step with every name turned into a node by ``resolve``."""
        grudge = (
            None
            if self.grudge is None
            else {
                resolve(node): frozenset(resolve(other) for other in others)
                for node, others in self.grudge.items()
            }
        )
        return dataclasses.replace(
            self,
            nodes=tuple(resolve(name) for name in self.nodes),
            grudge=grudge,
            peers=tuple(resolve(name) for name in self.peers),
        )


@dataclasses.dataclass(frozen=True)
class WaitStep:
    """``wait = "..."``: a condition polled until it holds or ``timeout`` seconds pass."""

    condition: str
    node: str | None = None
    than: str | None = None
    partition: int | str = 0
    timeout: float = 30.0
    required: bool = True
    """False (``required = false``): the condition is the system's decision under test (an election
    it may rightly refuse), not a precondition of what follows -- its timeout is recorded
    (:attr:`nemesis.scenario_run.ScenarioRun.unmet`) and the steps go on."""


@dataclasses.dataclass(frozen=True)
class ProduceStep:
    """``produce = "marker"``: one marker send to ``partition``."""

    partition: int = 0


@dataclasses.dataclass(frozen=True)
class SleepStep:
    """``sleep = 5``, ``why = "..."``: only where time itself is the point."""

    seconds: float
    why: str


ScenarioStep = BindStep | FaultStep | WaitStep | ProduceStep | SleepStep


def parse_step(table: Any, where: str) -> ScenarioStep:
    """The typed step ``table`` (one ``[[step]]``) says; ScenarioError naming ``where`` otherwise."""
    _check_step(table, where)
    if "bind" in table:
        return BindStep({str(alias): str(name) for alias, name in table["bind"].items()})
    if "fault" in table:
        return _fault_step(table)
    if "wait" in table:
        named = table.get("nodes") or ([table["node"]] if "node" in table else [])
        return WaitStep(
            condition=str(table["wait"]),
            node=str(named[0]) if named else None,
            than=str(table["than"]) if "than" in table else None,
            partition=table.get("partition", 0),
            timeout=_seconds(table.get("timeout", 30), f"{where}: timeout"),
            required=table.get("required", True) is not False,
        )
    if "produce" in table:
        return ProduceStep(int(table.get("partition", 0)))
    return SleepStep(_seconds(table["sleep"], f"{where}: sleep"), str(table["why"]))


def _fault_step(table: Mapping[str, Any]) -> FaultStep:
    named = table.get("nodes") or ([table["node"]] if "node" in table else [])
    grudge = table.get("grudge") if table["fault"] == PARTITION else None
    return FaultStep(
        fault=str(table["fault"]),
        nodes=tuple(str(name) for name in named),
        grudge=None if grudge is None else {str(k): frozenset(str(o) for o in v) for k, v in grudge.items()},
        kind=str(table.get("kind", "scenario")),
        announced=table.get("announce", True) is not False,
        controlled=table.get("controlled", True) is not False,
        stop=str(table.get("stop", CHURN_STOPS[0])),
        pick=int(table.get("pick", 0)),
        requests=tuple(str(name) for name in table.get("requests", ())),
        rate_kbit=table.get("rate_kbit"),
        peers=tuple(str(name) for name in table.get("peers", ())),
        offset_s=table.get("offset_s"),
        rate_pct=table.get("rate_pct"),
        op=table.get("op"),
        errno=table.get("errno"),
        files=table.get("files"),
        delay_ms=table.get("delay_ms"),
    )


def _seconds(value: Any, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ScenarioError(f"{what} must be a number of seconds, not {value!r}") from None


# ---- checking a table -----------------------------------------------------------------------


def _takes(fault: object, param: str) -> bool:
    return isinstance(fault, str) and fault in REGISTRY and REGISTRY[fault].takes(param)


NUMBER_PARAMS: dict[str, Callable[[object], int]] = {
    "rate_kbit": checked_rate,
    "offset_s": checked_offset,
    "rate_pct": checked_clock_rate,
    "delay_ms": checked_delay,
}
"""The numeric step parameters of fault kinds and the check of each (ValueError saying why not)."""


def _check_fault(step: Mapping[str, Any], where: str) -> None:
    """A ``fault`` step against its kind's declaration (:mod:`nemesis.fault_kinds`)."""
    if step["fault"] not in REGISTRY:
        raise ScenarioError(f"{where}: fault {step['fault']!r} is not one of {', '.join(FAULTS)}")
    kind = REGISTRY[step["fault"]]
    if kind.takes("grudge") and not isinstance(step.get("grudge"), dict):
        raise ScenarioError(f"{where}: {kind.name} needs grudge = {{ NODE = [NODES...] }}")
    if "requests" in step:
        requests = step["requests"]
        if not kind.takes("requests"):
            kinds = ", ".join(name for name, declared in REGISTRY.items() if declared.takes("requests"))
            raise ScenarioError(f"{where}: requests = [...] is for {kinds} only, not {kind.name}")
        if not isinstance(requests, list) or not requests or not set(requests) <= set(NAMED_REQUESTS):
            raise ScenarioError(
                f"{where}: requests must be a non-empty list of {', '.join(map(repr, NAMED_REQUESTS))}, not {requests!r}"
            )
    for param, check in NUMBER_PARAMS.items():
        if param not in step:
            continue
        takers = [name for name, declared in REGISTRY.items() if declared.takes(param)]
        if not kind.takes(param):
            raise ScenarioError(f"{where}: {param} is for {' and '.join(takers)} only, not {kind.name}")
        try:
            check(step[param])
        except ValueError as error:
            raise ScenarioError(f"{where}: {error}") from None
    if "peers" in step:
        if not kind.takes("peers"):
            peer_takers = ", ".join(name for name, declared in REGISTRY.items() if declared.takes("peers"))
            raise ScenarioError(f"{where}: peers = [...] is for {peer_takers} only, not {kind.name}")
        peers = step["peers"]
        if not isinstance(peers, list) or not peers or not all(isinstance(peer, str) for peer in peers):
            raise ScenarioError(f"{where}: peers must be a non-empty list of node names, not {peers!r}")
    _check_disk_rule(kind.name, step, where)
    if kind.nodes == "required" and "node" not in step and "nodes" not in step:
        raise ScenarioError(f"{where}: {kind.name} needs node or nodes")
    for param in ("announce", "controlled"):  # the kinds' true|false parameters
        if param in step and (not kind.takes(param) or not isinstance(step[param], bool)):
            takers = [name for name, declared in REGISTRY.items() if declared.takes(param)]
            raise ScenarioError(
                f"{where}: {param} = true|false is for {' and '.join(takers)} only, not"
                f" {kind.name} = {step[param]!r}"
            )


DISK_TEXT_PARAMS = ("op", "errno", "files")
"""The text step parameters of the disk faults (:mod:`nemesis.disk_faults` checks their values)."""


def _check_disk_rule(fault: str, step: Mapping[str, Any], where: str) -> None:
    """A disk fault's ``op``/``errno``/``files`` against the lazy filesystem's rule syntax; each
    only for a kind that takes it."""
    for param in DISK_TEXT_PARAMS:
        if param in step and not _takes(fault, param):
            takers = [name for name, declared in REGISTRY.items() if declared.takes(param)]
            raise ScenarioError(f"{where}: {param} is for {' and '.join(takers)} only, not {fault}")
        if param in step and not isinstance(step[param], str):
            raise ScenarioError(f"{where}: {param} must be a string, not {step[param]!r}")
    given = {param: step[param] for param in DISK_TEXT_PARAMS if param in step}
    try:
        if fault == SLOW_DISK:
            slow_disk_command(**({"files": given["files"]} if "files" in given else {}))
        elif given:
            disk_error_command(**given)
    except ValueError as error:
        raise ScenarioError(f"{where}: {error}") from None


def _check_step(step: Any, where: str) -> None:
    if not isinstance(step, dict):
        raise ScenarioError(f"{where}: a step must be a table")
    verbs = [verb for verb in VERBS if verb in step]
    if len(verbs) != 1:
        raise ScenarioError(f"{where}: exactly one of {', '.join(VERBS)} expected, found {verbs or 'none'}")
    verb = verbs[0]
    if verb == "fault":
        _check_fault(step, where)
    for param in ("stop", "pick"):
        if param in step and not _takes(step.get("fault"), param):
            takers = " or ".join(repr(name) for name, kind in REGISTRY.items() if kind.takes(param))
            raise ScenarioError(f"{where}: {param} is for fault = {takers} only")
    if step.get("stop", CHURN_STOPS[0]) not in CHURN_STOPS:
        raise ScenarioError(f"{where}: stop must be one of {', '.join(CHURN_STOPS)}, not {step['stop']!r}")
    pick = step.get("pick", 0)
    if not isinstance(pick, int) or isinstance(pick, bool) or pick < 0:
        raise ScenarioError(f"{where}: pick must be a whole number >= 0, not {pick!r}")
    if "partition" in step:
        _check_partition(step["partition"], where, offsets_allowed=verb != "produce")
    if verb == "wait":
        if step["wait"] not in WAITS:
            raise ScenarioError(f"{where}: wait {step['wait']!r} is not one of {', '.join(WAITS)}")
        if step["wait"] not in NODELESS_WAITS + NODE_OPTIONAL_WAITS and "node" not in step:
            raise ScenarioError(f"{where}: wait {step['wait']} needs node")
        if step["wait"] == "log-end-past" and not isinstance(step.get("than"), str):
            raise ScenarioError(f"{where}: wait log-end-past needs than = NODE (the replica to end past)")
    if "required" in step and (verb != "wait" or not isinstance(step["required"], bool)):
        raise ScenarioError(f"{where}: required = true|false is for a wait only, not {step['required']!r}")
    if verb == "sleep" and "why" not in step:
        raise ScenarioError(f"{where}: a sleep must say why (time itself must be the point)")
    if verb == "bind" and not isinstance(step["bind"], dict):
        raise ScenarioError(f'{where}: bind = {{ NAME = "leader-of:0", ... }}')
    for name in _names(step):
        if ":" in name:
            try:
                parse_role(name)
            except ValueError as error:
                raise ScenarioError(f"{where}: {error}") from None


def _check_partition(partition: Any, where: str, *, offsets_allowed: bool) -> None:
    """A step's ``partition``: a partition number of the workload's topic, or (except where a
    step writes to the workload's topic) one of :data:`NAMED_PARTITIONS`."""
    if isinstance(partition, int) and not isinstance(partition, bool) and partition >= 0:
        return
    if offsets_allowed and partition in NAMED_PARTITIONS:
        return
    named = "".join(f" or {name!r}" for name in NAMED_PARTITIONS)
    allowed = f"a partition number >= 0{named if offsets_allowed else ''}"
    raise ScenarioError(f"{where}: partition must be {allowed}, not {partition!r}")


NODE_KEYS = ("node", "than")
"""Step keys whose value is one node name (``nodes`` is a list of them; ``bind`` and ``grudge``
name nodes too)."""


def _names(step: Mapping[str, Any]) -> list[str]:
    """Every node name a step gives (``node``, ``than``, ``nodes``, ``peers``, ``bind`` values, ``grudge`` keys and values)."""
    names: list[Any] = [step[key] for key in NODE_KEYS if key in step]
    for key in ("nodes", "peers"):
        if isinstance(step.get(key), list):
            names += step[key]
    if isinstance(step.get("bind"), dict):
        names += step["bind"].values()
    if isinstance(step.get("grudge"), dict):
        for node, others in step["grudge"].items():
            names += [node, *(others if isinstance(others, list) else [])]
    return [name for name in names if isinstance(name, str)]
