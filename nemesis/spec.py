"""The nemesis half of a test spec: which faults, how often, on which nodes, from which seed.

A :class:`NemesisSpec` is plain data: it is stored in ``test.json`` (``to_dict``) and read back
(``from_dict``) so that a run can be repeated exactly -- the seed fixes every random choice the
schedule makes (see :mod:`nemesis.plan`). Bad values raise :class:`NemesisSpecError` naming the
field (``nemesis.interval_seconds: must be > 0, not -1``), never a bare ``KeyError``/``TypeError``;
the CLI turns that into one line and exit code 254.

Fields:

* ``faults`` -- the fault mix, drawn uniformly per step: ``kill`` (SIGKILL the broker, restart it
  when the fault ends), ``shutdown`` (SIGTERM: a clean shutdown, restart when it ends), ``pause`` (SIGSTOP, SIGCONT when it ends), ``power-loss`` (SIGKILL and drop
  the un-fsynced writes, restart when it ends), ``metadata-delay`` (the broker drops every packet
  from the controller, so leadership and ISR changes reach it late -- when the fault ends -- while
  the rest of the cluster moves on: KIP-320's zombie replica; needs a controller node),
  ``partition`` (iptables DROP between nodes, flushed when it ends), ``controller-kill`` and
  ``controller-power-loss`` (:data:`CONTROLLER_FAULT_KINDS`: SIGKILL the controller process -- and
  drop its unsynced metadata writes --, start it when the fault ends; no target, the controller is
  one); or a fault package
  (:data:`PACKAGE_KINDS`, planned by :mod:`nemesis.packages`: a choreography of several faults that
  heals itself, drawn like a single fault); or ``consumer-churn`` (:data:`WORKLOAD_FAULT_KINDS`,
  :mod:`nemesis.consumer_churn`: one of the workload's group consumers is replaced; needs
  ``--consume-via subscribe``), or ``client-crash`` (:mod:`nemesis.client_crash`: one of the
  workload's producer processes is SIGKILLed mid-call; implies ``--client-processes``). Empty: no
  faults at all.
  :data:`HEALS` names the op that ends each fault (declared with the fault names in
  :mod:`nemesis.fault_kinds`; :mod:`testbed.record.faults` keeps the history's copy, checked equal).
* ``interval_seconds`` -- mean quiet time before each fault; ``fault_seconds`` -- mean time a fault
  lasts before its heal (``None``: same as the interval). With ``jitter`` j each period is drawn
  uniformly from ``[1 - j, 1 + j]`` times its mean, so faults land in different phases of the
  protocol (election, ISR shrink, catch-up) from run to run; ``jitter=0`` is strictly periodic.
* ``targets`` -- for the node faults (``kill``, ``pause``, ``power-loss``, ``metadata-delay``):
  which brokers, one of ``one``, ``minority`` (the largest set whose loss leaves a majority),
  ``majority``, ``all``, ``leader``, ``followers`` (of a partition of the workload's topic).
  ``None``: every target that makes sense for the cluster size.
* ``partitions`` -- the partition shapes: ``isolate-one``, ``isolate-leader``, ``halves``,
  ``bridge``, ``majorities-ring``. ``None``: every shape that makes sense for the cluster size.
* ``partition_scope`` -- ``brokers``: only broker<->broker traffic is cut (every broker still
  reaches the controller, as with an external metadata quorum); ``all``: the controller is one of
  the nodes being partitioned.
* ``weights`` -- how much more often than the others some names of ``faults`` are drawn: pairs
  (name, weight), weight an integer >= 1, every name one of ``faults``; a name not listed weighs 1.
  Written ``name*N`` in a comma list (``--nemesis kill,partition,whole-cluster-crash*4``; a
  campaign's ``nemesis = "..."``).  Empty (the default): the uniform draw, exactly the schedule a
  seed gave before weights existed.  Why: a package that alone reaches a class of bug (the
  whole-cluster crash for every durability bug) was drawn once a 10-minute hunt among fifteen.
* ``seed`` -- the schedule's random seed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from nemesis.client_crash_plan import CLIENT_CRASH_LEADER_CRASH as CLIENT_CRASH_LEADER_CRASH
from nemesis.client_crash_plan import CONSUMER_CRASH_COORDINATOR_CRASH as CONSUMER_CRASH_COORDINATOR_CRASH
from nemesis.fault_kinds import CLIENT_CRASH as CLIENT_CRASH
from nemesis.fault_kinds import CLOCK_DRIFT, CLOCK_SKEW, names_drawn_as
from nemesis.fault_kinds import CONSUMER_CHURN as CONSUMER_CHURN
from nemesis.fault_kinds import CONSUMER_CRASH as CONSUMER_CRASH
from nemesis.fault_kinds import DISK_ERROR as DISK_ERROR
from nemesis.fault_kinds import HEALS as HEALS
from nemesis.fault_kinds import KILL as KILL
from nemesis.fault_kinds import METADATA_DELAY as METADATA_DELAY
from nemesis.fault_kinds import ONE_WAY as ONE_WAY
from nemesis.fault_kinds import PARTITION as PARTITION
from nemesis.fault_kinds import PAUSE as PAUSE
from nemesis.fault_kinds import POWER_LOSS as POWER_LOSS
from nemesis.fault_kinds import REQUEST_DELAY as REQUEST_DELAY
from nemesis.fault_kinds import REQUEST_DUPLICATE as REQUEST_DUPLICATE
from nemesis.fault_kinds import REQUEST_HOLD as REQUEST_HOLD
from nemesis.fault_kinds import REQUEST_REORDER as REQUEST_REORDER
from nemesis.fault_kinds import REQUEST_RESET as REQUEST_RESET
from nemesis.fault_kinds import SHUTDOWN as SHUTDOWN
from nemesis.fault_kinds import SLOW_LINK as SLOW_LINK
from nemesis.membership_kinds import DECOMMISSION, ELECT_PREFERRED

NODE_FAULT_KINDS: tuple[str, ...] = names_drawn_as("node-target")
"""Faults that act on a set of brokers chosen by a target (:mod:`nemesis.fault_kinds` declares them)."""
CONTROLLER_FAULT_KINDS: tuple[str, ...] = names_drawn_as("controller")
"""Faults of the one controller node (:mod:`nemesis.controller_kinds`): no target to draw."""
FAULT_KINDS: tuple[str, ...] = (
    *NODE_FAULT_KINDS,
    *names_drawn_as("partition-shape"),
    *CONTROLLER_FAULT_KINDS,
)
"""Every single fault the schedule draws on the cluster's nodes (not the workload's)."""
WORKLOAD_FAULT_KINDS: tuple[str, ...] = names_drawn_as("workload")
"""Faults of the workload's clients, not of the nodes (:mod:`nemesis.consumer_churn`,
:mod:`nemesis.client_crash`): each op
does its whole change and leaves nothing to heal, so they have no entry in :data:`HEALS`."""

FOLLOWER_RESTART_LEADER_CRASH = "follower-restart-leader-crash"
LEADER_CRASH_STORM = "leader-crash-storm"
ISOLATE_FOLLOWERS_LOSE_LEADER = "isolate-followers-lose-leader"
POWER_LOSS_FOLLOWER_LEADER_CRASH = "power-loss-follower-leader-crash"
METADATA_DELAY_LEADER_MOVES = "metadata-delay-leader-moves"
ROLLING_RESTART = "rolling-restart"
OVERLAPPING_FAULTS = "overlapping-faults"
STALE_LEADER_LAGGING_JOINER = "stale-leader-lagging-joiner"
LAST_REPLICA_STANDING = "last-replica-standing"
ZOMBIE_FETCH_ACROSS_EPOCHS = "zombie-fetch-across-epochs"
DISK_FAILURE_LEADER_MOVES = "disk-failure-leader-moves"
ONE_WAY_LEADER_CRASH = "one-way-leader-crash"
RETRIED_PRODUCE_LEADER_CRASH = "retried-produce-leader-crash"
WHOLE_CLUSTER_CRASH = "whole-cluster-crash"
LAGGING_FOLLOWER_LEADER_SHUTDOWN = "lagging-follower-leader-shutdown"
DECOMMISSION_LEADER_CRASH = "decommission-leader-crash"
CLOCK_DRIFT_LEADER_CRASH = "clock-drift-leader-crash"
LAGGING_PREFERRED_ELECTION = "lagging-preferred-election"
RECOMMISSION_LATE_METADATA = "recommission-late-metadata"
LAGGING_FOLLOWER_OUTLIVES_THE_ISR = "lagging-follower-outlives-the-isr"
QUIET = "quiet"
PACKAGE_KINDS: tuple[str, ...] = (
    FOLLOWER_RESTART_LEADER_CRASH,
    LEADER_CRASH_STORM,
    ISOLATE_FOLLOWERS_LOSE_LEADER,
    POWER_LOSS_FOLLOWER_LEADER_CRASH,
    METADATA_DELAY_LEADER_MOVES,
    ROLLING_RESTART,
    OVERLAPPING_FAULTS,
    STALE_LEADER_LAGGING_JOINER,
    LAST_REPLICA_STANDING,
    ZOMBIE_FETCH_ACROSS_EPOCHS,
    DISK_FAILURE_LEADER_MOVES,
    ONE_WAY_LEADER_CRASH,
    RETRIED_PRODUCE_LEADER_CRASH,
    WHOLE_CLUSTER_CRASH,
    LAGGING_FOLLOWER_LEADER_SHUTDOWN,
    CLIENT_CRASH_LEADER_CRASH,
    CONSUMER_CRASH_COORDINATOR_CRASH,
    DECOMMISSION_LEADER_CRASH,
    CLOCK_DRIFT_LEADER_CRASH,
    LAGGING_PREFERRED_ELECTION,
    RECOMMISSION_LATE_METADATA,
    LAGGING_FOLLOWER_OUTLIVES_THE_ISR,
    QUIET,
)
"""Fault packages (:mod:`nemesis.packages`): choreographies of several faults, drawn like a fault."""
NEMESIS_CHOICES: tuple[str, ...] = (*FAULT_KINDS, *PACKAGE_KINDS, *WORKLOAD_FAULT_KINDS)
"""What ``faults`` (``--nemesis``) may name: single faults, packages and workload faults."""
PACKAGE_FAULTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        FOLLOWER_RESTART_LEADER_CRASH: frozenset({KILL, PARTITION}),
        LEADER_CRASH_STORM: frozenset({KILL}),
        ISOLATE_FOLLOWERS_LOSE_LEADER: frozenset({PARTITION, KILL}),
        POWER_LOSS_FOLLOWER_LEADER_CRASH: frozenset({POWER_LOSS, KILL}),
        METADATA_DELAY_LEADER_MOVES: frozenset({METADATA_DELAY, KILL}),
        ROLLING_RESTART: frozenset({KILL, SHUTDOWN, ELECT_PREFERRED}),
        OVERLAPPING_FAULTS: frozenset({PAUSE, KILL, PARTITION, METADATA_DELAY}),
        STALE_LEADER_LAGGING_JOINER: frozenset({KILL, SHUTDOWN, PARTITION, SLOW_LINK}),
        LAST_REPLICA_STANDING: frozenset({PARTITION, KILL, POWER_LOSS}),
        ZOMBIE_FETCH_ACROSS_EPOCHS: frozenset({METADATA_DELAY, PARTITION, KILL}),
        DISK_FAILURE_LEADER_MOVES: frozenset({DISK_ERROR}),
        ONE_WAY_LEADER_CRASH: frozenset({ONE_WAY, KILL}),
        RETRIED_PRODUCE_LEADER_CRASH: frozenset(
            {REQUEST_DELAY, REQUEST_REORDER, REQUEST_DUPLICATE, REQUEST_RESET, KILL}
        ),
        WHOLE_CLUSTER_CRASH: frozenset({KILL, POWER_LOSS, DISK_ERROR}),
        LAGGING_FOLLOWER_LEADER_SHUTDOWN: frozenset({PARTITION, ONE_WAY, SHUTDOWN}),
        CLIENT_CRASH_LEADER_CRASH: frozenset({CLIENT_CRASH, KILL}),
        CONSUMER_CRASH_COORDINATOR_CRASH: frozenset({CONSUMER_CRASH, KILL}),
        DECOMMISSION_LEADER_CRASH: frozenset({DECOMMISSION, KILL}),
        CLOCK_DRIFT_LEADER_CRASH: frozenset({CLOCK_DRIFT, CLOCK_SKEW, KILL}),
        LAGGING_PREFERRED_ELECTION: frozenset({KILL, PARTITION, ELECT_PREFERRED}),
        RECOMMISSION_LATE_METADATA: frozenset({DECOMMISSION, ELECT_PREFERRED, SLOW_LINK}),
        LAGGING_FOLLOWER_OUTLIVES_THE_ISR: frozenset({PARTITION, KILL}),
        QUIET: frozenset(),
    }
)
"""The single faults each package may inject (what the checker's expectations and the power-loss
filesystem must know of a mix that names packages)."""
HUNT_MIX: tuple[str, ...] = (
    KILL,
    PARTITION,
    FOLLOWER_RESTART_LEADER_CRASH,
    LEADER_CRASH_STORM,
    ISOLATE_FOLLOWERS_LOSE_LEADER,
    METADATA_DELAY_LEADER_MOVES,
    ROLLING_RESTART,
    OVERLAPPING_FAULTS,
    STALE_LEADER_LAGGING_JOINER,
    ZOMBIE_FETCH_ACROSS_EPOCHS,
    QUIET,
    LAGGING_FOLLOWER_LEADER_SHUTDOWN,
    LAGGING_FOLLOWER_OUTLIVES_THE_ISR,
    LAGGING_PREFERRED_ELECTION,
    CLOCK_DRIFT_LEADER_CRASH,
)
"""The fault mix ``tidemark hunt`` draws from when ``--nemesis`` is not given, with the draw
weights of :data:`HUNT_WEIGHTS`.

