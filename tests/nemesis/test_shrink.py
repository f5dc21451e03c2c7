"""The shrinker's pure halves: a history's fault timeline as scenario steps, and the moves that
remove what an anomaly does not need, judged by a planted oracle (no containers)."""

from __future__ import annotations

from typing import Any

from nemesis.scenario import parse_scenario
from nemesis.shrink import Step, fault_count, shrink, timeline_steps, units_of, without_units
from testbed.record.ops import NEMESIS_PROCESS, Op

SECOND = 1_000_000_000


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def pair(self, at: float, f: str, value: Any, outcome: str = "ok", took: float = 0.1) -> None:
        for time, kind in ((at, "invoke"), (at + took, outcome)):
            self.ops.append(Op(len(self.ops), int(time * SECOND), NEMESIS_PROCESS, kind, f, value))  # type: ignore[arg-type]

    def client(self, at: float) -> None:
        self.ops.append(Op(len(self.ops), int(at * SECOND), 0, "invoke", "send", {"partition": 0}))


def test_a_leader_targeted_fault_binds_the_role_and_its_heal_uses_the_alias() -> None:
    history = History()
    history.client(1.0)
    history.pair(
        10.0, "kill", {"nodes": ["n2"], "target": "leader", "leader_of": {"topic": "t", "partition": 1}}
    )
    history.pair(15.0, "start", {"nodes": ["n2"]})
    history.pair(20.0, "pause", {"nodes": ["n1"], "target": "one"}, outcome="fail")  # did nothing
    history.pair(25.0, "partition", {"kind": "halves", "grudge": {"n1": ["n3"], "n3": ["n1"], "n2": []}})
    history.pair(30.0, "heal", {"nodes": ["n1", "n2", "n3"]})
    steps = timeline_steps(history.ops)
    assert steps == [
        {"sleep": 10.0, "why": "the gap the failing run had"},
        {"bind": {"U1": "leader-of:1"}},
        {"fault": "kill", "node": "U1"},
        {"sleep": 4.9, "why": "the gap the failing run had"},
        {"fault": "start", "node": "U1"},
        {"wait": "answers", "node": "U1", "timeout": 30},
        {"sleep": 9.9, "why": "the gap the failing run had"},
        {"fault": "partition", "grudge": {"n1": ["n3"], "n3": ["n1"]}, "kind": "halves"},
        {"sleep": 4.9, "why": "the gap the failing run had"},
        {"fault": "heal"},
    ]
    parse_scenario({"name": "x", "step": steps}, "test")  # a valid scenario


def test_a_package_contributes_its_planned_steps_renamed_and_not_its_inner_ops() -> None:
    planned = [
        {"bind": {"A": "leader-of:0", "B": "follower-of:0"}},
        {"fault": "kill", "node": "B"},
        {"fault": "partition", "grudge": {"A": ["B"], "B": ["A"]}, "kind": "leader-follower"},
        {"fault": "start", "node": "B"},
        {"fault": "kill", "node": "A"},
        {"fault": "heal"},
        {"fault": "start", "node": "A"},
    ]
    history = History()
    history.ops.append(
        Op(0, 5 * SECOND, NEMESIS_PROCESS, "invoke", "package", {"package": "p", "steps": planned})
    )
    history.pair(5.1, "kill", {"nodes": ["n2"]})
    history.pair(5.3, "start", {"nodes": ["n2"]})
    history.ops.append(Op(len(history.ops), 9 * SECOND, NEMESIS_PROCESS, "ok", "package", {"package": "p"}))
    history.pair(12.0, "pause", {"nodes": ["n3"], "target": "one"})
    steps = timeline_steps(history.ops)
    assert steps[1] == {"bind": {"P1A": "leader-of:0", "P1B": "follower-of:0"}}
    assert steps[3] == {
        "fault": "partition",
        "grudge": {"P1A": ["P1B"], "P1B": ["P1A"]},
        "kind": "leader-follower",
    }
    assert [step.get("fault") for step in steps if "fault" in step] == [
        "kill",
        "partition",
        "start",
        "kill",
        "heal",
        "start",
        "pause",
    ]
    assert steps[-2] == {"sleep": 3.0, "why": "the gap the failing run had"}


