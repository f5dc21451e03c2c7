"""Configuration files of the controller and the brokers.

The files use Kafka's ``.properties`` syntax (``key=value``, ``#`` comments) and Kafka's
key names wherever Kafka has one, so that a Kafka user reads them without a glossary.
Every key is declared here with its type and default; an unknown key or a bad value is
a :class:`ConfigError` that names the file, the line and the key -- a typo must never
silently fall back to a default, because a harness that tests the wrong configuration
reports the wrong verdict.

Defaults are Kafka's own (``flush.messages`` never, ``replica.lag.time.max.ms`` 30000,
HW checkpoint every 5000 ms, ...), except ``offsets.topic.num.partitions`` (5, not 50).

**Bug switches.**  Each rule that fixed a documented Kafka replication bug
(``../shared/BUG-CATALOGUE.md``, ``docs/bugs.md``) has a key that turns the fix off and brings
the historical behaviour back.  The default is always the safe, modern rule; a scenario in
``nemesis/scenarios/`` shows each bug with its switch flipped and its absence without:

=====================================  ==================  ====================  ============
key                                    safe (default)      historical (buggy)    bug
=====================================  ==================  ====================  ============
``truncation.mode``                    ``leader-epoch``    ``high-watermark``    KIP-101
``leader.epoch.lookup``                ``iterative``       ``single``            KIP-279
``isr.join.offset``                    ``epoch-start``     ``high-watermark``    KAFKA-7128
``leader.epoch.fencing.enable``        ``true``            ``false``             KIP-320
``min.insync.replicas.strict``         ``true``            ``false``             KIP-966
``eligible.leader.replicas.enable``    ``true``            ``false``             KIP-966
(controller)
``transaction.partition.verification`` ``true``            ``false``             KAFKA-14402
``.enable``
``transaction.version``                ``2``               ``1``                 KAFKA-17754
=====================================  ==================  ====================  ============

``transaction.version`` is Kafka's own feature name (Kafka 4.0 finalizes 2 for new clusters, so
2 is the default here too: it is the only level at which a late EndTxn or Produce of a finished
transaction cannot land in the next one).  Level 2 changes nothing for a client that does not use
it -- librdkafka 2.16 and stock kafka-python send EndTxn v1 / v3 and keep level 1's behaviour,
as Kafka treats them -- so the safe default costs the historical clients nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

NEVER = 2**63 - 1
"""Kafka's ``Long.MAX_VALUE``: the default of ``flush.messages`` and ``flush.ms``."""


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (file, line, key)."""


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _positive(text: str) -> int:
    value = _integer(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _string(text: str) -> str:
    return text.strip()


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in allowed:
            raise ValueError("expected " + " or ".join(allowed))
        return value

    return parse


def _transaction_version(text: str) -> int:
    value = _integer(text)
    if value not in (1, 2):
        raise ValueError("expected 1 or 2")
    return value


def _listener(text: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` (or just ``host:port``) -> (host, port)."""
    value = text.strip()
    if "," in value:
        raise ValueError("only one listener is supported")
    if "://" in value:
        value = value.split("://", 1)[1]
    host, separator, port = value.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError("expected NAME://host:port")
    return (host or "0.0.0.0", int(port))


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str


