"""Scenario files without containers: parsing (keys, verbs, roles), role resolution on a fake
cluster, and ``tidemark scenario list`` over the bundled library."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

import pytest

import nemesis.scenario_run as scenario_run_module
from harness.cli import scenario as scenario_cli
from nemesis.scenario import (
    FAULTS,
    Role,
    ScenarioError,
    ScenarioFailed,
    library,
    load_scenario,
    parse_role,
    parse_scenario,
    role_node,
)
from nemesis.scenario_run import ScenarioContext, ScenarioRun
from nemesis.steps import FaultStep
from testbed.cluster.kafka_admin import PartitionInfo

SOURCE = "test.toml"


def scenario_data(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "description": "A test. More text.",
        "step": list(steps) or [{"sleep": 1, "why": "x"}],
        **top,
    }


def parse_error(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, SOURCE)
    return str(caught.value)


# --------------------------------------------------------------------------- bug and switch


def test_bug_and_switch_are_read_and_kept_in_the_definition() -> None:
    parsed = parse_scenario(
        scenario_data(bug="KIP-279 (KAFKA-6361)", switch=" leader.epoch.lookup = single "), SOURCE
    )
    assert (parsed.bug, parsed.switch) == ("KIP-279 (KAFKA-6361)", "leader.epoch.lookup=single")
    assert parsed.switch_setting == ("leader.epoch.lookup", "single")
    assert parsed.definition["bug"] == "KIP-279 (KAFKA-6361)", "test.json embeds them"
    plain = parse_scenario(scenario_data(), SOURCE)
    assert (plain.bug, plain.switch, plain.switch_setting) == ("", "", None)
    assert parse_scenario(scenario_data(switch="a.b=x=y"), SOURCE).switch_setting == ("a.b", "x=y")


@pytest.mark.parametrize(
    "switch", ["leader.epoch.lookup", "=single", "leader.epoch.lookup=", "a b=c", "", 3, True]
)
def test_a_switch_that_is_not_key_equals_value_names_the_file_and_key(switch: Any) -> None:
    message = parse_error(scenario_data(switch=switch))
    assert message.startswith(f"{SOURCE}: switch: expected KEY=VALUE"), message
    assert repr(switch) in message


@pytest.mark.parametrize("bug", ["", "  ", 279, ["KIP-279"]])
def test_a_bug_must_be_a_name(bug: Any) -> None:
    assert parse_error(scenario_data(bug=bug)).startswith(f"{SOURCE}: bug: expected a name")


def test_unknown_top_level_keys_are_still_refused() -> None:
    assert parse_error(scenario_data(bugs="x")) == f"{SOURCE}: unknown keys bugs"


# --------------------------------------------------------------------------- verbs


def test_metadata_delay_needs_nodes_and_metadata_heal_does_not() -> None:
    assert {"metadata-delay", "metadata-heal"} <= set(FAULTS)
    steps = parse_scenario(
        scenario_data(
            {"fault": "metadata-delay", "node": "G"},
            {"fault": "metadata-delay", "nodes": ["A", "follower-of:0#2"]},
            {"fault": "metadata-heal", "node": "G"},
            {"fault": "metadata-heal"},
        ),
        SOURCE,
    ).steps
    assert [step["fault"] for step in steps] == ["metadata-delay"] * 2 + ["metadata-heal"] * 2
    assert parse_error(scenario_data({"fault": "metadata-delay"})) == (
        f"{SOURCE}: step 1: metadata-delay needs node or nodes"
    )
    message = parse_error(scenario_data({"fault": "metadata-delayed", "node": "A"}))
    assert message.startswith(f"{SOURCE}: step 1: fault 'metadata-delayed' is not one of ")
    assert "metadata-delay, metadata-heal" in message


def test_leader_is_not_is_a_wait_that_needs_a_node() -> None:
    parse_scenario(scenario_data({"wait": "leader-is-not", "node": "L"}), SOURCE)
    assert (
        parse_error(scenario_data({"wait": "leader-is-not"}))
        == f"{SOURCE}: step 1: wait leader-is-not needs node"
    )


# --------------------------------------------------------------------------- roles


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("leader-of:0", Role("leader-of:0", "leader-of", 0, 1)),
        ("follower-of:3", Role("follower-of:3", "follower-of", 3, 1)),
        ("follower-of:0#1", Role("follower-of:0#1", "follower-of", 0, 1)),
        ("follower-of:12#2", Role("follower-of:12#2", "follower-of", 12, 2)),
        ("preferred-of:1", Role("preferred-of:1", "preferred-of", 1, 1)),
    ],
)
def test_roles_parse(name: str, role: Role) -> None:
    assert parse_role(name) == role


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("follower-of:0#0", "N in #N must be a whole number >= 1"),
        ("follower-of:0#", "N in #N must be a whole number >= 1"),
        ("follower-of:0#two", "N in #N must be a whole number >= 1"),
        ("follower-of:0#-1", "N in #N must be a whole number >= 1"),
        ("leader-of:0#1", "only follower-of takes #N"),
        ("preferred-of:0#1", "only follower-of takes #N (preferred-of names the one node it is)"),
        ("follower:0", "'follower' is not one of leader-of, follower-of, preferred-of"),
        ("leader-of:x", "the partition must be a whole number, 'offsets' or 'transactions', not 'x'"),
        ("leader-of:", "the partition must be a whole number, 'offsets' or 'transactions', not ''"),
    ],
)
def test_bad_roles_are_refused_when_the_file_is_read_naming_step_and_role(name: str, problem: str) -> None:
    for step in (
        {"bind": {"F": name}},
        {"fault": "kill", "node": name},
        {"fault": "metadata-delay", "nodes": ["n1", name]},
        {"fault": "partition", "grudge": {"n1": [name]}},
        {"fault": "partition", "grudge": {name: ["n1"]}},
    ):
        message = parse_error(scenario_data({"sleep": 1, "why": "x"}, step))
        assert message.startswith(f"{SOURCE}: step 2: role {name!r}: {problem}"), message
    with pytest.raises(ValueError, match=re.escape(f"role {name!r}: {problem}")):
        parse_role(name)


INFO = PartitionInfo(partition=0, leader=2, leader_epoch=4, replicas=(3, 2, 1), isr=(1, 2, 3))
NODE_OF = {1: "n1", 2: "n2", 3: "n3"}.get


def test_followers_are_counted_in_replica_order_without_the_leader() -> None:
    assert role_node(parse_role("leader-of:0"), INFO, NODE_OF) == "n2"
    assert role_node(parse_role("follower-of:0"), INFO, NODE_OF) == "n3"
    assert role_node(parse_role("follower-of:0#1"), INFO, NODE_OF) == "n3"
    assert role_node(parse_role("follower-of:0#2"), INFO, NODE_OF) == "n1"
    assert (
        role_node(parse_role("preferred-of:0"), INFO, NODE_OF) == "n3"
    )  # the first assigned, leading or not
    with pytest.raises(ScenarioFailed, match=r"role 'follower-of:0#3': partition 0 has 2 follower\(s\)"):
        role_node(parse_role("follower-of:0#3"), INFO, NODE_OF)
    single = PartitionInfo(0, 1, 0, (1,), (1,))
    with pytest.raises(ScenarioFailed, match=r"role 'follower-of:0': partition 0 has 0 follower\(s\)"):
        role_node(parse_role("follower-of:0"), single, NODE_OF)
    with pytest.raises(
        ScenarioFailed, match="role 'leader-of:0': broker id 2 is none of this cluster's nodes"
    ):
        role_node(parse_role("leader-of:0"), INFO, {1: "n1"}.get)


# --------------------------------------------------------------------------- running steps on fakes


class FakeCluster:
    def __init__(self, controller: str | None = "c") -> None:
        self.bootstrap = "fake:9092"
        self.brokers = ["n1", "n2", "n3"]
        self.controller = controller
        self.node_ids = {"n1": 1, "n2": 2, "n3": 3}

    def node_of(self, broker_id: int) -> str | None:
        return NODE_OF(broker_id)


class FakeNemesis:
    """Records each fault step it is asked to apply: its kind and its grudge or nodes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def apply(self, step: FaultStep) -> None:
        self.calls.append((step.fault, dict(step.grudge) if step.grudge is not None else list(step.nodes)))