STEPS: list[Step] = [
    {"sleep": 8.0, "why": "w"},
    {"fault": "pause", "node": "n3"},  # unit: pause n3 + resume
    {"sleep": 1.0, "why": "w"},
    {"bind": {"U1": "leader-of:0"}},
    {"fault": "kill", "node": "U1"},  # unit: kill U1 + start U1 + wait
    {"fault": "resume", "node": "n3"},
    {"sleep": 2.0, "why": "w"},
    {"fault": "partition", "grudge": {"n1": ["n2"], "n2": ["n1"]}, "kind": "k"},  # unit
    {"fault": "start", "node": "U1"},
    {"wait": "answers", "node": "U1"},
    {"sleep": 4.0, "why": "w"},
    {"fault": "heal"},
    {"fault": "resume", "nodes": ["n1", "n2", "n3"]},  # heal-all's blanket resume: closes nothing
]


def test_units_group_each_fault_with_its_heal_and_waits() -> None:
    labels = units_of(STEPS)
    by_unit: dict[Any, list[int]] = {}
    for position, label in enumerate(labels):
        by_unit.setdefault(label, []).append(position)
    assert by_unit[labels[1]] == [1, 5]
    assert by_unit[labels[4]] == [4, 8, 9]
    assert by_unit[labels[7]] == [7, 11]
    assert labels[12] is None and labels[3] is None
    pause_unit = labels[1]
    assert pause_unit is not None
    assert without_units(STEPS, {pause_unit})[:2] == [
        {"sleep": 9.0, "why": "w"},  # the sleeps around the removed pause merged
        {"bind": {"U1": "leader-of:0"}},
    ]


def test_shrink_keeps_only_what_the_oracle_needs_and_halves_sleeps() -> None:
    judged: list[list[Step]] = []

    def reproduces(candidate: list[Step]) -> bool:
        """The planted bug: a leader kill after at least 3 s of warm-up."""
        judged.append(candidate)
        warm_up = 0.0
        for step in candidate:
            if step.get("fault") == "kill":
                return warm_up >= 3.0
            warm_up += float(step.get("sleep", 0))
        return False

    result = shrink(STEPS, reproduces)
    assert fault_count(result.steps) == 1
    assert [step.get("fault") for step in result.steps if "fault" in step] == ["kill", "start"]
    assert result.steps[0] == {"sleep": 4.5, "why": "w"}  # 9 -> 4.5; 2.25 would lose the bug
    assert result.tried == len(judged)
    assert all(step.get("fault") != "resume" for step in result.steps)


def test_shrink_keeps_everything_when_everything_is_needed() -> None:
    def reproduces(candidate: list[Step]) -> bool:
        return fault_count(candidate) == 3 and sum(float(s.get("sleep", 0)) for s in candidate) >= 15

    result = shrink(STEPS, reproduces)
    assert fault_count(result.steps) == 3
    assert sum(float(step.get("sleep", 0)) for step in result.steps) == 15


def test_a_sleep_whose_halving_failed_is_not_tried_again_and_time_can_run_out() -> None:
    judged: list[list[Step]] = []

    def reproduces(candidate: list[Step]) -> bool:
        """Every fault, and at least 10.5 s of the 15 s of sleeps (8, 1, 2, 4)."""
        judged.append(candidate)
        return fault_count(candidate) == 3 and sum(float(s.get("sleep", 0)) for s in candidate) >= 10.5

    result = shrink(STEPS, reproduces)
    assert sorted(float(s["sleep"]) for s in result.steps if "sleep" in s) == [0.5, 2.0, 4.0, 4.0]
    halvings = [c for c in judged if fault_count(c) == 3]
    # Pass 1: 8->4 yes, 4->2 no, 2->1 no, 1->0.5 yes; pass 2: (the new) 4->2 no, 0.5->0.25 no.
    # The sleeps that failed in pass 1 are not tried again in pass 2.
    assert len(halvings) == 6

    calls = [0]

    def out_of_time() -> bool:
        calls[0] += 1
        return calls[0] > 2  # two candidates, then the time is up

    result = shrink(STEPS, lambda candidate: True, out_of_time=out_of_time)
    assert not result.complete and result.tried == 2
    # The prefix search's two halvings (the last unit, then the middle one) were all it had time for.
    assert fault_count(result.steps) == fault_count(STEPS) - 2