BROKER_KEYS: tuple[Key, ...] = (
    Key("node.id", _non_negative, None, "this broker's id (required)"),
    Key("listeners", _listener, None, "PLAINTEXT://host:port to listen on (required)"),
    Key("advertised.listeners", _listener, None, "address given to clients (default: listeners)"),
    Key("controller.quorum.bootstrap.servers", _listener, None, "host:port of the controller (required)"),
    Key("log.dirs", _string, None, "data directory (required)"),
    Key("min.insync.replicas", _positive, 1, "acks=all needs at least this many replicas in the ISR"),
    Key("flush.messages", _positive, NEVER, "fsync the log after this many appended messages"),
    Key("flush.ms", _positive, NEVER, "fsync the log when unflushed data is older than this"),
    Key("log.flush.scheduler.interval.ms", _positive, 100, "how often flush.ms is checked (Kafka: Long.MAX)"),
    Key("log.segment.bytes", _positive, 1 << 30, "roll a new segment file after this many bytes"),
    Key("replica.lag.time.max.ms", _positive, 30000, "a follower not caught up for this long leaves the ISR"),
    Key("replica.fetch.wait.max.ms", _non_negative, 500, "long-poll time of follower fetches"),
    Key("replica.fetch.max.bytes", _positive, 1 << 20, "bytes per partition in one follower fetch"),
    Key("replica.fetch.backoff.ms", _non_negative, 1000, "pause after a failed follower fetch"),
    Key("replica.socket.timeout.ms", _positive, 30000, "follower request timeout"),
    Key("replica.high.watermark.checkpoint.interval.ms", _positive, 5000, "HW checkpoint period"),
    Key("broker.heartbeat.interval.ms", _positive, 2000, "heartbeat period towards the controller"),
    Key("auto.create.topics.enable", _boolean, True, "create unknown topics on Metadata requests"),
    Key(
        "controlled.shutdown.enable",
        _boolean,
        True,
        "at SIGTERM, have the controller move this broker's leaderships away before it stops",
    ),
    Key("num.partitions", _positive, 1, "partitions of auto-created topics"),
    Key("default.replication.factor", _positive, 1, "replication factor of auto-created topics"),
    Key(
        "truncation.mode",
        _choice("high-watermark", "leader-epoch"),
        "leader-epoch",
        "high-watermark (pre-0.11) or leader-epoch (KIP-101)",
    ),
    Key(
        "leader.epoch.lookup",
        _choice("iterative", "single"),
        "iterative",
        "iterative: OffsetsForLeaderEpoch answers (largest epoch <= requested, its end offset), the "
        "follower asks again until the epochs agree, and a new leader records (epoch, LEO) when elected "
        "(KIP-279, KAFKA-7415); single: one query answered with an end offset only, a new leader records "
        "its epoch at its first append (KIP-101 as first shipped: divergent lineages after fast failover)",
    ),
    Key(
        "isr.join.offset",
        _choice("epoch-start", "high-watermark"),
        "epoch-start",
        "epoch-start: a follower joins the ISR once its fetch offset reaches the HW and the leader's "
        "current-epoch start offset (KAFKA-7128); high-watermark: once it reaches the leader's HW, "
        "which a new leader may hold stale (committed data lost when that follower leads)",
    ),
    Key(
        "leader.epoch.fencing.enable",
        _boolean,
        True,
        "true: followers send CurrentLeaderEpoch in Fetch, OffsetsForLeaderEpoch and ListOffsets and "
        "the leader answers FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH to any other epoch (KIP-320); "
        "false: requests carry no epoch and a replica with stale metadata fetches from and truncates "
        "against a leader of another epoch (replicas diverge)",
    ),
    Key(
        "min.insync.replicas.strict",
        _boolean,
        True,
        "true: the HW advances only while the ISR has at least min.insync.replicas members "
        "(KIP-966, KAFKA-15583); false: the HW follows the ISR whatever its size, so a write appended "
        "under a full ISR is acknowledged after the ISR shrank to the leader alone",
    ),
    Key(
        "offsets.topic.num.partitions",
        _positive,
        5,
        "partitions of __consumer_offsets when the first coordinator lookup creates it; a group's "
        "coordinator is the leader of partition abs(hashCode(group id)) % this (Kafka: 50; small here "
        "so that a test cluster's coordinators are few and easy to fault)",
    ),
    Key(
        "offsets.topic.replication.factor",
        _positive,
        3,
        "replication factor of __consumer_offsets, capped at the brokers alive when it is created",
    ),
    Key(
        "offsets.commit.timeout.ms",
        _positive,
        5000,
        "an offset commit (or a group's stored generation) waits this long for the HW to pass its "
        "record (acks=all), then fails with REQUEST_TIMED_OUT (REBALANCE_IN_PROGRESS for a generation)",
    ),
    Key("offsets.metadata.max.bytes", _positive, 4096, "longest metadata string of an offset commit"),
    Key(
        "transaction.state.log.num.partitions",
        _positive,
        5,
        "partitions of __transaction_state when the first transactional lookup creates it; a "
        "transactional id's coordinator leads partition abs(hashCode(id)) % this (Kafka: 50)",
    ),
    Key(
        "transaction.state.log.replication.factor",
        _positive,
        3,
        "replication factor of __transaction_state, capped at the brokers alive when it is created",
    ),
    Key(
        "transaction.max.timeout.ms",
        _positive,
        900000,
        "largest transaction.timeout.ms a producer may ask for",
    ),
    Key(
        "transaction.partition.verification.enable",
        _boolean,
        True,
        "true: a partition leader asks the coordinator before appending the first transactional batch "
        "of a producer with no open transaction there, and refuses it (INVALID_TXN_STATE) unless that "
        "transaction is ongoing and holds the partition (KIP-890 part 1) -- a group coordinator does "
        "the same for a TxnOffsetCommit (Kafka 3.6+); false: a late produce after its transaction "
        "ended opens one nothing ends, and the LSO stays there (KAFKA-14402); a late TxnOffsetCommit "
        "leaves the group's offsets UNSTABLE_OFFSET_COMMIT for read_committed consumers for good",
    ),
    Key(
        "transaction.version",
        _transaction_version,
        2,
        "2: KIP-890 part 2 -- EndTxn v5 is advertised and a client using it gets a new producer epoch "
        "at every transaction end (its markers carry it, so a late EndTxn or Produce of an ended "
        "transaction is fenced: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH); 1: EndTxn up to v3, the "
        "same producer id and epoch across transactions, and a late EndTxn ends the next one "
        "(KAFKA-17754).  Clients below EndTxn v5 get level 1's behaviour at either level",
    ),
    Key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        _positive,
        10000,
        "how often the coordinator aborts (and fences) transactions older than their timeout",
    ),
    Key(
        "transactional.id.expiration.ms",
        _positive,
        604800000,
        "a transactional id with no transaction open or prepared and no state change for this long is "
        "removed (its state becomes Dead, a tombstone in __transaction_state); its next InitProducerId "
        "gets a new producer id at epoch 0 (Kafka's default: 7 days)",
    ),
    Key(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        _positive,
        3600000,
        "how often the coordinator removes expired transactional ids (Kafka's default: 1 hour)",
    ),
    Key(
        "group.initial.rebalance.delay.ms",
        _non_negative,
        3000,
        "a rebalance of an empty group waits this long for more members, extended by each join, up to "
        "the rebalance timeout (0: complete as soon as every known member has joined)",
    ),
    Key("group.min.session.timeout.ms", _positive, 6000, "smallest session timeout a member may ask for"),
    Key("group.max.session.timeout.ms", _positive, 1800000, "largest session timeout a member may ask for"),
    Key("cluster.id", _string, "tidemark", "cluster id reported in Metadata"),
    Key(
        "event.log.enable",
        _boolean,
        True,
        "append this broker's replication decisions (leadership, HW, ISR, truncations, fencing "
        "answers) as JSON lines to broker-events.jsonl: evidence for white-box checks (docs/events.md)",
    ),
    Key("event.log.dir", _string, "", "directory of the event log (empty: log.dirs)"),
)