def run_steps(
    steps: Sequence[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster | None = None
) -> FakeNemesis:
    monkeypatch.setattr(scenario_run_module, "_partition_info", lambda bootstrap, topic, partition: INFO)
    nemesis = FakeNemesis()
    parsed = parse_scenario(scenario_data(*steps), SOURCE)
    context = ScenarioContext(
        cluster=cluster or FakeCluster(),  # type: ignore[arg-type]
        nemesis=nemesis,
        workload=None,  # type: ignore[arg-type]
        topic="queue",
        log=lambda line: None,
    )
    ScenarioRun(parsed, context).run()
    return nemesis


def test_steps_resolve_nth_followers_and_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    nemesis = run_steps(
        [
            {"bind": {"L": "leader-of:0", "F1": "follower-of:0#1", "F2": "follower-of:0#2"}},
            {"fault": "metadata-delay", "node": "F2"},
            {"fault": "partition", "grudge": {"controller": ["L"], "L": ["controller"]}},
            {"fault": "heal"},
            {"fault": "metadata-heal", "nodes": ["F2", "follower-of:0"]},
            {"fault": "metadata-heal"},
            {"wait": "leader-is-not", "node": "F1"},
            {"wait": "leader-is", "node": "L"},
        ],
        monkeypatch,
    )
    assert nemesis.calls == [
        ("metadata-delay", ["n1"]),
        ("partition", {"c": frozenset({"n2"}), "n2": frozenset({"c"})}),
        ("heal", []),
        ("metadata-heal", ["n1", "n3"]),
        ("metadata-heal", []),
    ]


def test_a_controller_that_is_not_there_and_a_bad_n_fail_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ScenarioFailed, match="'controller' names the controller node, and this cluster has none"
    ):
        run_steps([{"fault": "partition", "grudge": {"controller": ["n1"]}}], monkeypatch, FakeCluster(None))
    assert (
        role_node(parse_role("preferred-of:0"), INFO, NODE_OF) == "n3"
    )  # the first assigned, leading or not
    with pytest.raises(ScenarioFailed, match=r"role 'follower-of:0#3': partition 0 has 2 follower\(s\)"):
        run_steps([{"bind": {"F": "follower-of:0#3"}}], monkeypatch)

    class RefusingNemesis(FakeNemesis):
        def apply(self, step: FaultStep) -> None:
            raise ValueError("no controller node")

    refusing = RefusingNemesis()
    with pytest.raises(ScenarioFailed, match=f"{SOURCE}: step 1: no controller node"):
        ScenarioRun(
            parse_scenario(scenario_data({"fault": "metadata-delay", "node": "n1"}), SOURCE),
            ScenarioContext(FakeCluster(), refusing, None, "queue", lambda line: None),  # type: ignore[arg-type]
        ).run()
    run = ScenarioRun(parse_scenario(scenario_data(), SOURCE), None)  # type: ignore[arg-type]
    with pytest.raises(ScenarioFailed, match=r"role 'follower-of:0#0': N in #N must be a whole number >= 1"):
        run.resolve("follower-of:0#0")


