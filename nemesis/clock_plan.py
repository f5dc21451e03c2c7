"""The ``clock-drift-leader-crash`` fault package: a partition's leader on a fast wall clock, a
follower's clock behind (running slow, or jumped back), then the leader killed so that its
leadership -- and any transaction or group coordinator on the same broker -- moves to a broker
whose wall clock reads minutes before what the old one stamped.

Kafka keeps its timeouts on the monotonic clock and only timestamps on the wall clock, with one
cross-broker exception that this package is for: the transaction coordinator persists a
transaction's start and last-update times (its wall clock) in the transaction log, and the
coordinator that loads them after a move compares them with *its* wall clock to expire
transactions.  Clocks far apart make the new coordinator see transactions that are minutes old or
not begun yet; it may abort them (a safe outcome: the producer is told), never lose or expose
what a committed or aborted transaction wrote.  A broker whose timers wrongly read the wall clock
also shows here: the fast leader's lag windows pass nine times over while it still leads.

Planned like the other packages (:mod:`nemesis.packages`, which registers it); needs brokers under
libfaketime (the bundled broker's; the harness preloads it for a mix that names this package)
and a replication factor of at least 2.
"""

from __future__ import annotations

import random

from nemesis.package_context import PackageContext, PackageError, Step, partition_of, sleep_step
from nemesis.spec import CLOCK_DRIFT_LEADER_CRASH

FAST_RATES_PCT = (200, 1000)
"""The leader's clock: gaining one second a second, or nine (a minute in under seven seconds)."""
SLOW_RATES_PCT = (0, 50)
"""A slow follower's clock: stopped, or losing half of each second."""
BACK_JUMPS_S = (-120, -3600)
"""A follower's clock jumped back: past the clients' transaction timeout, or an hour."""


def clock_drift_leader_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    if context.replication_factor < 2:
        raise PackageError(f"{CLOCK_DRIFT_LEADER_CRASH} needs a replication factor of at least 2")
    p = partition_of(rng, context)
    fast = {"fault": "clock-drift", "node": "L", "rate_pct": rng.choice(FAST_RATES_PCT)}
    if rng.random() < 0.5:
        behind: Step = {"fault": "clock-drift", "node": "F1", "rate_pct": rng.choice(SLOW_RATES_PCT)}
    else:
        behind = {"fault": "clock-skew", "node": "F1", "offset_s": rng.choice(BACK_JUMPS_S)}
    return [
        {"bind": {"L": f"leader-of:{p}", "F1": f"follower-of:{p}#1"}},
        fast,
        behind,
        sleep_step(rng, 2.0, 8.0, "the leader's clock runs ahead, the follower's behind, under load"),
        {"fault": "kill", "node": "L"},
        sleep_step(rng, 3.0, 6.0, "the leadership moves to a broker whose wall clock disagrees with it"),
        {"fault": "start", "node": "L"},
        {"fault": "clock-heal", "nodes": ["L", "F1"]},
    ]