CONTROLLER_KEYS: tuple[Key, ...] = (
    Key("node.id", _non_negative, 3000, "the controller's id (not a broker id)"),
    Key("listeners", _listener, None, "CONTROLLER://host:port to listen on (required)"),
    Key("metadata.log.dir", _string, None, "where the metadata file lives (required)"),
    Key("broker.session.timeout.ms", _positive, 9000, "a broker silent for this long is fenced"),
    Key("unclean.leader.election.enable", _boolean, False, "elect an out-of-ISR replica rather than none"),
    Key("min.insync.replicas", _positive, 1, "default for topics (reported to brokers)"),
    Key(
        "eligible.leader.replicas.enable",
        _boolean,
        True,
        "true: replicas that left the ISR while it was below min.insync.replicas stay Eligible Leader "
        "Replicas, election order is ISR, then unfenced ELR, then the last known leader, and a broker "
        "back from an unclean shutdown leaves the ISR and ELR until it catches up (KIP-966); false: "
        "election from the ISR only, and the last ISR member is re-elected after an unclean shutdown "
        "(the 'last replica standing' loss)",
    ),
    Key("cluster.id", _string, "tidemark", "cluster id"),
    Key(
        "event.log.enable",
        _boolean,
        True,
        "append the controller's decisions (elections, ISR changes, broker fencing) as JSON lines "
        "to controller-events.jsonl (docs/events.md)",
    ),
    Key("event.log.dir", _string, "", "directory of the event log (empty: metadata.log.dir)"),
)