class ReplicaFiles(FakeCluster):
    """A fake cluster with the LiveReplicas ability: each node's log end, and its checkpointed HW,
    are read from scripts of successive answers (the last one repeats), as a replica that grows
    and then stops."""

    def __init__(
        self, ends: dict[str, list[int | None]], checkpoints: dict[str, list[int | None]] | None = None
    ) -> None:
        super().__init__()
        self.ends = ends
        self.checkpoints = checkpoints or {}
        self.reads: list[str] = []

    def replica_log_end(self, node: str, topic: str, partition: int) -> int | None:
        assert (topic, partition) == ("queue", 0)
        self.reads.append(node)
        return next_answer(self.ends[node])

    def replica_checkpointed_high_watermark(self, node: str, topic: str, partition: int) -> int | None:
        assert (topic, partition) == ("queue", 0)
        self.reads.append(node)
        return next_answer(self.checkpoints[node])


def next_answer(script: list[int | None]) -> int | None:
    return script.pop(0) if len(script) > 1 else script[0]


def test_log_end_past_needs_than_and_names_it_as_a_node() -> None:
    parse_scenario(scenario_data({"wait": "log-end-past", "node": "G", "than": "F"}), SOURCE)
    assert (
        parse_error(scenario_data({"wait": "log-end-past", "node": "G"}))
        == f"{SOURCE}: step 1: wait log-end-past needs than = NODE (the replica to end past)"
    )
    assert "role 'follower-of:0#0'" in parse_error(
        scenario_data({"wait": "log-end-past", "node": "G", "than": "follower-of:0#0"})
    )


def test_log_end_past_waits_until_the_node_holds_records_beyond_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n3 catches up with n2 (the leader in INFO; equal is not past), then passes it; n2 stays at 10.
    cluster = ReplicaFiles({"n3": [4, 10, 11], "n2": [10]})
    run_steps([{"wait": "log-end-past", "node": "n3", "than": "leader-of:0"}], monkeypatch, cluster)
    assert cluster.reads == ["n3", "n2"] * 3


