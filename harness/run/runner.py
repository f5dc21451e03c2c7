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
from checker.spark.remote import ServerUnreachable
from harness.run.progress import ProgressLine
from harness.run.spec import TestSpec
from nemesis.mechanism import Nemesis, NemesisConfig
from nemesis.scenario import Scenario, ScenarioFailed
from nemesis.scenario_run import ScenarioContext, ScenarioRun
from nemesis.spec import PACKAGE_GRACE_SECONDS
from testbed.cluster.kafka_admin import (
    ClusterUnavailable,
    create_topic,
    describe_topic,
    fully_replicated,
    topic_end_offsets,
    wait_until,
)
from testbed.cluster.protocol import Cluster, ControlledCluster, ReplicaDumps, replica_nodes
from testbed.record import store
from testbed.record.finish import finish_record
from testbed.record.history import HistoryFormatError
from testbed.record.recorder import Recorder
from testbed.record.rundir import RunDir, SpecFileError
from workloads.queue import QueueWorkload
from workloads.txn import transactional_id

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunOutcome:
    run_dir: Path
    results: dict[str, Any] | None
    problems: list[str]

    @property
    def verdict(self) -> bool | str | None:
        return None if self.results is None else self.results["valid"]


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
    # The same layout is not enough: records an earlier run left would be read as this run's
    # (duplicate, unexpected and G1a that never happened).
    held = {p: end for p, end in topic_end_offsets(bootstrap, topic, partitions).items() if end > 0}
    if held:
        raise ClusterUnavailable(
            f"topic {topic} already holds records (partition -> end offset {held}): it existed before "
            "the harness created it; delete it or run on a fresh cluster"
        )


def write_spec(spec: TestSpec, run_dir: RunDir, replica_nodes: list[str] | None = None) -> None:
    """``test.json``: the spec with its derived fields, plus what only the runner knows -- the
    nodes whose replicas the run dumps and so what replica evidence it has (the target's, or
    ``replica_nodes`` where a caller knows them better, e.g. a test on a local cluster)."""
    target = spec.target_object()
    document = spec.to_dict()
    document.update(
        {
            "nodes": target.replica_nodes(spec) if replica_nodes is None else replica_nodes,
            "replica_evidence": target.replica_evidence(spec),
            "versions": store.versions(),
        }
    )
    store.write_json(run_dir.spec_file, document)


def run_test(
    spec: TestSpec,
    store_dir: Path,
    *,
    engine: str | None = "pandas",
    out: TextIO = sys.stderr,
    run_dir: Path | None = None,
    liveness: Liveness = DEFAULT_LIVENESS,
    remote: str | None = None,
) -> RunOutcome:
    """Run ``spec`` (its random nemesis, or its embedded scenario) on its target's cluster; store
    everything under ``store_dir`` (or exactly in ``run_dir``, which must not exist yet: campaigns
    name their runs); check it with ``engine`` (None: leave the check to the caller, as a campaign
    does in one Spark job) -- through the Spark Connect server at ``remote`` when given -- and the
    ``liveness`` settings."""
    if run_dir is None:
        directory = RunDir(store.new_run_directory(store_dir, spec.name))
        store.point_latest(store_dir, directory.path)
    else:
        directory = RunDir(run_dir)
        directory.nodes.mkdir(parents=True)
    write_spec(spec, directory)
    problems: list[str] = []
    print(f"run directory: {directory.path}", file=out)
    recorder = Recorder(directory.history_jsonl)
    try:
        with spec.target_object().cluster(spec, directory, problems) as cluster:
            _run_phases(spec, cluster, recorder, directory, problems, out)
    finally:
        recorder.close()
    return finish_run(directory, engine, problems, out, liveness, remote)


