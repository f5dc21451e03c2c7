"""One test, end to end: set-up, main phase, heal, recovery, drain, dumps, logs, check.

set up cluster -> start controller and brokers -> create topic -> main phase (workload
+ nemesis, or a scripted scenario, under a time limit) -> heal every fault -> wait for
recovery (a condition with a deadline) -> final drain -> stop brokers, dump every
replica -> collect node logs -> tear down -> convert history, build replica tables ->
check -> ``results.json``.

Guarantees: the run directory and ``test.json`` exist before anything starts; every op
is in ``history.jsonl`` the moment it completes; node logs are collected and the
cluster is torn down on every path out (normal end, exception, SIGINT, SIGTERM --
``DockerCluster`` turns SIGTERM into an exception while a cluster is up).  A run that
did not get as far as a complete drain and complete dumps still gets checked: its
verdict is then at best ``unknown``, never ``valid``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from checker.api import check_runs, open_engine
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, DEFAULT_LIVENESS, Liveness
from checker.evidence import InputError, load_run
from harness.run.progress import ProgressLine
from harness.run.spec import TestSpec
from nemesis.mechanism import Nemesis
from nemesis.scenario import ScenarioFailed
from nemesis.scenario_run import ScenarioContext, ScenarioRun
from nemesis.spec import PACKAGE_GRACE_SECONDS
from testbed.cluster.kafka_admin import (
    ClusterUnavailable,
    create_topic,
    describe_topic,
    fully_replicated,
    wait_until,
)
from testbed.cluster.protocol import Cluster, ControlledCluster, LogFiles, ReplicaDumps, replica_nodes
from testbed.record import store
from testbed.record.recorder import Recorder
from testbed.record.replicas import EVIDENCE_DUMPS, EVIDENCE_NONE
from testbed.record.rundir import RunDir
from workloads.queue import QueueWorkload

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunOutcome:
    run_dir: Path
    results: dict[str, Any] | None
    problems: list[str]

    @property
    def verdict(self) -> bool | str | None:
        return None if self.results is None else self.results["valid"]


@contextmanager
def docker_bundled_cluster(spec: TestSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
    """A DockerCluster with broker_impl started on it; logs collected and torn down on exit."""
    import docker

    from testbed.cluster.bundled import BundledCluster
    from testbed.cluster.docker_cluster import CONTROLLER, DockerCluster
    from testbed.cluster.image import ensure_image

    client = docker.from_env()
    image = ensure_image(client)
    with DockerCluster(
        client, image, brokers=spec.node_count, work_dir=run_dir.cluster_work
    ) as docker_cluster:
        names = docker_cluster.broker_names
        bundled = BundledCluster(
            docker_cluster.remotes_via(spec.transport),
            {n: docker_cluster.ip(n) for n in docker_cluster.node_names},
            names,
            CONTROLLER,
            spec.settings,
            power_loss_filesystem=spec.power_loss_filesystem,
        )
        try:
            bundled.configure()
            bundled.start()
            yield bundled
        finally:
            _collect_logs(bundled, docker_cluster.node_names, run_dir, problems)


@contextmanager
def docker_tansu_cluster(spec: TestSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
    """tansu brokers on one PostgreSQL node in Docker (``--target tansu``); logs collected, torn down."""
    import docker

    from testbed.cluster.tansu import tansu_on_docker
    from testbed.cluster.tansu_image import ensure_tansu_image

    client = docker.from_env()
    with tansu_on_docker(
        client,
        ensure_tansu_image(client, build_binary=False),
        brokers=spec.node_count,
        settings=spec.settings,
        power_loss_filesystem=spec.power_loss_filesystem,
        transport=spec.transport,
        work_dir=run_dir.cluster_work,
    ) as (cluster, node_names):
        try:
            cluster.configure()
            cluster.start()
            yield cluster
        finally:
            _collect_logs(cluster, node_names, run_dir, problems)


@contextmanager
def external_cluster(spec: TestSpec, run_dir: RunDir, problems: list[str]) -> Iterator[Cluster]:
    """A cluster the harness did not start; brokers under SSH control if an inventory is given."""
    from testbed.cluster.external import ExternalCluster, load_inventory

    assert spec.bootstrap is not None
    inventory = load_inventory(Path(spec.inventory)) if spec.inventory else []
    cluster = ExternalCluster(spec.bootstrap, inventory)
    try:
        cluster.start()
        yield cluster
    finally:
        _collect_logs(cluster, cluster.brokers, run_dir, problems)


def _collect_logs(cluster: Cluster, nodes: list[str], run_dir: RunDir, problems: list[str]) -> None:
    """Fetch every node's logs into ``nodes/<node>/``; a node that fails is a problem, not an abort."""
    if not isinstance(cluster, LogFiles):
        return
    for node in nodes:
        try:
            cluster.collect_logs(node, run_dir.node_dir(node))
        except Exception as error:
            problems.append(f"logs of {node} not collected: {error}")


