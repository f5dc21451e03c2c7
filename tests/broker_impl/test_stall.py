"""broker_impl.stall: a late tick is a stall, scheduling noise is not."""

from __future__ import annotations

from broker_impl.stall import STALL_SECONDS, StallWatch


def test_a_tick_on_time_or_a_little_late_is_no_stall() -> None:
    watch = StallWatch(0.05, start=100.0)
    assert watch.stalled(100.05) == 0.0
    assert watch.stalled(100.05 + 0.05 + STALL_SECONDS) == 0.0  # exactly the threshold: noise


def test_a_tick_late_beyond_the_threshold_reports_the_lateness_once() -> None:
    watch = StallWatch(0.05, start=100.0)
    assert abs(watch.stalled(104.0) - 3.95) < 1e-9  # 4 s since the last tick, 0.05 of it the period
    assert watch.stalled(104.05) == 0.0  # measured from the late tick, not from the start


def test_the_threshold_is_the_owners_to_choose() -> None:
    watch = StallWatch(1.0, start=0.0, threshold=2.0)
    assert watch.stalled(2.5) == 0.0
    assert watch.stalled(6.0) == 2.5
