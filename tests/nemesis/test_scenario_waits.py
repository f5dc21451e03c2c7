"""A wait that is not required: the system's decision recorded, the steps going on; the step
keys that say so (``required``, ``controlled``) refused where they mean nothing; and
``request-held``, on a fake cluster's request proxies."""

from __future__ import annotations

from typing import Any

import pytest

import nemesis.scenario_run as scenario_run_module
from nemesis.scenario import ScenarioFailed, parse_scenario
from nemesis.scenario_run import ScenarioContext, ScenarioRun
from testbed.cluster.request_proxy.control import ProxyControlError, ProxyRefused

from .test_scenario_parse import INFO, SOURCE, FakeCluster, FakeNemesis, parse_error, scenario_data


def run(
    *steps: dict[str, object], monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster | None = None
) -> tuple[ScenarioRun, FakeNemesis]:
    monkeypatch.setattr(scenario_run_module, "_partition_info", lambda bootstrap, topic, partition: INFO)
    nemesis = FakeNemesis()
    context = ScenarioContext(cluster or FakeCluster(), nemesis, None, "queue", lambda line: None)  # type: ignore[arg-type]
    scenario_run = ScenarioRun(parse_scenario(scenario_data(*steps), SOURCE), context)
    scenario_run.run()
    return scenario_run, nemesis


def test_a_wait_not_required_that_times_out_is_recorded_and_the_steps_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n2 leads in the planted view: "leader-is n1" never holds.
    done, nemesis = run(
        {"wait": "leader-is", "node": "n1", "timeout": 0.2, "required": False},
        {"fault": "kill", "node": "n1"},
        {"wait": "leader-is", "node": "n2", "timeout": 0.2, "required": False},
        monkeypatch=monkeypatch,
    )
    assert nemesis.calls == [("kill", ["n1"])]
    assert done.unmet == [f"{SOURCE}: step 1: timed out after 0.2 s waiting for leader-is n1 (partition 0)"]


def test_a_required_wait_still_stops_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ScenarioFailed, match=r"step 1: timed out after 0\.2 s waiting for leader-is n1"):
        run(
            {"wait": "leader-is", "node": "n1", "timeout": 0.2, "required": True},
            {"fault": "kill", "node": "n1"},
            monkeypatch=monkeypatch,
        )


def test_required_is_a_wait_s_true_or_false_and_controlled_a_shutdown_s() -> None:
    assert "required = true|false is for a wait only, not 'no'" in parse_error(
        scenario_data({"wait": "leader-is", "node": "n1", "required": "no"})
    )
    assert "required = true|false is for a wait only" in parse_error(
        scenario_data({"fault": "kill", "node": "n1", "required": False})
    )
    assert "controlled = true|false is for shutdown only, not kill = False" in parse_error(
        scenario_data({"fault": "kill", "node": "n1", "controlled": False})
    )
    assert "not shutdown = 'no'" in parse_error(
        scenario_data({"fault": "shutdown", "node": "n1", "controlled": "no"})
    )
    parsed = parse_scenario(scenario_data({"fault": "shutdown", "node": "n1", "controlled": False}), SOURCE)
    assert parsed.parsed_steps[0].controlled is False  # type: ignore[union-attr]


class ScriptedProxy:
    """A proxy's control channel whose ``status`` answers from a script (the last answer
    repeats): a number of held requests, or an exception to raise."""

    def __init__(self, script: list[int | Exception]) -> None:
        self.script = script
        self.asked = 0

    def status(self) -> dict[str, Any]:
        self.asked += 1
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, Exception):
            raise answer
        return {"held": [{"api_key": 26}] * answer, "rules": []}


class ProxiedCluster(FakeCluster):
    """A fake cluster with the RequestProxies ability; ``n3`` is not a broker (no proxy)."""

    def __init__(self, proxies: dict[str, ScriptedProxy]) -> None:
        super().__init__()
        self.proxies = proxies

    def request_proxy(self, node: str) -> ScriptedProxy:
        if node not in self.proxies:
            raise ValueError(f"{node} runs PostgreSQL, not a broker: it has no request proxy")
        return self.proxies[node]


def test_request_held_without_a_node_waits_until_any_broker_s_proxy_holds_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n1's proxy is down a while (its broker restarting) and never holds; n2 holds on its third answer.
    n1 = ScriptedProxy([ProxyRefused("proxy control n1: refused"), ProxyControlError("no reply"), 0])
    n2 = ScriptedProxy([0, 0, 1])
    done, nemesis = run(
        {"wait": "request-held", "timeout": 5, "required": False},
        {"fault": "request-release"},
        monkeypatch=monkeypatch,
        cluster=ProxiedCluster({"n1": n1, "n2": n2}),
    )
    assert (n1.asked, n2.asked) == (3, 3)
    assert done.unmet == []
    assert nemesis.calls == [("request-release", [])]


def test_request_held_on_a_node_asks_that_proxy_only_and_times_out_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    elsewhere = ScriptedProxy([1])
    with pytest.raises(
        ScenarioFailed, match=r"step 1: timed out after 0\.2 s waiting for a request held by the proxy of n1$"
    ):
        run(
            {"wait": "request-held", "node": "n1", "timeout": 0.2},
            monkeypatch=monkeypatch,
            cluster=ProxiedCluster({"n1": ScriptedProxy([0]), "n2": elsewhere}),
        )
    assert elsewhere.asked == 0
    with pytest.raises(ScenarioFailed, match="wait request-held: this cluster has no request proxies"):
        run({"wait": "request-held"}, monkeypatch=monkeypatch)
    with pytest.raises(ScenarioFailed, match=r"timed out .* the proxy of n1 or n2 or n3$"):
        run({"wait": "request-held", "timeout": 0.2}, monkeypatch=monkeypatch, cluster=ProxiedCluster({}))


def test_request_held_is_the_one_wait_that_may_name_a_node_or_not() -> None:
    parse_scenario(scenario_data({"wait": "request-held"}), SOURCE)
    parse_scenario(scenario_data({"wait": "request-held", "node": "leader-of:transactions"}), SOURCE)
    assert parse_error(scenario_data({"wait": "in-isr"})) == f"{SOURCE}: step 1: wait in-isr needs node"