The packages three brokers and a controller take without a lazy filesystem (the one-way cut and
controlled shutdown, the out-of-sync survivor, the preferred election of a lagging replica, the
drifting clocks among them; not the client and membership packages that need client processes or
a fourth broker), with kill and partition as single faults; power
loss is left out because, unless the broker fsyncs every message (``flush.messages=1``), the
loss it causes is permitted and would end every hunt with an expected anomaly -- the nightly
hunt adds it (and the packages built on it, :data:`POWER_LOSS_MIX`) with ``flush.messages=1``.
A hunt draws only the packages its cluster can take (``harness.run.hunt.default_mix``: no
three-replica choreography on a topic of two).  ``bench/hunt.py`` measures this mix against every
buggy setting of the catalogue (the figures are in ``docs/bugs.md``).
"""
HUNT_WEIGHTS: tuple[tuple[str, int], ...] = (
    (FOLLOWER_RESTART_LEADER_CRASH, 2),
    (LEADER_CRASH_STORM, 2),
    (ISOLATE_FOLLOWERS_LOSE_LEADER, 2),
    (STALE_LEADER_LAGGING_JOINER, 2),
    (ZOMBIE_FETCH_ACROSS_EPOCHS, 4),
    (LAST_REPLICA_STANDING, 4),
)
"""The default mix's draw weights: each package that alone reaches a catalogued bug (KIP-101,
KIP-279, Jepsen 2013, KAFKA-7128, KIP-320, KIP-966) is drawn twice as often as the rest, so that
adding the four packages of the wider fault surface did not thin it out; the two that are the
*only* way to their bug -- ``zombie-fetch-across-epochs`` (KIP-320) and ``last-replica-standing``
(KIP-966) -- four times as often, because a hunt that never draws them cannot find it (every run
that drew them did; at weight 2 half the five-minute KIP-320 hunts drew it in none of their runs).
The measurements behind each weight are in ``docs/bugs.md``.  ``last-replica-standing`` is weighed
where power loss is hunted (:data:`POWER_LOSS_MIX`); a mix keeps the weights of the names it has
(:func:`weights_within`)."""
TXN_HUNT_MIX: tuple[str, ...] = (REQUEST_HOLD,)
"""The fault mix ``tidemark hunt --txn`` draws from when ``--nemesis`` is not given: a Produce and
an EndTxn held past the client's timeout and released late on a new connection (what KAFKA-17754
and KAFKA-14402 need), on the nodes the schedule's targets draw.  Chosen by measurement against
``transaction.version=1`` (KAFKA-17754, ``docs/bugs.md``): with kill and partition beside it a hold
was drawn about once a run, and then hit the producer's coordinator about half the time -- 2 of 4
hunts found the bug within 10 minutes; alone, 4 holds a run. Crashes of the coordinator are the
``txn-coordinator-and-leader-crash`` scenario's.  The nightly campaign's ``transactions`` hunt
draws the same."""
POWER_LOSS_MIX: tuple[str, ...] = (POWER_LOSS, POWER_LOSS_FOLLOWER_LEADER_CRASH, LAST_REPLICA_STANDING)
"""What a mix adds to :data:`HUNT_MIX` where power loss is under test (the lazy filesystem runs).
Not ``whole-cluster-crash``: ``bench/hunt.py`` hunts power-loss bugs without ``flush.messages=1``,
where a power loss of every replica loses writes under every setting (it keeps power loss to a
minority for that reason); the nightly hunt, which fsyncs every message, names the package."""

PACKAGE_GRACE_SECONDS = 60.0
"""How long a fault package still running at the run's time limit may go on to its end before
the run stops it (the workload keeps running meanwhile): its waits -- an election, an ISR
change -- take up to 20-30 s each, and a package cut mid-way tests nothing it was drawn for."""
NODE_TARGETS: tuple[str, ...] = ("one", "minority", "majority", "all", "leader", "followers")
PARTITION_KINDS: tuple[str, ...] = ("isolate-one", "isolate-leader", "halves", "bridge", "majorities-ring")
LEADER_DEPENDENT: frozenset[str] = frozenset({"leader", "followers", "isolate-leader"})
"""Targets and partition kinds resolved only when the fault starts, from the partition's current leader."""