def _run_phases(
    spec: TestSpec,
    cluster: Cluster,
    recorder: Recorder,
    run_dir: RunDir,
    problems: list[str],
    out: TextIO,
) -> None:
    """Topic, main phase, heal, recovery, drain, dumps: everything between start and tear-down."""
    topic, partitions = spec.topic, spec.workload.partitions
    create_topic(cluster.bootstrap, topic, partitions, spec.workload.replication_factor)
    cluster.wait_for_leaders(topic, partitions, 30.0)
    _check_topic_layout(cluster.bootstrap, topic, partitions, spec.workload.replication_factor)
    workload = QueueWorkload(spec.workload, recorder, cluster.bootstrap, topic)
    scenario = spec.scenario_object()
    nemesis = _nemesis_for(spec, scenario, cluster, recorder, workload)
    _main_phase(spec, scenario, cluster, nemesis, workload, recorder, problems, out)
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
    _dump_replicas(cluster, run_dir, problems)


def _nemesis_for(
    spec: TestSpec, scenario: Scenario | None, cluster: Cluster, recorder: Recorder, workload: QueueWorkload
) -> Nemesis | None:
    """The run's nemesis; None where there are no nodes to act on (an external cluster without an
    inventory: a fault-free run).  A scenario needs one: ValueError without."""
    topic, partitions = spec.topic, spec.workload.partitions
    nemesis = (
        Nemesis(
            spec.nemesis,
            cluster,
            recorder,
            NemesisConfig(
                leader_partitions=[(topic, p) for p in range(partitions)],
                package_cluster=cluster,
                replication_factor=spec.workload.replication_factor,
                workload=workload,
                rules=spec.replication_rules(),
                group=spec.workload.group,
                send_rate=spec.workload.send_rate,
            ),
        )
        if isinstance(cluster, ControlledCluster) and cluster.brokers
        else None
    )
    if scenario is not None and nemesis is None:
        raise ValueError(f"scenario {scenario.name} needs a cluster whose nodes the harness controls")
    return nemesis


def _main_phase(
    spec: TestSpec,
    scenario: Scenario | None,
    cluster: Cluster,
    nemesis: Nemesis | None,
    workload: QueueWorkload,
    recorder: Recorder,
    problems: list[str],
    out: TextIO,
) -> None:
    """The workload with the random nemesis for the time limit, or with the scripted scenario;
    every fault healed and the workload stopped on the way out, whatever happened."""
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
                    spec.topic,
                    lambda text: print(text, file=out),
                    group=spec.workload.group,
                    transactional_id=transactional_id(spec.topic, 0) if spec.workload.txn else None,
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


def _dump_replicas(cluster: Cluster, run_dir: RunDir, problems: list[str]) -> None:
    """Dump every replica the cluster can dump (its brokers stopped); a failed dump is a problem."""
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
    remote: str | None = None,
) -> RunOutcome:
    """Finish the stored run's record, then check it (also after a failed run); with ``remote``,
    through that Spark Connect server (:func:`checker.api.open_engine`).

    The record finishes itself (:func:`testbed.record.finish.finish_record` turns
    ``history.jsonl``, the dumps and the event logs into their Parquet tables), here even when
    the check is left to the caller (a campaign), so every finished run directory holds its
    Parquet files; the checker then only reads them (:func:`checker.evidence.load_run`).
    """
    try:
        finish_record(run_dir.path)
        run = load_run(run_dir.path)
    except (HistoryFormatError, SpecFileError, InputError) as error:
        problems.append(f"not checked: {error}")
        run = None
    store.write_json(run_dir.run_file, {"problems": problems, "finished": True})
    for problem in problems:
        print(f"problem: {problem}", file=out)
    if engine is None or run is None:
        return RunOutcome(run_dir.path, None, problems)
    try:
        with open_engine(engine, remote=remote) as checker_engine:
            (results,) = check_runs(
                [run], checker_engine, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, liveness=liveness
            )
    except ServerUnreachable as error:  # the run is stored whole; `tidemark check` it later
        problems.append(f"not checked: {error}")
        store.write_json(run_dir.run_file, {"problems": problems, "finished": True})
        print(f"problem: not checked: {error}", file=out)
        return RunOutcome(run_dir.path, None, problems)
    return RunOutcome(run_dir.path, results, problems)
