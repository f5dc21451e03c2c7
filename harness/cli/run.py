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
from harness.cli.engine_options import add_remote_option, engine_of, remote_of
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_UNKNOWN, verdict_exit_code
from harness.run.runner import RunOutcome, run_test
from harness.run.scenario_check import load_checked_scenario
from harness.run.spec import DEFAULT_TARGET, TARGETS, SpecError, TestSpec, scenario_target
from harness.targets.base import SpecRefused
from harness.targets.registry import check_ready
from harness.targets.registry import check_spec as check_target_spec
from nemesis.scenario import ScenarioError
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec
from testbed.record.rundir import RunDir
from workloads.clients import CLIENTS
from workloads.queue import QueueSpec
from workloads.txn import DEFAULT_ABORT_P, DEFAULT_MAX_OPS, MAX_MICRO_OPS
from workloads.txn_input import CTP_VIA


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
        "--nemesis",
        default="",
        metavar="FAULTS",
        help="comma-separated, a name*N drawn N times as often: " + ",".join(NEMESIS_CHOICES),
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
    add_workload_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--engine", default="pandas", choices=("pandas", "spark"), help="checker engine")
    add_remote_option(parser)
    add_liveness_options(parser)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The queue workload's flags: partitions, clients, rate, acks, isolation, consumer groups,
    transactions."""
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument(
        "--rate",
        type=float,
        default=200.0,
        help="sends per second over all producers (with --txn: transactions per second)",
    )
    parser.add_argument("--acks", default="all", choices=("0", "1", "all"))
    parser.add_argument(
        "--client",
        default="kafka-python",
        choices=CLIENTS,
        help="kafka-python-kip890: kafka-python whose transactional producer speaks KIP-890 part 2 (EndTxn v5)",
    )
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
        "--client-processes",
        action="store_true",
        help="run each producer in a child process of its own (implied by --nemesis client-crash, "
        "which SIGKILLs them mid-operation; workloads/client_host.py)",
    )
    add_txn_arguments(parser)


def add_txn_arguments(parser: argparse.ArgumentParser) -> None:
    """``--txn`` and its settings (``workloads.txn``)."""
    parser.add_argument(
        "--txn",
        action="store_true",
        help="producers run Kafka transactions of a few sends and polls each, committed or aborted; "
        "consumers (assigned or group members) record read-only txn ops (needs --acks all)",
    )
    parser.add_argument(
        "--abort-p",
        type=float,
        default=DEFAULT_ABORT_P,
        metavar="P",
        help=f"with --txn: probability a transaction is deliberately aborted (default {DEFAULT_ABORT_P})",
    )
    parser.add_argument(
        "--txn-max-ops",
        type=int,
        default=DEFAULT_MAX_OPS,
        metavar="N",
        help=f"with --txn: micro-ops per transaction drawn from 1..N (N <= {MAX_MICRO_OPS}; default {DEFAULT_MAX_OPS})",
    )
    parser.add_argument(
        "--txn-ctp",
        action="store_true",
        help="with --txn: consume-transform-produce -- each producer reads its share of the "
        "partitions as one consumer group and commits the group's offsets in every transaction "
        "(send_offsets_to_transaction); checked for records processed twice or skipped",
    )
    parser.add_argument(
        "--txn-ctp-via",
        choices=CTP_VIA,
        default="assign",
        help="with --txn-ctp: each producer's fixed partitions (assign, fenced by transactional.id; "
        "the default) or the group's assignment, moving at rebalances (subscribe, fenced by "
        "generation: KIP-447)",
    )


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Which system to test and how to reach its nodes: transport, external cluster, target."""
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
        "'pg' (needs `tidemark image build --target tansu` once: a cargo build, 4-10 min); default: "
        f"the scenario's target, else {DEFAULT_TARGET}; refused when it differs from the scenario's",
    )


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings


def spec_from_arguments(args: argparse.Namespace) -> TestSpec:
    from nemesis.spec import NEMESIS_CHOICES, NemesisSpecError, parse_weighted_list

    if args.nodes < 1:
        raise UsageError(f"--nodes {args.nodes}: a cluster needs at least 1 broker")

    try:
        faults, weights = (
            parse_weighted_list(args.nemesis, NEMESIS_CHOICES, "--nemesis") if args.nemesis else ((), ())
        )
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
            txn=args.txn,
            abort_p=args.abort_p,
            txn_max_ops=args.txn_max_ops,
            txn_ctp=args.txn_ctp,
            txn_ctp_via=args.txn_ctp_via,
            client_processes=args.client_processes,
        )
        nemesis = NemesisSpec(
            faults=faults,
            weights=weights,
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
    """Refuse, as a usage error, what cannot run (before any container starts): the spec's
    target's checks (:func:`harness.targets.registry.check_spec`), shared with hunts, reruns and
    campaigns."""
    try:
        check_target_spec(spec)
        check_ready(spec)
    except SpecRefused as error:
        raise UsageError(str(error)) from None


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
    remote = remote_of(args)  # a bad address is refused before anything else is looked at
    spec = spec_from_arguments(args)
    if spec.scenario is not None:
        try:
            scenario = load_checked_scenario(spec.scenario)
            target = scenario_target(args.target, scenario, "--target")
            spec = dataclasses.replace(spec, target=target).with_scenario(scenario)
        except (ScenarioError, SpecError, ValueError) as error:
            raise UsageError(str(error)) from None
    check_spec(spec)
    engine = engine_of(args, remote)
    return run_and_report(spec, Path(args.store), engine, liveness_settings(args), remote)


def run_and_report(
    spec: TestSpec,
    store: Path,
    engine: str,
    liveness: Liveness = DEFAULT_LIVENESS,
    remote: str | None = None,
) -> int:
    """Run ``spec`` and report its verdict (checked through the Spark Connect server at ``remote``
    when given); the exit code.

    The target probes its system first (an external cluster); one that cannot be tested is a
    single line on stderr and exit 2 (254 when the arguments do not fit it), not a traceback --
    and so is a set-up the target names as unavailable once the run started.
    """
    target = spec.target_object()
    try:
        reason = target.probe(spec)
    except SpecRefused as error:
        raise UsageError(str(error)) from None
    if reason is not None:
        return cannot_test(reason)
    try:
        outcome = run_test(spec, store, engine=engine, out=sys.stderr, liveness=liveness, remote=remote)
    except Exception as error:
        reason = target.unavailable(spec, error)
        if reason is None:
            raise
        return cannot_test(reason)
    return report_outcome(spec, outcome)


def cannot_test(reason: str) -> int:
    """The external cluster could not be tested: one line on stderr, verdict unknown."""
    print(f"tidemark run: error: {' '.join(reason.split())}", file=sys.stderr)
    return EXIT_UNKNOWN
