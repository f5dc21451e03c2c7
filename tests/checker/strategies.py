"""Hypothesis strategies for synthetic runs with planted anomalies (see :mod:`tests.checker.synthetic`)."""

from __future__ import annotations

from hypothesis import strategies as st

from checker.definitions import UNSEEN
from tests.checker.synthetic import PLANTABLE, Plan


@st.composite
def plans(draw: st.DrawFn, clean: bool = False) -> Plan:
    partitions = draw(st.integers(1, 3))
    plant: list[tuple[str, int]] = []
    if not clean:
        for kind in draw(st.sets(st.sampled_from(PLANTABLE), min_size=1)):
            if kind == UNSEEN and partitions == 1:
                continue  # unseen needs a second partition whose drain stays incomplete
            complete = partitions - (1 if UNSEEN in dict(plant) or kind == UNSEEN else 0)
            plant.append((kind, draw(st.integers(1, max(1, min(2, complete))))))
    return Plan(
        seed=draw(st.integers(0, 2**32)),
        partitions=partitions,
        values_per_partition=draw(st.integers(10, 16)),
        plant=tuple(plant),
        jump=draw(st.sampled_from([None, "announced"])),  # an announced pause stalls nothing
    )
