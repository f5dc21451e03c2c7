"""``request-hold``, ``-delay``, ``-reorder``, ``-duplicate``, ``-reset`` and their heal ``request-release``: the
declarations, their mechanisms' op values, and the per-node acts against a real request proxy
process (no broker: the acts only set rules).

The kinds are :data:`nemesis.fault_kinds.REQUEST_KINDS`, registered with the others; the last
test runs them through the nemesis on a cluster whose proxies are real processes."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from nemesis.fault_kinds import (
    KINDS,
    REQUEST_DELAY,
    REQUEST_DELAY_MS,
    REQUEST_DELAY_MS_DRAWN,
    REQUEST_DUPLICATE,
    REQUEST_HOLD,
    REQUEST_KINDS,
    REQUEST_RELEASE,
    REQUEST_REORDER,
    REQUEST_REORDER_MS,
    REQUEST_RESET,
    kind_of,
)
from nemesis.kind_mechanisms import MECHANISMS, mechanism_of
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.outcomes import Refused
from nemesis.plan import Layout, PlanError
from nemesis.request_faults import HELD_REQUESTS, RequestFaults, RequestProxies
from nemesis.spec import NemesisSpec
from nemesis.steps import FaultStep
from testbed.cluster.request_proxy.control import ProxyControl, ProxyProcess, spawn_proxy
from testbed.record.faults import NemesisRow, fault_windows, nemesis_events
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.test_fault_kinds import registry_problems
from tests.nemesis.test_mechanism import FakeCluster

pytestmark = pytest.mark.timeout(60)


def test_the_declarations_are_whole_and_have_mechanisms() -> None:
    mechanisms = {kind.name: mechanism_of(kind) for kind in REQUEST_KINDS}
    assert None not in mechanisms.values()
    assert registry_problems(KINDS, MECHANISMS) == []
    *faults, release = REQUEST_KINDS
    names = [fault.name for fault in faults]
    assert names == [REQUEST_HOLD, REQUEST_DELAY, REQUEST_REORDER, REQUEST_DUPLICATE, REQUEST_RESET]
    for fault in faults:
        assert (fault.heal, fault.drawn_as, fault.nodes) == (REQUEST_RELEASE, "node-target", "required")
        assert fault.needs == {"request-proxy"} and kind_of(fault.name) is fault
    assert (release.name, release.heal_name, release.drawn_as, release.nodes) == (
        REQUEST_RELEASE,
        None,
        "never",
        "optional",
    )
    assert release.needs == {"request-proxy"}
    assert kind_of(REQUEST_DELAY).drawn == (("delay_ms", REQUEST_DELAY_MS_DRAWN),)
    # reorder draws twice each delay as its longest wait: the same mean wait, an uneven one.
    assert kind_of(REQUEST_REORDER).drawn == (("delay_ms", tuple(2 * ms for ms in REQUEST_DELAY_MS_DRAWN)),)
    assert MECHANISMS[REQUEST_RELEASE] is mechanisms[REQUEST_RELEASE]


class RecordingActions:
    """The nemesis as the mechanisms see it (:class:`nemesis.kind_mechanisms.FaultActions`),
    recording what they ask of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list[str], dict[str, Any]]] = []

    @property
    def layout(self) -> Layout:
        return Layout(("n1", "n2", "n3"), "c", "brokers")

    def inject_on_nodes(self, fault: str, nodes: Sequence[str], extra: Mapping[str, Any]) -> Op:
        self.calls.append(("inject", fault, list(nodes), dict(extra)))
        return Op(index=0, time=0, process="nemesis", type="ok", f=fault, value=None)

    def heal_on_nodes(self, heal: str, nodes: Sequence[str], extra: Mapping[str, Any] | None = None) -> Op:
        self.calls.append(("heal", heal, list(nodes), dict(extra or {})))
        return Op(index=0, time=0, process="nemesis", type="ok", f=heal, value=None)


