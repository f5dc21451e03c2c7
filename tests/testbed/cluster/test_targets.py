"""Every registered target offers the whole :class:`harness.targets.base.Target` interface, says
what it offers without starting a cluster, and a spec picks exactly the target it always ran on."""

from __future__ import annotations

import inspect

import pytest

from harness.run.spec import TestSpec
from harness.targets.base import BaseTarget, SpecRefused, Target
from harness.targets.registry import REGISTRY, asked_target, binary_targets, named, target_of
from testbed.cluster import protocol
from testbed.cluster.bundled import BundledCluster
from testbed.cluster.external import ExternalCluster
from testbed.cluster.nisshi import NisshiCluster, NisshiSqliteCluster
from testbed.cluster.tansu import TansuCluster
from testbed.cluster.targets import DEFAULT_TARGET, TARGETS
from workloads.queue import QueueSpec

INTERFACE = sorted(name for name in vars(Target) if not name.startswith("_"))
"""Every member the protocol declares: properties and methods."""
ABILITIES = (
    protocol.NodeControl,
    protocol.ReplicaDumps,
    protocol.LiveReplicas,
    protocol.ReplicaNodes,
    protocol.LogFiles,
    protocol.PowerLoss,
    protocol.DiskFaults,
    protocol.ControllerProcess,
)
CLUSTER_CLASSES: dict[str, tuple[type, ...]] = {
    "bundled": (BundledCluster,),
    "tansu": (TansuCluster,),
    "nisshi": (NisshiCluster, NisshiSqliteCluster),
    "external": (ExternalCluster,),
}
"""The cluster classes each target starts (a new target adds its own here); its abilities are what
one of them offers at best."""


def test_the_interface_is_what_the_docs_promise() -> None:
    assert {"check", "check_ready", "effective_settings", "cluster", "node_roles", "abilities"} <= set(
        INTERFACE
    )


@pytest.mark.parametrize("target", REGISTRY, ids=lambda target: target.name)
def test_every_registered_target_offers_the_full_interface(target: Target) -> None:
    assert isinstance(target, Target)
    for member in INTERFACE:
        declared = inspect.getattr_static(Target, member)
        offered = getattr(target, member)
        if isinstance(declared, property):
            assert not callable(offered), f"{target.name}.{member} is a method, not a property"
            continue
        assert callable(offered), f"{target.name}.{member} is not a method"
        assert (
            list(inspect.signature(offered).parameters) == list(inspect.signature(declared).parameters)[1:]
        ), f"{target.name}.{member}: parameters differ from the protocol's"
    assert target.name and target.abilities <= set(ABILITIES)


@pytest.mark.parametrize("target", REGISTRY, ids=lambda target: target.name)
def test_the_abilities_a_target_names_are_those_its_cluster_class_has(target: Target) -> None:
    for ability in ABILITIES:
        members = [name for name in vars(ability) if not name.startswith("_")]
        has_them = any(
            all(hasattr(cluster_class, name) for name in members)
            for cluster_class in CLUSTER_CLASSES[target.name]
        )
        assert target.offers(ability) == has_them, f"{target.name}: {ability.__name__}"


def test_abilities_are_answered_without_a_cluster() -> None:
    bundled, tansu, external = named("bundled"), named("tansu"), target_of(TestSpec(bootstrap="h:9092"))
    assert bundled.offers(protocol.PowerLoss) and tansu.offers(protocol.PowerLoss)
    assert not external.offers(protocol.PowerLoss) and not external.offers(protocol.ReplicaDumps)
    assert tansu.offers(protocol.ReplicaNodes) and not bundled.offers(protocol.ReplicaNodes)
    assert bundled.offers(protocol.LiveReplicas) and not tansu.offers(protocol.LiveReplicas)
    assert bundled.offers(protocol.ControllerProcess) and not tansu.offers(protocol.ControllerProcess)
    assert [target.name for target in REGISTRY if target.event_logs] == ["bundled"]


def test_the_registry_names_the_targets_the_floor_knows_and_the_external_one() -> None:
    assert sorted(target.name for target in REGISTRY) == sorted([*TARGETS, "external"])
    assert [named(name).name for name in TARGETS] == list(TARGETS)
    with pytest.raises(KeyError):
        named("external")  # picked by --bootstrap, never named
    assert binary_targets() == ["tansu", "nisshi"]
    assert asked_target(DEFAULT_TARGET) is None and asked_target("tansu") == "tansu"
    assert all(isinstance(target, BaseTarget) for target in REGISTRY)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (TestSpec(), "bundled"),
        (TestSpec(target="tansu"), "tansu"),
        (TestSpec(bootstrap="h:9092"), "external"),
        (TestSpec(target="tansu", bootstrap="h:9092"), "tansu"),  # which refuses it
    ],
)
def test_a_spec_runs_on_the_target_it_always_did(spec: TestSpec, expected: str) -> None:
    assert target_of(spec).name == expected
    assert spec.target_object() is target_of(spec)


def test_node_roles_and_replica_evidence_are_known_before_the_cluster_starts() -> None:
    bundled = TestSpec(node_count=3)
    assert bundled.target_object().node_roles(bundled) == {
        "n1": "broker",
        "n2": "broker",
        "n3": "broker",
        "controller": "controller",
    }
    assert bundled.target_object().replica_nodes(bundled) == ["n1", "n2", "n3"]
    tansu = TestSpec(target="tansu", node_count=2, workload=QueueSpec(replication_factor=1))
    assert tansu.target_object().node_roles(tansu) == {"n1": "broker", "n2": "broker", "pg": "postgresql"}
    assert tansu.target_object().replica_nodes(tansu) == ["pg"]
    assert tansu.target_object().replica_evidence(tansu).startswith("single-store")
    external = TestSpec(bootstrap="h:9092", workload=QueueSpec(replication_factor=5))  # not sized by us
    assert external.target_object().node_roles(external) == {}
    assert external.target_object().replica_evidence(external).startswith("none")


def test_only_the_bundled_target_knows_its_package_context_before_it_starts() -> None:
    assert TestSpec().package_context() is not None
    assert TestSpec(target="tansu").package_context() is None
    assert TestSpec(bootstrap="h:9092").package_context() is None


def test_an_image_option_a_target_cannot_take_is_refused() -> None:
    with pytest.raises(SpecRefused, match="no --base-image"):
        named("tansu").check_image_options(base_image="python:3.11-slim")
    named("bundled").check_image_options(base_image="python:3.11-slim")
    with pytest.raises(SpecRefused):
        named("bundled").build_binary(print)
