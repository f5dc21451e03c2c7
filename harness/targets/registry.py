"""Every target, how a spec picks its target, and the spec checks every command runs.

:data:`REGISTRY` lists the targets; :func:`target_of` picks the one a spec runs on (the first
whose :meth:`~harness.targets.base.Target.claims` says so: ``--bootstrap`` for an external cluster,
else by ``target`` name); :func:`check_spec` refuses, before anything starts, what the spec's
target cannot run -- the one check ``tidemark run``, ``hunt``, ``rerun`` and campaigns share.

**Adding a target** (``nisshi`` is the latest example):

1. write ``harness/targets/nisshi.py``: a subclass of :class:`~harness.targets.base.BaseTarget`
   (named ``"nisshi"``) that implements the rest of :class:`~harness.targets.base.Target` -- its
   spec checks, effective settings, cluster (the cluster class itself lives in ``testbed.cluster``),
   node roles, replica evidence, abilities and image -- and one instance of it;
2. add that instance to :data:`REGISTRY` below.

Its name must also be in :data:`testbed.cluster.targets.TARGETS`, the floor's list of names that
scenario files and ``test.json`` are checked against (the floor cannot import this room);
``tests/testbed/cluster/test_targets.py`` fails until both agree and the new target offers the
whole interface.  Nothing else changes: the runner, the spec and the command line ask the target.
"""

from __future__ import annotations

from typing import Final

from harness.targets.base import SpecRefused, Target, TargetSpec
from harness.targets.bundled import BUNDLED
from harness.targets.external import EXTERNAL_TARGET
from harness.targets.nisshi import NISSHI_TARGET
from harness.targets.tansu import TANSU_TARGET
from testbed.cluster.targets import DEFAULT_TARGET, TARGETS

REGISTRY: Final[tuple[Target, ...]] = (
    EXTERNAL_TARGET,  # first: ``--bootstrap`` on the default target tests an external cluster
    BUNDLED,
    TANSU_TARGET,
    NISSHI_TARGET,
)
"""Every target, asked in this order: the first that claims a spec runs it."""


def named(name: str) -> Target:
    """The target a spec, a scenario or ``tidemark image build --target`` names; KeyError if none."""
    for target in REGISTRY:
        if target.name == name and name in TARGETS:
            return target
    raise KeyError(name)


def find_target(spec: TargetSpec) -> Target | None:
    """The target ``spec`` runs on; None when its ``target`` names none (the spec reports that)."""
    for target in REGISTRY:
        if target.claims(spec):
            return target
    return None


def target_of(spec: TargetSpec) -> Target:
    """The target ``spec`` runs on (a valid spec always has one)."""
    target = find_target(spec)
    if target is None:
        raise SpecRefused(f"target must be one of {', '.join(TARGETS)}, not {spec.target!r}")
    return target


def asked_target(name: str) -> str | None:
    """A spec's ``target`` as a target asked for: None for the default, which a scenario's own
    target replaces (:func:`harness.run.spec.scenario_target`)."""
    return None if name == DEFAULT_TARGET else name


def binary_targets() -> list[str]:
    """The names of the targets with a binary built outside their image (``--binary-only``)."""
    return [target.name for target in REGISTRY if target.builds_binary]


def check_spec(spec: TargetSpec) -> None:
    """Refuse (:class:`SpecRefused`, one line) what ``spec``'s target cannot run, before anything
    starts: the target's own checks, then the named single faults and fault packages that cannot
    apply to its cluster (refused inside the run otherwise, with a traceback, once per run of a
    hunt).  Pure: reads the spec (and an inventory file it names), not the machine -- a campaign
    plans with it."""
    target = target_of(spec)
    target.check(spec)
    check_fault_abilities(spec, target)
    check_nemesis_packages(spec, target)


def check_fault_abilities(spec: TargetSpec, target: Target) -> None:
    """Refuse a named single fault that needs an ability (:data:`nemesis.fault_declaration.ABILITIES`
    with a protocol: :data:`nemesis.nemesis_config.ABILITY_PROTOCOLS`) the target's clusters never
    offer -- ``--nemesis controller-kill`` on tansu, whose metadata is in PostgreSQL.  The kinds'
    ``needs`` say it once; the nemesis checks the same against the running cluster.  Not the
    request proxy: a container target puts one before each broker when a fault wants it
    (:func:`harness.targets.base.wants_request_proxies`), so no target offers it standing."""
    from nemesis.fault_declaration import REQUEST_PROXY
    from nemesis.fault_kinds import REGISTRY
    from nemesis.nemesis_config import ABILITY_MISSING, ABILITY_PROTOCOLS

    for fault in spec.nemesis.faults:
        needs = REGISTRY[fault].needs if fault in REGISTRY else frozenset()
        for ability in sorted(needs & set(ABILITY_PROTOCOLS) - {REQUEST_PROXY}):
            if not target.offers(ABILITY_PROTOCOLS[ability]):
                raise SpecRefused(
                    f"--nemesis {fault} needs {ABILITY_MISSING[ability]}: the {target.name} target has none"
                )


def check_ready(spec: TargetSpec) -> None:
    """Refuse (:class:`SpecRefused`) when this machine cannot start ``spec``'s target yet (e.g. a
    binary not built): asked after :func:`check_spec`, before the first run starts."""
    target_of(spec).check_ready(spec)


def check_nemesis_packages(spec: TargetSpec, target: Target) -> None:
    """Refuse a named fault package that cannot apply to ``spec``'s cluster (where the target
    knows it before it starts: :meth:`~harness.targets.base.Target.package_context`)."""
    from nemesis.packages import PackageError, check_packages
    from nemesis.spec import PACKAGE_KINDS

    context = target.package_context(spec)
    named_packages = tuple(name for name in spec.nemesis.faults if name in PACKAGE_KINDS)
    if context is None or not named_packages:
        return
    try:
        check_packages(named_packages, context)
    except PackageError as error:
        raise SpecRefused(f"--nemesis: {error}") from None
