"""The whole-cluster-crash package's plans: every broker down at once, in each of its forms."""

from __future__ import annotations

import collections
import dataclasses
import random

from nemesis.packages import PackageContext, plan_package
from nemesis.whole_cluster_plan import MAX_OUTAGES

POWER = PackageContext(("n1", "n2", "n3"), 3, 3, power_loss=True, metadata_delay=True)
NO_POWER_LOSS = PackageContext(("n1", "n2", "n3"), 1, 2, power_loss=False, metadata_delay=True)
BROKERS = ("n1", "n2", "n3")


def _outages(steps: tuple[dict[str, object], ...]) -> list[str]:
    return [str(step["fault"]) for step in steps if step.get("fault") in ("kill", "power-loss")]


def test_every_fault_of_every_form_strikes_every_broker_at_once() -> None:
    for seed in range(200):
        steps = plan_package("whole-cluster-crash", random.Random(seed), POWER)
        assert all(tuple(step["nodes"]) == BROKERS for step in steps if "fault" in step), steps


def test_the_three_forms_are_drawn_and_plain_power_offs_flap_up_to_the_limit() -> None:
    forms: collections.Counter[tuple[str, bool, int]] = collections.Counter()
    for seed in range(400):
        steps = plan_package("whole-cluster-crash", random.Random(seed), POWER)
        outages = _outages(steps)
        disks = steps[0].get("fault") == "disk-error"
        assert len(set(outages)) == 1, "one way down per draw"
        assert not disks or outages == ["power-loss"], "failing disks: one power-off, then new disks"
        assert outages[0] == "power-loss" or len(outages) == 1, "a kill is never repeated"
        forms[(outages[0], disks, len(outages))] += 1
    kills = forms[("kill", False, 1)]
    disk = forms[("power-loss", True, 1)]
    plain = {n: forms[("power-loss", False, n)] for n in range(1, MAX_OUTAGES + 1)}
    assert kills + disk + sum(plain.values()) == 400
    # The shares of the module (a quarter killed; of the rest half with failing disks), loosely.
    assert 60 < kills < 140 and 110 < disk < 190 and 110 < sum(plain.values()) < 190, forms
    assert all(count > 20 for count in plain.values()), plain


def test_every_outage_restarts_every_broker_and_waits_for_each_before_the_next() -> None:
    for seed in range(100):
        steps = plan_package("whole-cluster-crash", random.Random(seed), POWER)
        downs = [i for i, step in enumerate(steps) if step.get("fault") in ("kill", "power-loss")]
        for number, down in enumerate(downs):
            following = steps[down : downs[number + 1] if number + 1 < len(downs) else len(steps)]
            start = next(i for i, step in enumerate(following) if step.get("fault") == "start")
            answers = [step["node"] for step in following[start:] if step.get("wait") == "answers"]
            assert answers == list(BROKERS), following
        assert steps[-1] == {"wait": "answers", "node": "n3", "timeout": 30}


def test_without_the_lazy_filesystem_every_draw_is_one_kill_of_every_broker() -> None:
    for seed in range(20):
        steps = plan_package("whole-cluster-crash", random.Random(seed), NO_POWER_LOSS)
        assert [step["fault"] for step in steps if "fault" in step] == ["kill", "start"]


def test_the_controller_dies_with_the_brokers_in_about_half_the_draws_and_comes_back_before_or_after_them() -> (
    None
):
    context = dataclasses.replace(POWER, controller_crash=True)
    with_controller = 0
    powered_off: collections.Counter[str] = collections.Counter()
    orders: collections.Counter[str] = collections.Counter()
    for seed in range(400):
        steps = plan_package("whole-cluster-crash", random.Random(seed), context)
        faults = [step.get("fault") for step in steps]
        downs = [i for i, fault in enumerate(faults) if fault in ("kill", "power-loss")]
        if not {"controller-kill", "controller-power-loss"} & set(faults):
            assert "controller-start" not in faults, steps
            continue
        with_controller += 1
        for number, down in enumerate(downs):
            outage = faults[down : downs[number + 1] if number + 1 < len(downs) else len(faults)]
            # Down the same way as the brokers, at every outage of the draw: a power-off takes the
            # controller's unsynced metadata too, a kill leaves its page cache.
            assert outage[1] == (
                "controller-power-loss" if outage[0] == "power-loss" else "controller-kill"
            ), outage
            powered_off[outage[1]] += 1
            starts = [fault for fault in outage if fault in ("start", "controller-start")]
            assert sorted(starts) == ["controller-start", "start"], outage
            orders[starts[0]] += 1
        assert all("nodes" not in step for step in steps if step.get("fault", "").startswith("controller-"))
    assert 150 < with_controller < 250, with_controller
    assert powered_off["controller-power-loss"] > 100 and powered_off["controller-kill"] > 20, powered_off
    assert orders["controller-start"] > 50 and orders["start"] > 50, orders


def test_no_controller_step_where_the_controller_process_cannot_be_killed() -> None:
    for seed in range(100):
        steps = plan_package("whole-cluster-crash", random.Random(seed), POWER)
        assert not any(str(step.get("fault", "")).startswith("controller-") for step in steps), steps
