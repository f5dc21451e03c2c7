"""What the schedule plans of a ``consumer-churn``, pure: how the victim stops, and which.

Apart from the mechanism (:mod:`nemesis.consumer_churn`, which runs the churn on the workload and
says why it exists) because the schedule (:mod:`nemesis.plan`) draws it from the run's seed, and
the mechanism's module imports the plan: the draw belongs below both.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Final

from nemesis.fault_kinds import CHURN_STOPS

CHURN_PICK_RANGE: Final = 1 << 30
"""The range of a churn's victim draw (taken modulo the running consumers' count when it runs)."""


@dataclasses.dataclass(frozen=True)
class ChurnPlan:
    """One planned consumer churn: how the victim stops, and the draw that picks it (the running
    consumers in start order, modulo their count -- known only when it runs)."""

    stop: str
    pick: int


def plan_churn(rng: random.Random) -> ChurnPlan:
    """One seeded churn: ``leave`` or ``stall`` with equal odds, and the victim's draw."""
    return ChurnPlan(rng.choice(CHURN_STOPS), rng.randrange(CHURN_PICK_RANGE))
