"""Grudge -> iptables scripts: their text (pure), and what they do to real traffic between network namespaces."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from nemesis import iptables
from nemesis.plan import complete_grudge, isolate
from tests.nemesis.netns import NetnsCluster, namespaces_available

# --------------------------------------------------------------------------- pure


def iptables_argvs(script: str) -> list[list[str]]:
    """Every iptables invocation in ``script``, as argv."""
    argvs: list[list[str]] = []
    for line in script.splitlines():
        words = shlex.split(line.replace(";", " ; ").replace("||", " || "))
        for position, word in enumerate(words):
            if word == "iptables":
                argv = [word]
                for following in words[position + 1 :]:
                    if following in (";", "||", "then", "fi", "do", "done") or following.startswith(
                        ("2>", ">")
                    ):
                        break
                    argv.append(following)
                argvs.append(argv)
    return argvs


def test_partition_script_creates_hooks_empties_and_fills_only_its_own_chain() -> None:
    script = iptables.partition_script(["10.0.0.3", "10.0.0.2", "10.0.0.3"])
    assert script.startswith("set -eu\n")
    argvs = iptables_argvs(script)
    drops = [argv for argv in argvs if "-A" in argv]
    assert drops == [
        ["iptables", "-w", "10", "-A", "TIDEMARK", "-s", "10.0.0.2/32", "-j", "DROP"],
        ["iptables", "-w", "10", "-A", "TIDEMARK", "-s", "10.0.0.3/32", "-j", "DROP"],
    ], "one DROP per distinct source, sorted"
    assert ["iptables", "-w", "10", "-F", "TIDEMARK"] in argvs, "a new partition replaces the old one"
    assert ["iptables", "-w", "10", "-I", "INPUT", "1", "-j", "TIDEMARK"] in argvs


@pytest.mark.parametrize(
    "script", [iptables.partition_script(["10.0.0.2"]), iptables.heal_script(), iptables.remove_script()]
)
def test_no_script_changes_any_rule_outside_the_nemesis_chain(script: str) -> None:
    for argv in iptables_argvs(script):
        assert argv[:3] == ["iptables", "-w", "10"]
        action, chain = argv[3], argv[4]
        if chain == "INPUT":
            # Reading INPUT, or managing the single jump into our chain: nothing else in INPUT.
            assert action == "-S" or argv[-2:] == ["-j", "TIDEMARK"], argv
        else:
            assert chain == "TIDEMARK", argv


def test_partition_scripts_cover_every_node_and_name_bad_addresses() -> None:
    addresses = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
    scripts = iptables.partition_scripts(
        {**isolate(["n1", "n2"], "n1"), "n3": frozenset()}, addresses.__getitem__
    )
    assert set(scripts) == {"n1", "n2", "n3"}
    assert "10.0.0.2/32" in scripts["n1"] and "10.0.0.1/32" in scripts["n2"]
    assert "DROP" not in scripts["n3"] and "-F TIDEMARK" in scripts["n3"], "an untouched node is emptied"
    with pytest.raises(ValueError, match="address of node n2: 'fd00::2' is IPv6"):
        iptables.partition_scripts(
            isolate(["n1", "n2"], "n1"), {"n1": "10.0.0.1", "n2": "fd00::2"}.__getitem__
        )
    with pytest.raises(ValueError, match=r"address of node n1: 'n1\.local' is not an IP address"):
        iptables.partition_scripts(
            isolate(["n1", "n2"], "n1"), {"n1": "n1.local", "n2": "10.0.0.2"}.__getitem__
        )


# --------------------------------------------------------------------------- real: network namespaces


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    problem = namespaces_available()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    with NetnsCluster(tmp_path) as made:
        yield made
    assert made.leftovers() == [], "namespaces left behind"


def apply(cluster: NetnsCluster, scripts: dict[str, str]) -> None:
    for node, text in scripts.items():
        cluster.remote(node).exec(text, timeout=10)


def connectivity(cluster: NetnsCluster, nodes: list[str]) -> dict[tuple[str, str], bool]:
    return {(a, b): cluster.reachable(a, b) for a in nodes for b in nodes if a != b}


def rules(cluster: NetnsCluster, node: str) -> str:
    return cluster.remote(node).exec(["iptables", "-S"], timeout=10).stdout_text


def test_a_partition_drops_traffic_and_heal_restores_it_without_touching_other_rules(
    cluster: NetnsCluster,
) -> None:
    brokers = ["n1", "n2", "n3"]
    cluster.wait_for(
        lambda: all(connectivity(cluster, brokers).values()), "full connectivity before any fault"
    )
    # A rule someone else owns, which the nemesis must leave alone.
    cluster.remote("n2").exec(
        ["iptables", "-A", "INPUT", "-p", "udp", "--dport", "9", "-j", "ACCEPT"], timeout=10
    )
    before = {node: rules(cluster, node) for node in brokers}

    apply(cluster, iptables.partition_scripts(isolate(brokers, "n1"), cluster.ip))
    cut = connectivity(cluster, brokers)
    assert cut == {(a, b): "n1" not in (a, b) for a, b in cut}, cut

    # Applying another partition replaces the first: now n3 is alone and n1 talks to n2 again.
    apply(cluster, iptables.partition_scripts(complete_grudge([["n1", "n2"], ["n3"]]), cluster.ip))
    cut = connectivity(cluster, brokers)
    assert cut == {(a, b): "n3" not in (a, b) for a, b in cut}, cut

    for _ in range(2):  # heal is idempotent
        apply(cluster, {node: iptables.heal_script() for node in brokers})
    cluster.wait_for(
        lambda: all(connectivity(cluster, brokers).values()), "connectivity after heal", timeout=5
    )
    assert "-A INPUT -p udp -m udp --dport 9 -j ACCEPT" in rules(cluster, "n2")

    for _ in range(2):  # removal is idempotent and leaves each node exactly as it was
        apply(cluster, {node: iptables.remove_script() for node in brokers})
    assert {node: rules(cluster, node) for node in brokers} == before


def test_heal_and_remove_work_on_a_node_never_partitioned(cluster: NetnsCluster) -> None:
    before = rules(cluster, "c")
    cluster.remote("c").exec(iptables.heal_script(), timeout=10)
    cluster.remote("c").exec(iptables.remove_script(), timeout=10)
    assert rules(cluster, "c") == before