def test_log_end_past_fails_the_step_when_it_never_holds_or_cannot_be_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    never = ReplicaFiles({"n1": [7], "n2": [7]})
    with pytest.raises(
        ScenarioFailed, match=r"n1's log of partition 0 to end past n2's \(last seen: log ends \(7, 7\)\)"
    ):
        run_steps([{"wait": "log-end-past", "node": "n1", "than": "n2", "timeout": 0.2}], monkeypatch, never)
    no_replica = ReplicaFiles({"n1": [None], "n2": [0]})
    with pytest.raises(ScenarioFailed, match="timed out"):
        run_steps(
            [{"wait": "log-end-past", "node": "n1", "than": "n2", "timeout": 0.2}], monkeypatch, no_replica
        )
    with pytest.raises(ScenarioFailed, match="this cluster's replicas cannot be read while it runs"):
        run_steps([{"wait": "log-end-past", "node": "n1", "than": "n2"}], monkeypatch)


def test_hw_checkpoint_waits_until_the_checkpoint_moves_from_its_first_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n3 (the first follower in INFO) holds no replica at first, then checkpoints 40 twice (the
    # same checkpoint, or one that found the HW unchanged), then 52: it has just rewritten it.
    cluster = ReplicaFiles({}, {"n3": [None, 40, 40, 52, 60]})
    run_steps([{"wait": "hw-checkpoint", "node": "follower-of:0"}], monkeypatch, cluster)
    assert cluster.reads == ["n3"] * 4


def test_hw_checkpoint_fails_the_step_naming_what_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_error_text = parse_error(scenario_data({"wait": "hw-checkpoint"}))
    assert parse_error_text == f"{SOURCE}: step 1: wait hw-checkpoint needs node"
    still = ReplicaFiles({}, {"n1": [40]})
    with pytest.raises(
        ScenarioFailed, match=r"n1's HW checkpoint of partition 0 to move \(checkpointed HW: 40 on"
    ):
        run_steps([{"wait": "hw-checkpoint", "node": "n1", "timeout": 0.2}], monkeypatch, still)
    nowhere = ReplicaFiles({}, {"n1": [None]})
    with pytest.raises(ScenarioFailed, match=r"no replica on any read"):
        run_steps([{"wait": "hw-checkpoint", "node": "n1", "timeout": 0.2}], monkeypatch, nowhere)
    with pytest.raises(ScenarioFailed, match="this cluster's replicas cannot be read while it runs"):
        run_steps([{"wait": "hw-checkpoint", "node": "n1"}], monkeypatch)


def test_caught_up_waits_until_every_replica_holds_the_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ISR (INFO) is every replica from the start; n3 has not heard of the partition for two
    # reads -- a metadata-delay fault then would leave no zombie, only a replica that never exists.
    cluster = ReplicaFiles({"n1": [5], "n2": [5], "n3": [None, None, 0]})
    run_steps([{"wait": "caught-up"}], monkeypatch, cluster)
    assert cluster.reads.count("n3") == 3
    never = ReplicaFiles({"n1": [5], "n2": [5], "n3": [None]})
    with pytest.raises(
        ScenarioFailed, match=r"timed out after 0\.2 s waiting for partition 0 fully replicated"
    ):
        run_steps([{"wait": "caught-up", "timeout": 0.2}], monkeypatch, never)
    # Without the ability, the ISR alone decides.
    run_steps([{"wait": "caught-up", "timeout": 0.2}], monkeypatch)


# --------------------------------------------------------------------------- the bundled library and `scenario list`


def test_every_bundled_scenario_parses() -> None:
    for name, path in library().items():
        scenario = load_scenario(str(path))
        assert scenario.name == name and scenario.steps
        assert scenario.switch == "" or scenario.switch_setting is not None


def test_list_prints_a_header_and_one_aligned_row_per_bundled_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert scenario_cli.run(argparse.Namespace(scenario_command="list")) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split() == ["NAME", "BUG", "SWITCH", "DESCRIPTION"]
    names = sorted(library())
    assert [row.split()[0] for row in rows] == names, "every bundled scenario, by name, once"
    starts = {column: header.index(column) for column in ("BUG", "SWITCH", "DESCRIPTION")}
    for row, name in zip(rows, names, strict=True):
        scenario = load_scenario(name)
        for column, cell in (
            ("BUG", scenario.bug or "-"),
            ("SWITCH", scenario.switch or "-"),
            ("DESCRIPTION", scenario_cli.first_sentence(scenario.description)),
        ):
            assert row[starts[column] :].startswith(cell), (column, row)
            assert row[starts[column] - 2 : starts[column]] == "  ", ("columns are separated", row)
        assert row.endswith(".") and "\n" not in row


def test_list_output_of_given_scenarios() -> None:
    first = parse_scenario(scenario_data(bug="KIP-320 (KAFKA-6880)", switch="a=b"), "one.toml")
    second = parse_scenario({**scenario_data(), "name": "longer-name", "description": ""}, "two.toml")
    assert scenario_cli.table([first, second]) == [
        "NAME         BUG                   SWITCH  DESCRIPTION",
        "t            KIP-320 (KAFKA-6880)  a=b     A test.",
        "longer-name  -                     -       -",
    ]


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("One. Two.", "One."),
        ("  Spread\n  over lines: still one.\nThen another. ", "Spread over lines: still one."),
        ("No full stop", "No full stop."),
        ("Version 0.11 stays whole. Next.", "Version 0.11 stays whole."),
        ("", "-"),
    ],
)
def test_first_sentence(text: str, sentence: str) -> None:
    assert scenario_cli.first_sentence(text) == sentence


