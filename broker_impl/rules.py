"""The replication rules a broker follows, read once from its settings.

Each field is one rule that fixed a documented Kafka replication bug; the settings that
switch them live in :mod:`broker_impl.config` (their defaults are the safe rules).  The
partition, the replica fetcher and the request handlers ask this object rather than the
raw settings, so a rule is decided in one place and unit tests can build a partition
under any combination without a configuration file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class ReplicationRules:
    min_insync_replicas: int = 1
    """``min.insync.replicas``: acks=all needs this many ISR members."""
    strict_min_isr: bool = True
    """KIP-966 / KAFKA-15583: the HW advances only while ISR >= min ISR."""
    iterative_epoch_lookup: bool = True
    """KIP-279: the follower repeats OffsetsForLeaderEpoch until the epochs agree."""
    record_epoch_on_election: bool = True
    """KAFKA-7415: a new leader records (epoch, LEO) when elected, not at its first append."""
    isr_join_needs_epoch_start: bool = True
    """KAFKA-7128: a follower joins the ISR only once it reached the leader's epoch start."""
    epoch_fencing: bool = True
    """KIP-320: CurrentLeaderEpoch is sent by followers and checked by leaders."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ReplicationRules:
        """The rules of a broker configured with ``settings`` (a parsed broker config)."""
        iterative = settings["leader.epoch.lookup"] == "iterative"
        return cls(
            min_insync_replicas=int(settings["min.insync.replicas"]),
            strict_min_isr=bool(settings["min.insync.replicas.strict"]),
            iterative_epoch_lookup=iterative,
            record_epoch_on_election=iterative,
            isr_join_needs_epoch_start=settings["isr.join.offset"] == "epoch-start",
            epoch_fencing=bool(settings["leader.epoch.fencing.enable"]),
        )


SAFE_RULES = ReplicationRules()
"""Every rule in its safe, modern form: the defaults of :mod:`broker_impl.config`."""