def _key_table(keys: tuple[Key, ...]) -> dict[str, Key]:
    return {key.name: key for key in keys}


def parse_properties(text: str, source: str, keys: tuple[Key, ...]) -> dict[str, Any]:
    """Parse ``.properties`` text against ``keys``; return every key with its value or default.

    ``source`` names the file in errors.  Required keys (default ``None``) are not checked
    here; callers use :func:`require`.
    """
    table = _key_table(keys)
    values: dict[str, Any] = {key.name: key.default for key in keys}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ConfigError(f"{source}:{line_number}: expected key=value, got {line!r}")
        name, _, value = line.partition("=")
        name = name.strip()
        if name not in table:
            raise ConfigError(f"{source}:{line_number}: unknown key {name!r}")
        try:
            values[name] = table[name].parse(value)
        except ValueError as error:
            raise ConfigError(
                f"{source}:{line_number}: bad value {value.strip()!r} for {name}: {error}"
            ) from None
    return values


def apply_overrides(
    values: dict[str, Any], overrides: Mapping[str, str], source: str, keys: tuple[Key, ...]
) -> None:
    """Apply ``KEY=VALUE`` overrides (e.g. from ``--set``) with the same checks as the file."""
    table = _key_table(keys)
    for name, value in overrides.items():
        if name not in table:
            raise ConfigError(f"{source}: unknown key {name!r}")
        try:
            values[name] = table[name].parse(value)
        except ValueError as error:
            raise ConfigError(f"{source}: bad value {value!r} for {name}: {error}") from None


def load(path: str | Path, keys: tuple[Key, ...]) -> dict[str, Any]:
    """Read and check a properties file; raise :class:`ConfigError` on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None
    values = parse_properties(text, str(path), keys)
    for key in keys:
        if key.default is None and values[key.name] is None and key.name != "advertised.listeners":
            raise ConfigError(f"{path}: required key {key.name!r} is missing")
    return values


def broker_keys_accepting(name: str) -> bool:
    """Whether ``name`` is a broker key (used by launchers to route ``--set``)."""
    return name in _key_table(BROKER_KEYS)


def controller_keys_accepting(name: str) -> bool:
    return name in _key_table(CONTROLLER_KEYS)


def render(values: Mapping[str, Any]) -> str:
    """Render a properties file (launchers write configs with this)."""
    lines = []
    for name, value in values.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def process_main(
    program: str, keys: tuple[Key, ...], run: Callable[[dict[str, Any]], Any], argv: list[str] | None
) -> int:
    """``python -m broker_impl.<program> --config FILE``: load and check the config (exit 2
    with a one-line error naming file, line and key), set up logging, run ``run(settings)``."""
    import argparse
    import asyncio
    import logging
    import sys

    parser = argparse.ArgumentParser(prog=f"python -m broker_impl.{program}")
    parser.add_argument("--config", required=True, help="properties file")
    args = parser.parse_args(argv)
    try:
        settings = load(args.config, keys)
    except ConfigError as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(settings))
    return 0
