"""The transaction rules a broker follows, read once from its settings.

As :mod:`broker_impl.rules` does for replication: each field is one rule that fixed a documented
Kafka transaction bug, switched by a setting of :mod:`broker_impl.config` (defaults: the safe
rules), asked by the code that applies it, so each rule is decided in one place.

* ``partition_verification`` -- KIP-890 part 1 / KAFKA-14402 (``transaction.partition.verification
  .enable``): before a partition leader appends the first transactional batch of a producer that
  has no open transaction there, it asks the coordinator whether that transaction is Ongoing and
  holds the partition (:func:`broker_impl.txn_state.verify_partition`, over AddPartitionsToTxn v4
  ``verify_only``, :mod:`broker_impl.txn_verification`).  Off (the historical form), a produce
  that arrives after its transaction ended opens a transaction no marker will ever end, and the
  partition's LSO stays at it: read_committed consumers stall ("hanging transactions").

KIP-890 part 2 (an epoch bump at every transaction end, KAFKA-17754) is not a switch yet: its rule
is :func:`broker_impl.txn_state.epoch_after_end`, and the safe form needs EndTxn v5.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class TransactionRules:
    partition_verification: bool = True
    """KIP-890 part 1: a transactional produce is verified against its coordinator."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> TransactionRules:
        return cls(partition_verification=bool(settings["transaction.partition.verification.enable"]))


SAFE_TRANSACTION_RULES = TransactionRules()