def test_the_mechanisms_record_the_requests_held_and_how_they_are_released() -> None:
    hold, delay, reorder, duplicate, reset, release = (mechanism_of(kind) for kind in REQUEST_KINDS)
    assert hold and delay and reorder and duplicate and reset and release
    actions = RecordingActions()
    hold(actions, FaultStep(REQUEST_HOLD, ("n2",)), {"target": "leader"})  # type: ignore[arg-type]
    release(actions, FaultStep(REQUEST_RELEASE, ()), {})  # type: ignore[arg-type]
    delay(actions, FaultStep(REQUEST_DELAY, ("n1",)), {})  # type: ignore[arg-type]
    delay(actions, FaultStep(REQUEST_DELAY, ("n1",), delay_ms=20), {})  # type: ignore[arg-type]
    reorder(actions, FaultStep(REQUEST_REORDER, ("n2",)), {})  # type: ignore[arg-type]
    reorder(actions, FaultStep(REQUEST_REORDER, ("n2",), delay_ms=2000), {})  # type: ignore[arg-type]
    duplicate(actions, FaultStep(REQUEST_DUPLICATE, ("n3",), requests=("Produce",)), {})  # type: ignore[arg-type]
    reset(actions, FaultStep(REQUEST_RESET, ("n3",)), {})  # type: ignore[arg-type]
    assert actions.calls == [
        ("inject", REQUEST_HOLD, ["n2"], {"target": "leader", "requests": ["Produce", "EndTxn"]}),
        ("heal", REQUEST_RELEASE, ["n1", "n2", "n3"], {"mode": "new-connection"}),  # no node: every broker
        ("inject", REQUEST_DELAY, ["n1"], {"delay_ms": REQUEST_DELAY_MS}),
        ("inject", REQUEST_DELAY, ["n1"], {"delay_ms": 20}),
        ("inject", REQUEST_REORDER, ["n2"], {"delay_ms": REQUEST_REORDER_MS}),
        ("inject", REQUEST_REORDER, ["n2"], {"delay_ms": 2000}),
        ("inject", REQUEST_DUPLICATE, ["n3"], {"requests": ["Produce"]}),
        ("inject", REQUEST_RESET, ["n3"], {"requests": ["Produce", "EndTxn"]}),
    ]


class ProxiedNodes:
    """A cluster whose brokers n1 and n2 have request proxies (n2's is not running)."""

    def __init__(self, proxy: ProxyProcess) -> None:
        self.controls = {"n1": proxy.control, "n2": ProxyControl("127.0.0.1:9", timeout=2)}

    def request_proxy(self, node: str) -> ProxyControl:
        if node == "pg":  # as a shared-store cluster answers for its PostgreSQL node
            raise ValueError("pg runs PostgreSQL, not a broker: it has no request proxy")
        return self.controls[node]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ProxyProcess]:
    started = spawn_proxy("127.0.0.1:0", "127.0.0.1:9", "127.0.0.1:0", tmp_path / "proxy.jsonl")
    yield started
    assert started.stop() == 0


def test_hold_sets_one_rule_per_request_and_release_removes_them(proxy: ProxyProcess) -> None:
    cluster = ProxiedNodes(proxy)
    assert isinstance(cluster, RequestProxies)
    acts = RequestFaults(cluster)
    rules = acts.hold("n1")
    assert [(rule["op"], rule["api_keys"], rule["remaining"]) for rule in rules] == [
        ("hold", [0], 1),
        ("hold", [26], 1),
    ]
    assert len(HELD_REQUESTS) == len(proxy.control.status()["rules"]) == 2
    reply = acts.release("n1")
    assert (reply["rules_removed"], reply["released"]) == (2, 0)
    assert acts.release("n1")["rules_removed"] == 0  # idempotent: heal-all may repeat it
    assert proxy.control.status()["rules"] == []


def test_delay_duplicate_and_reset_set_their_rules_and_release_removes_them(proxy: ProxyProcess) -> None:
    acts = RequestFaults(ProxiedNodes(proxy))
    rules = [*acts.delay("n1", 20), *acts.duplicate("n1"), *acts.reset("n1", ["EndTxn"])]
    rules += [*acts.reorder("n1", 400), *acts.reorder("n1", 41)]
    rules += [*acts.duplicate("n1", ["EndTxn(abort)"]), *acts.reset("n1", ["EndTxn(commit)"])]
    described = [
        (
            rule["op"],
            rule["api_keys"],
            rule["remaining"],
            rule.get("ms"),
            rule.get("jitter"),
            rule.get("ends"),
        )
        for rule in rules
    ]
    assert described == [
        ("delay", "*", None, 20, None, None),  # every request, for the whole window
        ("duplicate", [0], None, None, None, None),
        ("duplicate", [26], None, None, None, None),
        ("reset", [26], 1, None, None, None),  # the next one only: a reset is an event, not a state
        ("delay", "*", None, 200, 200, None),  # each request its own wait in 0..400
        ("delay", "*", None, 21, 20, None),  # 1..41: an odd longest wait never draws a negative one
        ("duplicate", [26], None, None, None, "abort"),  # an EndTxn by its ending
        ("reset", [26], 1, None, None, "commit"),
    ]
    assert acts.release("n1")["rules_removed"] == 8
    assert proxy.control.status()["rules"] == []


def test_acts_that_certainly_did_nothing_are_refused(proxy: ProxyProcess) -> None:
    with pytest.raises(Refused, match="no request proxies"):
        RequestFaults(object()).hold("n1")
    acts = RequestFaults(ProxiedNodes(proxy))
    with pytest.raises(Refused, match=r"127\.0\.0\.1:9"):
        acts.hold("n2")  # its control channel cannot be connected to: nothing was sent
    with pytest.raises(Refused, match=r"127\.0\.0\.1:9"):
        acts.release("n2")
    for act in (acts.hold, acts.release):  # a node without a proxy (tansu's PostgreSQL node)
        with pytest.raises(Refused, match="pg runs PostgreSQL"):
            act("pg")
    # A request the proxy cannot name (an op from elsewhere): refused before any rule is set.
    with pytest.raises(Refused, match=r"request 'Fetch': expected one of Produce, EndTxn, EndTxn\(commit\)"):
        acts.hold("n1", ["EndTxn", "Fetch"])
    assert proxy.control.status()["rules"] == []