def test_show_and_list_turn_a_bad_scenario_into_a_usage_error() -> None:
    from harness.cli.errors import UsageError

    with pytest.raises(UsageError, match="no scenario 'nope'"):
        scenario_cli.run(argparse.Namespace(scenario_command="show", name="nope"))


def test_every_switch_scenario_states_both_modes() -> None:
    for name in library():
        scenario = load_scenario(name)
        if scenario.switch:
            key, _, buggy = scenario.switch.partition("=")
            values = {expectation.when.get(key) for expectation in scenario.expected}
            assert buggy in values and len(values - {None}) >= 2, (name, values)


def test_nothing_unexpected_accepts_permitted_loss_or_none_but_nothing_else() -> None:
    from nemesis.scenario import NOTHING_UNEXPECTED, Expectation

    expectation = Expectation(when={}, valid=NOTHING_UNEXPECTED, anomalies=(), absent=("replica-divergence",))
    permitted = {"lost-write": {"expected": True}}
    assert expectation.problems({"valid": True, "anomalies": {}}) == []
    assert expectation.problems({"valid": False, "anomalies": permitted}) == []
    assert expectation.problems(
        {"valid": False, "anomalies": {**permitted, "duplicate": {"expected": False}}}
    ) == ["duplicate reported, which the configuration does not permit"]
    assert expectation.problems({"valid": "unknown", "anomalies": {}}) == [
        "verdict 'unknown', expected a verdict"
    ]
    divergence = {"replica-divergence": {"expected": True}}
    assert expectation.problems({"valid": False, "anomalies": divergence}) == ["replica-divergence reported"]
    warned = {"G0": {"expected": False, "severity": "warning"}}  # never invalid: nothing need permit it
    assert expectation.problems({"valid": True, "anomalies": warned}) == []


def test_an_expectation_with_an_unknown_valid_is_refused() -> None:
    with pytest.raises(ScenarioError, match="valid must be true, false"):
        parse_scenario({"expected": [{"valid": "maybe"}], "step": [{"sleep": 1, "why": "w"}]}, "s.toml")


def test_pause_and_resume_may_be_unannounced_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str], bool]] = []

    class Announcing(FakeNemesis):
        def apply(self, step: FaultStep) -> None:
            calls.append((step.fault, list(step.nodes), step.announced))

    monkeypatch.setattr(scenario_run_module, "_partition_info", lambda bootstrap, topic, partition: INFO)
    steps = [
        {"fault": "pause", "nodes": ["n1", "n2"], "announce": False},
        {"fault": "resume", "nodes": ["n1", "n2"], "announce": False},
        {"fault": "pause", "node": "n3"},
        {"fault": "resume", "node": "n3", "announce": True},
    ]
    context = ScenarioContext(FakeCluster(), Announcing(), None, "queue", lambda line: None)  # type: ignore[arg-type]
    ScenarioRun(parse_scenario(scenario_data(*steps), SOURCE), context).run()
    assert calls == [
        ("pause", ["n1", "n2"], False),
        ("resume", ["n1", "n2"], False),
        ("pause", ["n3"], True),
        ("resume", ["n3"], True),
    ]
    assert "announce = true|false is for pause and resume only, not kill" in parse_error(
        scenario_data({"fault": "kill", "node": "n1", "announce": False})
    )
    assert "not pause = 'no'" in parse_error(
        scenario_data({"fault": "pause", "node": "n1", "announce": "no"})
    )