def _check_topic_layout(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    """Refuse to run on a topic the harness did not shape: one that already existed (a run
    before this one left it, or a stray client auto-created it) tests the wrong replication."""
    layout: dict[int, int] = wait_until(  # a broker may not know the new topic yet: ask again
        lambda: {info.partition: len(info.replicas) for info in describe_topic(bootstrap, topic)},
        30.0,
        f"the layout of topic {topic}",
    )
    expected = {partition: replication_factor for partition in range(partitions)}
    if layout != expected:
        raise ClusterUnavailable(
            f"topic {topic} has partitions -> replicas {layout}, not {expected}: it existed before "
            "the harness created it; delete it or run on a fresh cluster"
        )


def write_spec(spec: TestSpec, run_dir: RunDir, node_names: list[str]) -> None:
    """``test.json``: the spec with its derived fields, plus what only the runner knows."""
    document = spec.to_dict()
    if spec.target == "tansu":
        from testbed.cluster.tansu import POSTGRES_NODE, REPLICA_EVIDENCE

        nodes, evidence = [POSTGRES_NODE], REPLICA_EVIDENCE
    elif spec.bootstrap is None:
        nodes, evidence = node_names, EVIDENCE_DUMPS
    else:
        nodes, evidence = [], f"{EVIDENCE_NONE}: an external cluster (Tidemark cannot dump its logs)"
    document.update({"nodes": nodes, "replica_evidence": evidence, "versions": store.versions()})
    store.write_json(run_dir.spec_file, document)


def run_test(
    spec: TestSpec,
    store_dir: Path,
    *,
    engine: str | None = "pandas",
    out: TextIO = sys.stderr,
    run_dir: Path | None = None,
    liveness: Liveness = DEFAULT_LIVENESS,
) -> RunOutcome:
    """Run ``spec`` (its random nemesis, or its embedded scenario); store everything under
    ``store_dir`` (or exactly in ``run_dir``, which must not exist yet: campaigns name their
    runs); check it with ``engine`` (None: leave the check to the caller, as a campaign does
    in one Spark job) and the ``liveness`` settings."""
    if run_dir is None:
        directory = RunDir(store.new_run_directory(store_dir, spec.name))
        store.point_latest(store_dir, directory.path)
    else:
        directory = RunDir(run_dir)
        directory.nodes.mkdir(parents=True)
    if spec.bootstrap is None:
        node_names = [f"n{i}" for i in range(1, spec.node_count + 1)]
    else:
        from testbed.cluster.external import load_inventory

        node_names = [node.name for node in load_inventory(Path(spec.inventory))] if spec.inventory else []
    write_spec(spec, directory, node_names)
    problems: list[str] = []
    print(f"run directory: {directory.path}", file=out)
    recorder = Recorder(directory.history_jsonl)
    try:
        cluster_context = (
            docker_tansu_cluster(spec, directory, problems)
            if spec.target == "tansu"
            else docker_bundled_cluster(spec, directory, problems)
            if spec.bootstrap is None
            else external_cluster(spec, directory, problems)
        )
        with cluster_context as cluster:
            _run_phases(spec, cluster, recorder, directory, problems, out)
    finally:
        recorder.close()
    return finish_run(directory, engine, problems, out, liveness)


def _run_phases(
    spec: TestSpec,
    cluster: Cluster,
    recorder: Recorder,
    run_dir: RunDir,
    problems: list[str],
    out: TextIO,
) -> None:
    topic, partitions = spec.topic, spec.workload.partitions
    create_topic(cluster.bootstrap, topic, partitions, spec.workload.replication_factor)
    cluster.wait_for_leaders(topic, partitions, 30.0)
    _check_topic_layout(cluster.bootstrap, topic, partitions, spec.workload.replication_factor)
    workload = QueueWorkload(spec.workload, recorder, cluster.bootstrap, topic)
    scenario = spec.scenario_object()
    # No nodes to act on (an external cluster without an inventory): a fault-free run.
    nemesis = (
        Nemesis(
            spec.nemesis,
            cluster,
            recorder,
            leader_partitions=[(topic, p) for p in range(partitions)],
            package_cluster=cluster,
            replication_factor=spec.workload.replication_factor,
            workload=workload,
            isr_lag_seconds=spec.isr_lag_seconds(),
        )
        if isinstance(cluster, ControlledCluster) and cluster.brokers
        else None
    )
    if scenario is not None and nemesis is None:
        raise ValueError(f"scenario {scenario.name} needs a cluster whose nodes the harness controls")
    stop = threading.Event()
    progress = ProgressLine(recorder, nemesis.active_faults if nemesis else list, out)
    threads = [threading.Thread(target=workload.run, args=(stop,), name="workload", daemon=True)]
    schedule = (
        threading.Thread(target=nemesis.run, args=(stop,), name="nemesis", daemon=True)
        if scenario is None and nemesis is not None
        else None
    )
    if schedule is not None:
        threads.append(schedule)
    for thread in threads:
        thread.start()
    try:
        with progress, _main_phase_problems(problems):
            if scenario is not None and nemesis is not None:
                context = ScenarioContext(
                    cluster,
                    nemesis,
                    workload,
                    topic,
                    lambda text: print(text, file=out),
                    group=spec.workload.group,
                )
                ScenarioRun(scenario, context).run()
            else:
                stop.wait(spec.time_limit)
                if nemesis is not None and schedule is not None and not stop.is_set():
                    nemesis.wind_down()  # a fault package in flight finishes; nothing new starts
                    schedule.join(timeout=PACKAGE_GRACE_SECONDS)
    finally:
        stop.set()
        if nemesis is not None:
            nemesis.heal_all()
        for thread in threads:
            thread.join(timeout=spec.workload.request_timeout * 3 + 10)
    problems.extend(f"workload: {error}" for error in workload.errors)
    try:
        wait_until(
            lambda: fully_replicated(cluster.bootstrap, topic, partitions),
            spec.recovery_timeout,
            "every partition led with a full ISR",
        )
    except TimeoutError as error:
        problems.append(f"recovery: {error}")
    print("draining every partition", file=out)
    complete = workload.drain(time.monotonic() + spec.drain_timeout)
    incomplete = [p for p, done in complete.items() if not done]
    if incomplete:
        problems.append(f"drain incomplete for partitions {incomplete}")
    cluster.stop_brokers()
    if not isinstance(cluster, ReplicaDumps):
        return
    for node in replica_nodes(cluster):
        try:
            cluster.dump_replica(node, run_dir.dump(node))
        except Exception as error:
            problems.append(f"dump of {node} failed: {error}")


@contextmanager
def _main_phase_problems(problems: list[str]) -> Iterator[None]:
    """A failed main phase (a scenario wait timed out, a client bug) is recorded, and the run
    still heals, drains, dumps and gets checked: the evidence so far is worth a verdict."""
    try:
        yield
    except ScenarioFailed as error:  # a step that could not be carried out: its message says all
        logger.error("main phase failed: %s", error)
        problems.append(f"main phase: {type(error).__name__}: {error}")
    except Exception as error:  # a bug: the traceback is for whoever fixes it
        logger.exception("main phase failed")
        problems.append(f"main phase: {type(error).__name__}: {error}")


def finish_run(
    run_dir: RunDir,
    engine: str | None,
    problems: list[str],
    out: TextIO,
    liveness: Liveness = DEFAULT_LIVENESS,
) -> RunOutcome:
    """Make the stored run's evidence whole and check it (also after a failed run).

    :func:`checker.evidence.load_run` is the one place that turns ``history.jsonl`` and the
    dumps into Parquet; it runs here even when the check is left to the caller (a campaign),
    so every finished run directory holds its Parquet files.
    """
    try:
        run = load_run(run_dir.path)
    except InputError as error:
        problems.append(f"not checked: {error}")
        run = None
    store.write_json(run_dir.run_file, {"problems": problems, "finished": True})
    for problem in problems:
        print(f"problem: {problem}", file=out)
    if engine is None or run is None:
        return RunOutcome(run_dir.path, None, problems)
    with open_engine(engine) as checker_engine:
        results = check_runs([run], checker_engine, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, liveness=liveness)[0]
    return RunOutcome(run_dir.path, results, problems)
