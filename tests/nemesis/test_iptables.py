"""Grudge -> iptables scripts: their text (pure), and what they do to real traffic between network namespaces."""

from __future__ import annotations

import shlex

import pytest

from nemesis import iptables
from nemesis.plan import complete_grudge, isolate
from tests.nemesis.netns import NetnsCluster

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
    "script",
    [
        iptables.partition_script(["10.0.0.2"]),
        iptables.heal_script(),
        iptables.remove_script(),
        iptables.metadata_delay_script("10.0.0.4"),
        iptables.metadata_heal_script(),
    ],
    ids=["partition", "heal", "remove", "metadata-delay", "metadata-heal"],
)
def test_no_script_changes_any_rule_outside_the_nemesis_chains(script: str) -> None:
    for argv in iptables_argvs(script):
        assert argv[:3] == ["iptables", "-w", "10"]
        action, chain = argv[3], argv[4]
        if chain == "INPUT":
            # Reading INPUT, or managing the single jump into one of our chains: nothing else in INPUT.
            assert action == "-S" or (argv[-2] == "-j" and argv[-1] in iptables.CHAINS), argv
        else:
            assert chain in iptables.CHAINS, argv


def chains_written(script: str) -> set[str]:
    """The chains ``script`` creates, fills, flushes or deletes (reads with -S/-C do not count)."""
    return {
        argv[-1] if argv[4] == "INPUT" else argv[4]
        for argv in iptables_argvs(script)
        if argv[3] not in ("-S", "-C")
    }


def test_metadata_delay_drops_only_the_controller_in_its_own_chain() -> None:
    script = iptables.metadata_delay_script("10.9.0.4")
    assert script == iptables.partition_script(["10.9.0.4"], iptables.METADATA_CHAIN)
    argvs = iptables_argvs(script)
    assert [argv for argv in argvs if "-A" in argv] == [
        ["iptables", "-w", "10", "-A", "TIDEMARK-META", "-s", "10.9.0.4/32", "-j", "DROP"]
    ]
    assert ["iptables", "-w", "10", "-I", "INPUT", "1", "-j", "TIDEMARK-META"] in argvs
    assert chains_written(script) == {"TIDEMARK-META"}, "a metadata delay never touches the partition chain"
    with pytest.raises(ValueError, match="is IPv6"):
        iptables.metadata_delay_script("fd00::4")


def test_each_heal_flushes_its_own_chain_and_remove_deletes_both() -> None:
    assert chains_written(iptables.heal_script()) == {"TIDEMARK"}, "a partition heal leaves the delay"
    assert chains_written(iptables.partition_script(["10.0.0.2"])) == {"TIDEMARK"}
    assert chains_written(iptables.metadata_heal_script()) == {"TIDEMARK-META"}, "and the other way round"
    remove = iptables_argvs(iptables.remove_script())
    for chain in ("TIDEMARK", "TIDEMARK-META"):
        assert ["iptables", "-w", "10", "-F", chain] in remove
        assert ["iptables", "-w", "10", "-D", "INPUT", "-j", chain] in remove
        assert ["iptables", "-w", "10", "-X", chain] in remove
    assert chains_written(iptables.remove_script(["TIDEMARK"])) == {"TIDEMARK"}


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
def cluster(netns: NetnsCluster) -> NetnsCluster:
    return netns


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


def test_the_metadata_chain_drops_the_controller_only_and_outlives_partition_heals(
    cluster: NetnsCluster,
) -> None:
    """The controller "c" runs no echo server here, so the probe goes the other way: from c to a
    broker. A broker dropping c's packets never answers c's handshake; brokers still reach it."""
    brokers = ["n1", "n2", "n3"]
    cluster.wait_for(lambda: all(connectivity(cluster, brokers).values()), "full connectivity")
    before = {node: rules(cluster, node) for node in [*brokers, "c"]}

    cluster.remote("n1").exec(iptables.metadata_delay_script(cluster.ip("c")), timeout=10)
    assert not cluster.reachable("c", "n1") and cluster.reachable("c", "n2")
    assert all(connectivity(cluster, brokers).values()), "replication traffic is untouched"

    # A partition and its heal come and go; the metadata delay stays.
    apply(cluster, iptables.partition_scripts(isolate(brokers, "n3"), cluster.ip))
    assert not cluster.reachable("n1", "n3") and not cluster.reachable("c", "n1")
    apply(cluster, {node: iptables.heal_script() for node in brokers})
    cluster.wait_for(lambda: all(connectivity(cluster, brokers).values()), "connectivity after the heal")
    assert not cluster.reachable("c", "n1"), "a partition heal does not undo a metadata delay"

    # And the metadata heal leaves a partition in place.
    apply(cluster, iptables.partition_scripts(isolate(brokers, "n3"), cluster.ip))
    cluster.remote("n1").exec(iptables.metadata_heal_script(), timeout=10)
    cluster.wait_for(
        lambda: cluster.reachable("c", "n1"), "the controller reaches n1 after the metadata heal"
    )
    assert not cluster.reachable("n1", "n3"), "a metadata heal does not undo a partition"

    cluster.remote("n1").exec(iptables.metadata_delay_script(cluster.ip("c")), timeout=10)
    apply(cluster, {node: iptables.remove_script() for node in [*brokers, "c"]})
    cluster.wait_for(lambda: cluster.reachable("c", "n1"), "the controller reaches n1 after removal")
    assert {node: rules(cluster, node) for node in [*brokers, "c"]} == before, "both chains removed"