PartitionScope = Literal["brokers", "all"]
PARTITION_SCOPES: tuple[str, ...] = ("brokers", "all")


class NemesisSpecError(ValueError):
    """A nemesis spec value is missing, of the wrong type or out of range; the message names the field."""


@dataclasses.dataclass(frozen=True)
class NemesisSpec:
    """What the random nemesis does; validated on construction (see the module docstring)."""

    faults: tuple[str, ...] = ()
    interval_seconds: float = 10.0
    fault_seconds: float | None = None
    jitter: float = 0.5
    targets: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    partition_scope: PartitionScope = "brokers"
    seed: int = 0
    weights: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _check_names(self.faults, NEMESIS_CHOICES, "nemesis.faults", allow_empty=True)
        _check_weights(self.weights, self.faults)
        _check_positive(self.interval_seconds, "nemesis.interval_seconds")
        if self.fault_seconds is not None:
            _check_positive(self.fault_seconds, "nemesis.fault_seconds")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int | float)
            or not 0 <= self.jitter < 1
        ):
            raise NemesisSpecError(f"nemesis.jitter: must be a number in [0, 1), not {self.jitter!r}")
        if self.targets is not None:
            _check_names(self.targets, NODE_TARGETS, "nemesis.targets", allow_empty=False)
        if self.partitions is not None:
            _check_names(self.partitions, PARTITION_KINDS, "nemesis.partitions", allow_empty=False)
        if self.partition_scope not in PARTITION_SCOPES:
            raise NemesisSpecError(
                f"nemesis.partition_scope: must be one of {', '.join(PARTITION_SCOPES)}, not {self.partition_scope!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise NemesisSpecError(f"nemesis.seed: must be an integer, not {self.seed!r}")

    @property
    def mean_fault_seconds(self) -> float:
        """How long a fault lasts on average (``fault_seconds``, else the interval)."""
        return self.fault_seconds if self.fault_seconds is not None else self.interval_seconds

    def fault_weights(self) -> list[int] | None:
        """Each of ``faults``' draw weight, in order; None when every name weighs 1 (the uniform
        draw, which consumes the random stream as it always did)."""
        weight = dict(self.weights)
        if all(value == 1 for value in weight.values()):
            return None
        return [weight.get(name, 1) for name in self.faults]

    def injected_faults(self) -> frozenset[str]:
        """The single faults this mix may inject: its faults, with packages expanded."""
        return frozenset(
            fault for name in self.faults for fault in PACKAGE_FAULTS.get(name, frozenset({name}))
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``from_dict(to_dict())`` gives an equal spec."""
        return {
            "faults": list(self.faults),
            "interval_seconds": self.interval_seconds,
            "fault_seconds": self.fault_seconds,
            "jitter": self.jitter,
            "targets": None if self.targets is None else list(self.targets),
            "partitions": None if self.partitions is None else list(self.partitions),
            "partition_scope": self.partition_scope,
            "seed": self.seed,
            "weights": {name: weight for name, weight in self.weights},
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "nemesis") -> NemesisSpec:
        """Read a spec written by :meth:`to_dict` (missing keys take their defaults).

        ``where`` prefixes every error message, e.g. ``"test.json: nemesis"``.
        """
        if not isinstance(data, Mapping):
            raise NemesisSpecError(f"{where}: must be an object, not {type(data).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise NemesisSpecError(
                f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        values: dict[str, Any] = {}
        for name in ("faults", "targets", "partitions"):
            if name in data:
                values[name] = _name_tuple(data[name], f"{where}.{name}", nullable=name != "faults")
        if "weights" in data:
            values["weights"] = _weight_pairs(data["weights"], f"{where}.weights")
        for name in ("interval_seconds", "fault_seconds", "jitter"):
            if name in data:
                values[name] = _number(data[name], f"{where}.{name}", nullable=name == "fault_seconds")
        for name in ("partition_scope", "seed"):
            if name in data:
                values[name] = data[name]
        try:
            return cls(**values)
        except NemesisSpecError as error:
            raise NemesisSpecError(str(error).replace("nemesis.", f"{where}.", 1)) from None


def parse_name_list(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    """Split a comma-separated CLI value (``"kill,partition"``) and check every name.

    ``what`` names the flag in the error (``"--nemesis"``). ``""`` and ``"none"`` give ``()``.
    """
    if text.strip() in ("", "none"):
        return ()
    names = tuple(part.strip() for part in text.split(","))
    _check_names(names, known, what, allow_empty=False)
    return names


def parse_weighted_list(
    text: str, known: Sequence[str], what: str
) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """Split a comma-separated mix whose names may carry a draw weight (``"kill,whole-cluster-crash*4"``):
    (names, weights), the weights only of the names written with one.  ``what`` names the flag or
    key in the error, with the item's position (``--nemesis[1]: ...``)."""
    if text.strip() in ("", "none"):
        return (), ()
    names: list[str] = []
    weights: list[tuple[str, int]] = []
    for position, part in enumerate(text.split(",")):
        name, star, weight = part.strip().partition("*")
        name = name.strip()
        names.append(name)
        if star:
            weight = weight.strip()
            if not weight.isdigit() or int(weight) < 1:
                raise NemesisSpecError(
                    f"{what}[{position}]: the weight of {name!r} must be an integer >= 1, not {weight!r}"
                )
            weights.append((name, int(weight)))
    _check_names(tuple(names), known, what, allow_empty=False)
    return tuple(names), tuple(weights)


def weights_within(
    weights: tuple[tuple[str, int], ...], faults: tuple[str, ...]
) -> tuple[tuple[str, int], ...]:
    """The pairs of ``weights`` whose name is one of ``faults``: a mix cut down to what its
    cluster takes (no three-replica choreography on a topic of two) keeps the weights of the rest."""
    return tuple((name, weight) for name, weight in weights if name in faults)


def written_mix(faults: tuple[str, ...], weights: tuple[tuple[str, int], ...] = ()) -> str:
    """``faults`` as ``--nemesis`` takes them, a weighted name as ``name*N``."""
    weight = dict(weights)
    return ",".join(f"{name}*{weight[name]}" if name in weight else name for name in faults)


def _check_weights(weights: object, faults: tuple[str, ...]) -> None:
    if not isinstance(weights, tuple):
        raise NemesisSpecError(f"nemesis.weights: must be (name, weight) pairs, not {weights!r}")
    seen: set[str] = set()
    for pair in weights:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise NemesisSpecError(f"nemesis.weights: must be (name, weight) pairs, not {pair!r}")
        name, weight = pair
        if name not in faults:
            raise NemesisSpecError(
                f"nemesis.weights: {name!r} is not one of the faults ({', '.join(faults)})"
            )
        if name in seen:
            raise NemesisSpecError(f"nemesis.weights: {name!r} is weighted twice")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise NemesisSpecError(
                f"nemesis.weights: the weight of {name!r} must be an integer >= 1, not {weight!r}"
            )
        seen.add(name)


def _weight_pairs(value: object, what: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, Mapping):
        raise NemesisSpecError(f"{what}: must be an object of name: weight, not {value!r}")
    return tuple((str(name), weight) for name, weight in value.items())


def _check_names(names: object, known: Sequence[str], what: str, *, allow_empty: bool) -> None:
    if not isinstance(names, tuple) or not all(isinstance(name, str) for name in names):
        raise NemesisSpecError(f"{what}: must be a tuple of names, not {names!r}")
    if not names and not allow_empty:
        raise NemesisSpecError(f"{what}: must name at least one of {', '.join(known)}")
    for position, name in enumerate(names):
        if name not in known:
            raise NemesisSpecError(f"{what}[{position}]: unknown name {name!r} (known: {', '.join(known)})")
        if name in names[:position]:
            raise NemesisSpecError(f"{what}[{position}]: {name!r} is listed twice")


def _check_positive(value: object, what: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise NemesisSpecError(f"{what}: must be a finite number of seconds > 0, not {value!r}")


def _name_tuple(value: object, what: str, *, nullable: bool) -> tuple[str, ...] | None:
    if value is None and nullable:
        return None
    if not isinstance(value, list | tuple):
        raise NemesisSpecError(
            f"{what}: must be a list of names{' or null' if nullable else ''}, not {value!r}"
        )
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise NemesisSpecError(f"{what}[{position}]: must be a string, not {item!r}")
    return tuple(value)


def _number(value: object, what: str, *, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NemesisSpecError(f"{what}: must be a number{' or null' if nullable else ''}, not {value!r}")
    return float(value)
