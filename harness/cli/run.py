"""``tidemark run``: one test against the bundled broker in Docker (or a scenario).

Examples::

    tidemark run --time-limit 30 --nemesis kill,partition --nemesis-interval 10
    tidemark run --set truncation.mode=high-watermark --set flush.messages=1 --seed 7
    tidemark run --scenario kip101-loss --set truncation.mode=high-watermark
    tidemark run --scenario tansu-pg-power-loss --set postgresql.fsync=off   # the scenario's target: tansu

Prints the run directory, a live progress line, and the verdict; exit codes as
``tidemark check`` (0 valid, 1 invalid, 2 unknown, 254 bad arguments, 255 internal).

With ``--bootstrap`` the cluster is probed before the run starts
(:mod:`testbed.cluster.external_probe`): a malformed address, or partitions or a
replication factor the cluster refuses, exits 254; an unreachable cluster, one that does
not speak Kafka or a version the clients can use, or refuses the topic, exits 2 (unknown:
nothing was tested).  Either is one line on stderr naming the address, and no run
directory is created.  A set-up that fails after the probe passed (a leftover topic of
another shape; with ``--inventory``, brokers that do not answer once started) is one
line and exit 2 as well, its run directory kept as far as it got.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from checker.definitions import DEFAULT_LIVENESS, Liveness
from harness.cli.check import add_liveness_options, liveness_settings
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_UNKNOWN, verdict_exit_code
from harness.run.runner import RunOutcome, run_test
from harness.run.spec import DEFAULT_TARGET, TARGETS, SpecError, TestSpec, scenario_target
from nemesis.scenario import ScenarioError, load_scenario
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from testbed.record.rundir import RunDir
from workloads.queue import QueueSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", default=None, help="test name (store/<name>/...); default: workload or scenario"
    )
    parser.add_argument("--workload", default="queue", choices=("queue",))
    parser.add_argument(
        "--scenario", metavar="NAME_OR_FILE", help="run a scripted scenario instead of the random nemesis"
    )
    parser.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--nodes", type=int, default=3, help="brokers (plus one controller)")
    parser.add_argument(
        "--nemesis", default="", metavar="FAULTS", help="comma-separated: " + ",".join(NEMESIS_CHOICES)
    )
    parser.add_argument("--nemesis-interval", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument(
        "--nemesis-targets",
        default=None,
        metavar="LIST",
        help="comma-separated: one,minority,majority,all,leader,followers",
    )
    parser.add_argument(
        "--partition-scope",
        choices=("brokers", "all"),
        default="brokers",
        help="partitions between brokers only, or including the controller",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="broker/controller setting"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", default="store", metavar="DIR")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second over all producers")
    parser.add_argument("--acks", default="all", choices=("0", "1", "all"))
    parser.add_argument("--client", default="kafka-python", choices=("kafka-python", "confluent-kafka"))
    parser.add_argument(
        "--isolation",
        default="read_committed",
        choices=("read_committed", "read_uncommitted"),
        help="what consumers and the drain read; without transactions both see the same records, "
        "but a broker answers the drain's end-offset query differently (the last stable offset or the HW)",
    )
    parser.add_argument(
        "--consume-via",
        default="assign",
        choices=("assign", "subscribe"),
        help="consumers assign() a share of the partitions each, or all subscribe() in one consumer "
        "group with rebalances and commits recorded (Jepsen's --sub-via; docs/consumer-groups.md)",
    )
    parser.add_argument(
        "--commit",
        default=None,
        choices=("sync", "async", "auto"),
        help="with --consume-via subscribe: commit after each poll and wait (sync, the default), "
        "without waiting (async), or leave it to the client's auto-commit (auto)",
    )
    parser.add_argument(
        "--transport",
        default="docker",
        choices=("docker", "ssh"),
        help="reach the nodes by docker exec or over SSH (the containers run sshd)",
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT,...",
        help="test an external Kafka-compatible cluster instead of the bundled broker in Docker",
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        help="with --bootstrap: SSH inventory of the broker nodes, so faults can be injected",
    )
    parser.add_argument(
        "--target",
        default=None,
        choices=TARGETS,
        help="what to start in Docker: the bundled broker, or tansu brokers sharing one PostgreSQL node "
        "'pg' (needs `tidemark image build --target tansu` once: a cargo build, 15-25 min); default: "
        f"the scenario's target, else {DEFAULT_TARGET}; refused when it differs from the scenario's",
    )
    parser.add_argument("--engine", default="pandas", choices=("pandas", "spark"), help="checker engine")
    add_liveness_options(parser)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings


def spec_from_arguments(args: argparse.Namespace) -> TestSpec:
    from nemesis.spec import NEMESIS_CHOICES, NemesisSpecError, parse_name_list

    try:
        faults = parse_name_list(args.nemesis, NEMESIS_CHOICES, "--nemesis") if args.nemesis else ()
    except NemesisSpecError as error:
        raise UsageError(str(error)) from None
    targets = tuple(t for t in args.nemesis_targets.split(",") if t) if args.nemesis_targets else None
    try:
        workload = QueueSpec(
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            producers=args.producers,
            consumers=args.consumers,
            rate=args.rate,
            acks=args.acks,
            client=args.client,
            consume_via=args.consume_via,
            commit=args.commit,
            isolation=args.isolation,
        )
        nemesis = NemesisSpec(
            faults=faults,
            interval_seconds=args.nemesis_interval,
            targets=targets,
            partition_scope=args.partition_scope,
            seed=args.seed,
        )
        return TestSpec(
            name=args.name or (args.scenario or args.workload),
            node_count=args.nodes,
            time_limit=args.time_limit,
            seed=args.seed,
            settings=parse_settings(args.set),
            workload=workload,
            nemesis=nemesis,
            scenario=args.scenario,
            transport=args.transport,
            bootstrap=args.bootstrap,
            inventory=args.inventory,
            target=args.target or DEFAULT_TARGET,
        )
    except (SpecError, ValueError) as error:
        raise UsageError(str(error)) from None


def check_spec(spec: TestSpec) -> None:
    """Refuse, as a usage error, what cannot run (before any container starts)."""
    from testbed.cluster.bundled import SettingsError, split_settings

    if spec.target == "tansu":
        check_tansu_spec(spec)
        return
    if spec.inventory and not spec.bootstrap:
        raise UsageError("--inventory needs --bootstrap")
    if spec.bootstrap is not None:
        from testbed.cluster.external_probe import BootstrapAddressError, parse_bootstrap

        try:
            parse_bootstrap(spec.bootstrap)
        except BootstrapAddressError as error:
            raise UsageError(str(error)) from None
    if spec.bootstrap and spec.power_loss_filesystem:
        raise UsageError(
            "power-loss needs the bundled broker's lazy filesystem: not available with --bootstrap"
        )
    if spec.bootstrap and not spec.inventory and spec.scenario:
        raise UsageError("a scenario against an external cluster needs --inventory (SSH access to its nodes)")
    if spec.bootstrap and not spec.inventory and spec.nemesis.faults:
        raise UsageError("faults against an external cluster need --inventory (SSH access to its nodes)")
    if spec.inventory:
        from testbed.cluster.external import InventoryError, load_inventory

        try:
            load_inventory(Path(spec.inventory))
        except InventoryError as error:
            raise UsageError(str(error)) from None
    try:
        split_settings(spec.settings)
    except SettingsError as error:
        raise UsageError(str(error)) from None
    check_nemesis_packages(spec)


def check_nemesis_packages(spec: TestSpec) -> None:
    """Refuse a named fault package that cannot apply to the spec's cluster, before it starts
    (it was refused inside the run, with a traceback, once per run of a hunt)."""
    from nemesis.packages import PackageError, check_packages
    from nemesis.spec import PACKAGE_KINDS

    context = spec.package_context()
    named = tuple(name for name in spec.nemesis.faults if name in PACKAGE_KINDS)
    if context is None or not named:
        return
    try:
        check_packages(named, context)
    except PackageError as error:
        raise UsageError(f"--nemesis: {error}") from None


def check_tansu_spec(spec: TestSpec) -> None:
    """What ``--target tansu`` cannot do, refused in one line each (see ``testbed.cluster.tansu``)."""
    from nemesis.spec import METADATA_DELAY
    from testbed.cluster.postgres import SettingsError, effective_settings
    from testbed.cluster.tansu_image import cached_binary

    if spec.bootstrap or spec.inventory:
        raise UsageError(
            "--target tansu starts its own brokers and PostgreSQL: not with --bootstrap/--inventory"
        )
    if METADATA_DELAY in spec.nemesis.injected_faults() | spec.scenario_faults():
        raise UsageError(
            f"--nemesis {METADATA_DELAY} cuts brokers off a controller node; tansu keeps its metadata in "
            "PostgreSQL (node pg): partition it instead"
        )
    if spec.nemesis.partition_scope == "all":
        raise UsageError(
            "--partition-scope all: with --target tansu partitions always include the PostgreSQL node"
        )
    try:
        effective_settings(spec.settings)
    except SettingsError as error:
        raise UsageError(str(error)) from None
    if cached_binary() is None:
        raise UsageError(
            "--target tansu: the tansu binary is not built yet; run `tidemark image build --target tansu` "
            "once (a cargo build, 15-25 min)"
        )


def report_outcome(spec: TestSpec, outcome: RunOutcome) -> int:
    """Print the verdict (and, for a scenario, whether it is the expected one); the exit code."""
    results = outcome.results
    if results is None:
        print(f"verdict: not checked ({'; '.join(outcome.problems)})")
        return verdict_exit_code(None)
    word = {True: "valid", False: "INVALID", "unknown": "unknown"}[results["valid"]]
    print(f"verdict: {word}")
    for name, anomaly in results["anomalies"].items():
        note = f"  (expected: {anomaly['rule']})" if anomaly["expected"] else ""
        print(f"  {name} x{anomaly['count']}{note}")
    for reason in results.get("incomplete", []):
        print(f"  incomplete: {reason}")
    for name, why in results.get("not_applicable", {}).items():
        print(f"  not applicable: {name} ({why})")
    print(f"results: {RunDir(outcome.run_dir).results}")
    problems = spec.scenario_problems(results)
    if problems is not None:
        print(
            f"scenario {spec.scenario}: "
            + ("as expected" if not problems else "NOT as expected: " + "; ".join(problems))
        )
    return verdict_exit_code(outcome.verdict)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_arguments(args)
    if spec.scenario is not None:
        try:
            scenario = load_scenario(spec.scenario)
            target = scenario_target(args.target, scenario, "--target")
            spec = dataclasses.replace(spec, target=target).with_scenario(scenario)
        except (ScenarioError, SpecError, ValueError) as error:
            raise UsageError(str(error)) from None
    check_spec(spec)
    return run_and_report(spec, Path(args.store), args.engine, liveness_settings(args))


def run_and_report(spec: TestSpec, store: Path, engine: str, liveness: Liveness = DEFAULT_LIVENESS) -> int:
    """Run ``spec`` and report its verdict; the exit code.

    An external cluster is probed first; one that cannot be tested is a single line on
    stderr and exit 2 (254 when the arguments do not fit it), not a traceback.
    """
    if spec.bootstrap is None:
        outcome = run_test(spec, store, engine=engine, out=sys.stderr, liveness=liveness)
        return report_outcome(spec, outcome)
    from testbed.cluster.external_probe import ExternalClusterError
    from testbed.cluster.kafka_admin import ClusterUnavailable

    code = probe_external(spec)
    if code is not None:
        return code
    try:
        outcome = run_test(spec, store, engine=engine, out=sys.stderr, liveness=liveness)
    except ExternalClusterError as error:  # with an inventory: its brokers, once started
        return cannot_test(str(error))
    except (ClusterUnavailable, TimeoutError) as error:  # set-up failed after the probe passed
        return cannot_test(f"--bootstrap {spec.bootstrap}: {error}")
    return report_outcome(spec, outcome)


def probe_external(spec: TestSpec) -> int | None:
    """Probe ``spec``'s external cluster before anything runs: None when it can be tested, else
    the exit code after one line on stderr (:class:`UsageError` when the arguments do not fit)."""
    from testbed.cluster.external_probe import ClusterMismatch, ExternalClusterError, probe_cluster

    if spec.bootstrap is None or spec.inventory:  # with one, probed once the harness started them
        return None
    try:
        probe_cluster(spec.bootstrap, spec.topic, spec.workload.partitions, spec.workload.replication_factor)
    except ClusterMismatch as error:
        raise UsageError(str(error)) from None
    except ExternalClusterError as error:
        return cannot_test(str(error))
    return None


def cannot_test(reason: str) -> int:
    """The external cluster could not be tested: one line on stderr, verdict unknown."""
    print(f"tidemark run: error: {' '.join(reason.split())}", file=sys.stderr)
    return EXIT_UNKNOWN
