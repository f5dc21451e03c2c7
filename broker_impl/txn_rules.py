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

* ``transaction_version`` -- KIP-890 part 2 / KAFKA-17754 (``transaction.version``, Kafka's feature
  name): at 2, ApiVersions offers EndTxn v5, and an EndTxn v5
  ends its transaction with the producer epoch bumped (:func:`broker_impl.txn_state.plan_end`
  with ``bump``); the answer carries the new id and epoch.  At 1 (historical) EndTxn is offered up
  to v3 and every transaction of a producer has the same id and epoch: a delayed EndTxn, retried
  by the client on another connection, that arrives in the producer's next transaction ends
  *that* one.  A client below v5 gets level 1's rule at either level, as in Kafka.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import wire

END_TXN = 26


@dataclasses.dataclass(frozen=True)
class TransactionRules:
    partition_verification: bool = True
    """KIP-890 part 1: a transactional produce is verified against its coordinator."""
    transaction_version: int = 2
    """KIP-890 part 2 at 2: EndTxn v5 offered, the epoch bumped at every end of a v5 client."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> TransactionRules:
        return cls(
            partition_verification=bool(settings["transaction.partition.verification.enable"]),
            transaction_version=int(settings.get("transaction.version", 2)),
        )

    def advertised_end_txn_version(self) -> int:
        """The highest EndTxn version this broker offers (and serves to clients)."""
        return wire.APIS[END_TXN].advertised_max(self.transaction_version)

    @property
    def fence_step(self) -> int:
        """How far a fence (a newer producer, a timeout) moves the epoch: 2 under KIP-890 part 2,
        as Kafka's TV2 coordinator, so the fenced producer's EndTxn is never taken for a retry
        (:func:`broker_impl.txn_state.plan_fence_and_abort`)."""
        return 2 if self.transaction_version >= 2 else 1

    def bumps_epoch(self, end_txn_version: int) -> bool:
        """Does an EndTxn of ``end_txn_version`` end its transaction with a new epoch?"""
        return self.transaction_version >= 2 and end_txn_version >= wire.END_TXN_EPOCH_BUMP_VERSION


SAFE_TRANSACTION_RULES = TransactionRules()