def _long_timeline(units: int) -> list[Step]:
    """``units`` kills of nodes ``n0``.. each healed, 1 s apart."""
    steps: list[Step] = []
    for unit in range(units):
        steps += [
            {"sleep": 1.0, "why": "w"},
            {"fault": "kill", "node": f"n{unit}"},
            {"sleep": 1.0, "why": "w"},
            {"fault": "start", "node": f"n{unit}"},
        ]
    return steps


def _killed(candidate: list[Step]) -> set[str]:
    return {str(step["node"]) for step in candidate if step.get("fault") == "kill"}


def test_the_window_of_the_cause_is_found_in_few_candidates() -> None:
    """A cause in the middle of a long timeline (two neighbouring units of sixteen) is isolated
    by the prefix and suffix searches in far fewer candidates than one per unit."""
    unit_moves: list[set[str]] = []  # candidates that keep every second of sleep: unit removals

    def reproduces(candidate: list[Step]) -> bool:
        if sum(float(step.get("sleep", 0)) for step in candidate) == 32:
            unit_moves.append(_killed(candidate))
        return {"n6", "n7"} <= _killed(candidate)

    result = shrink(_long_timeline(16), reproduces, log=lambda _: None)
    assert _killed(result.steps) == {"n6", "n7"}
    # Two binary searches over 16 then 8 units (at most 4 + 3), nothing left to try one by one:
    # both window edges were seen to be needed.
    assert len(unit_moves) <= 7


def test_units_inside_the_window_are_still_tried_one_by_one() -> None:
    def reproduces(candidate: list[Step]) -> bool:
        return {"n2", "n5"} <= _killed(candidate)

    result = shrink(_long_timeline(8), reproduces)
    assert _killed(result.steps) == {"n2", "n5"}  # n3 and n4 lay between the edges


def test_every_node_a_package_step_names_is_renamed_and_the_result_parses() -> None:
    """``than`` names a node too: left as ``F`` it would name no bound node in the replay."""
    planned = [
        {"bind": {"L": "leader-of:0", "F": "follower-of:0#1", "G": "follower-of:0#2"}},
        {"fault": "metadata-delay", "node": "G"},
        {"wait": "log-end-past", "node": "G", "than": "F", "partition": 0, "timeout": 30},
        {"fault": "metadata-heal", "node": "G"},
    ]
    history = History()
    history.ops.append(
        Op(0, 5 * SECOND, NEMESIS_PROCESS, "invoke", "package", {"package": "z", "steps": planned})
    )
    history.ops.append(Op(1, 9 * SECOND, NEMESIS_PROCESS, "ok", "package", {"package": "z"}))
    steps = timeline_steps(history.ops)
    assert {"wait": "log-end-past", "node": "P1G", "than": "P1F", "partition": 0, "timeout": 30} in steps
    parse_scenario({"name": "s", "step": steps}, "shrunk.toml")


def test_a_wait_for_an_election_goes_with_the_fault_that_forced_it() -> None:
    """Without ``kill A`` nobody elects ``B``: its ``leader-is B`` must go with the kill, not stay
    behind to time out (which ends a replay's steps there)."""
    steps: list[Step] = [
        {"bind": {"A": "leader-of:0", "B": "follower-of:0"}},
        {"fault": "kill", "node": "B"},
        {"fault": "start", "node": "B"},
        {"fault": "kill", "node": "A"},
        {"wait": "leader-is", "node": "B", "partition": 0, "timeout": 20},
        {"fault": "start", "node": "A"},
        {"wait": "in-isr", "node": "A", "partition": 0, "timeout": 20},
    ]
    labels = units_of(steps)
    assert labels[4] == labels[3] != labels[1]  # leader-is B: with kill A, not with B's own unit
    assert labels[6] == labels[3]  # a wait on A's own state: with A's unit
    assert all("wait" not in step for step in without_units(steps, {labels[3]}))


def test_a_wait_on_a_partitions_victim_goes_with_the_partition() -> None:
    """``not-in-isr F`` after a partition that cuts F off: without the partition it would time out."""
    steps: list[Step] = [
        {"bind": {"L": "leader-of:0", "F": "follower-of:0"}},
        {"fault": "partition", "grudge": {"L": ["F"], "F": ["L"]}, "kind": "leader-follower"},
        {"wait": "not-in-isr", "node": "F", "partition": 0, "timeout": 40},
        {"fault": "heal"},
    ]
    labels = units_of(steps)
    assert labels[2] == labels[1] is not None
    assert [step for step in without_units(steps, {labels[1]})] == [steps[0]]