class ProxiedFakeCluster(FakeCluster):
    """The nemesis tests' fake cluster, its brokers behind real proxies (no broker behind them)."""

    def __init__(self, controls: dict[str, ProxyControl]) -> None:
        super().__init__()
        self.controls = controls

    def request_proxy(self, node: str) -> ProxyControl:
        return self.controls[node]


def test_the_nemesis_holds_on_the_named_broker_and_heal_all_releases(tmp_path: Path) -> None:
    proxies = {
        node: spawn_proxy("127.0.0.1:0", "127.0.0.1:9", "127.0.0.1:0", tmp_path / f"{node}.jsonl")
        for node in ("n1", "n2", "n3")
    }
    recorder = Recorder(tmp_path / "history.jsonl")
    ops: list[Op] = []
    recorder.listeners.append(ops.append)
    try:
        cluster = ProxiedFakeCluster({node: proxy.control for node, proxy in proxies.items()})
        nemesis = Nemesis(
            NemesisSpec(faults=(REQUEST_HOLD,)),
            cluster,
            recorder,
            NemesisConfig(leader_partitions=[("q", 0)]),
        )
        held = nemesis.apply(FaultStep(REQUEST_HOLD, ("n2",)))
        assert (held.type, held.value) == ("ok", {"nodes": ["n2"], "requests": ["Produce", "EndTxn"]})
        assert [len(proxy.control.status()["rules"]) for proxy in proxies.values()] == [0, 2, 0]
        # A scenario step may name the requests: only those are held.
        named = nemesis.apply(FaultStep(REQUEST_HOLD, ("n3",), requests=("EndTxn(commit)",)))
        assert (named.type, named.value) == ("ok", {"nodes": ["n3"], "requests": ["EndTxn(commit)"]})
        assert [len(proxy.control.status()["rules"]) for proxy in proxies.values()] == [0, 2, 1]
        assert [rule["ends"] for rule in proxies["n3"].control.status()["rules"]] == ["commit"]
        healed = nemesis.heal_all()
        assert (healed[0].f, healed[0].type, healed[0].value) == (
            REQUEST_RELEASE,
            "ok",
            {"nodes": ["n2", "n3"]},
        )
        assert all(proxy.control.status()["rules"] == [] for proxy in proxies.values())
        rows = [NemesisRow(op.index, op.time, op.type, op.f, op.value, op.error) for op in ops]
        windows = fault_windows(nemesis_events(rows))
        assert [(window.kind, window.nodes, window.healed_by) for window in windows] == [
            (REQUEST_HOLD, ("n2",), REQUEST_RELEASE),
            (REQUEST_HOLD, ("n3",), REQUEST_RELEASE),
        ]
    finally:
        recorder.close()
        for proxy in proxies.values():
            assert proxy.stop() == 0


def test_a_cluster_without_proxies_cannot_take_the_fault(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history.jsonl")
    try:
        nemesis = Nemesis(
            NemesisSpec(faults=("kill",)),
            FakeCluster(),
            recorder,
            NemesisConfig(leader_partitions=[("q", 0)]),
        )
        with pytest.raises(PlanError, match="request proxies"):
            nemesis.apply(FaultStep(REQUEST_HOLD, ("n2",)))
    finally:
        recorder.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'requests = ["Fetch"]',
            "requests must be a non-empty list of 'Produce', 'EndTxn', 'EndTxn(commit)', 'EndTxn(abort)',"
            " not ['Fetch']",
        ),
        ('requests = ["EndTxn(maybe)"]', "not ['EndTxn(maybe)']"),
        ("requests = []", "requests must be a non-empty list"),
        ('requests = "EndTxn"', "requests must be a non-empty list"),
    ],
)
def test_a_step_naming_requests_it_cannot_hold_is_refused(tmp_path: Path, extra: str, message: str) -> None:
    from nemesis.scenario import ScenarioError, load_scenario

    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[[step]]\nfault = "request-hold"\nnode = "n1"\n{extra}\n')
    with pytest.raises(ScenarioError, match=re.escape(message)):
        load_scenario(str(path))


def test_only_the_request_faults_take_requests(tmp_path: Path) -> None:
    from nemesis.scenario import ScenarioError, load_scenario

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[[step]]\nfault = "kill"\nnode = "n1"\nrequests = ["EndTxn"]\n')
    with pytest.raises(
        ScenarioError,
        match=re.escape(
            "requests = [...] is for request-hold, request-duplicate, request-reset only, not kill"
        ),
    ):
        load_scenario(str(path))