def test_a_request_held_wait_goes_with_the_hold_it_awaits_node_or_none() -> None:
    """Without its ``request-hold`` nothing is ever held: the wait would time out."""
    steps: list[Step] = [
        {"fault": "kill", "node": "n1"},
        {"fault": "request-hold", "nodes": ["n2", "n3"], "requests": ["EndTxn(commit)"]},
        {"wait": "request-held", "timeout": 20},
        {"fault": "start", "node": "n1"},
        {"wait": "request-held", "node": "n2", "timeout": 20},
        {"fault": "request-release"},
    ]
    labels = units_of(steps)
    assert labels[2] == labels[1] == labels[4] != labels[0]
    assert labels[5] is None  # a release of every node's proxy, like heal-all: kept
    assert without_units(steps, {labels[1]}) == [steps[0], steps[3], steps[5]]


def test_a_fault_without_a_heal_keeps_its_node_and_is_a_unit_of_its_own() -> None:
    # elect-preferred does its whole change in its op: nothing heals it, and a shrink may drop it.
    history = History()
    history.pair(10.0, "kill", {"nodes": ["n2"], "target": "one"})
    history.pair(12.0, "elect-preferred", {"nodes": ["n1", "n3"], "target": "minority"})
    history.pair(14.0, "start", {"nodes": ["n2"]})
    history.pair(16.0, "shutdown", {"nodes": ["n3"], "target": "one", "controlled": False})
    steps = timeline_steps(history.ops)
    faults = [step for step in steps if "fault" in step]
    assert faults[1] == {"fault": "elect-preferred", "nodes": ["n1", "n3"]}
    assert faults[3] == {"fault": "shutdown", "node": "n3", "controlled": False}  # a replay stops it alike
    parse_scenario({"name": "x", "step": steps}, "test")
    labels = units_of(steps)
    elect = labels[steps.index(faults[1])]
    assert elect is not None and labels.count(elect) == 1
    assert fault_count(steps) == 3
    assert {"fault": "elect-preferred", "nodes": ["n1", "n3"]} not in without_units(steps, {elect})


def test_the_controller_s_kill_and_start_are_one_unit_and_its_steps_name_no_node() -> None:
    """A package's planned steps and heal-all's recorded ops alike: a shrink drops the controller's
    crash whole (its start with it) or keeps it, and the replay's steps parse."""
    planned = [
        {"fault": "power-loss", "nodes": ["n1", "n2"]},
        {"fault": "controller-kill"},
        {"sleep": 1.0, "why": "down"},
        {"fault": "controller-start"},
        {"fault": "start", "nodes": ["n1", "n2"]},
    ]
    history = History()
    history.ops.append(
        Op(0, 5 * SECOND, NEMESIS_PROCESS, "invoke", "package", {"package": "w", "steps": planned})
    )
    history.ops.append(Op(1, 9 * SECOND, NEMESIS_PROCESS, "ok", "package", {"package": "w"}))
    history.pair(12.0, "controller-kill", {"nodes": ["controller"]})
    history.pair(14.0, "controller-start", {"nodes": ["controller"]})
    steps = timeline_steps(history.ops)
    parse_scenario({"name": "c", "step": steps}, "shrunk.toml")
    assert [step for step in steps if str(step.get("fault", "")).startswith("controller-")] == [
        {"fault": "controller-kill"},
        {"fault": "controller-start"},
    ] * 2
    labels = units_of(steps)
    kills = [labels[i] for i, step in enumerate(steps) if step.get("fault") == "controller-kill"]
    starts = [labels[i] for i, step in enumerate(steps) if step.get("fault") == "controller-start"]
    assert kills == starts and None not in kills and kills[0] != kills[1]
    assert fault_count(steps) == 3
    kept = without_units(steps, {kills[0]})
    assert [step.get("fault") for step in kept if "fault" in step] == [
        "power-loss",
        "start",
        "controller-kill",
        "controller-start",
    ]
