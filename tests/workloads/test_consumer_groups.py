"""The ``subscribe`` workload against the bundled broker as local processes (no Docker).

Three brokers, a six-partition topic, two producers and three consumers in one group with
synchronous commits, for each client library; in the middle a ``consumer-churn`` op (through the
nemesis's own :func:`nemesis.consumer_churn.run_churn`) replaces one consumer.  Then the run is
drained, the replicas dumped, and the stored run checked by the checker.  Asserted:

* the history is well-formed for the op model (the converter accepts it; every invoke completed);
* each group process is one assignment: it starts with ``assign``, polls and commits only the
  partitions it was assigned, and a ``revoke`` (if any) is its last op;
* in every generation the members' partitions are disjoint, and every generation in which all
  three members recorded their assignment covers all six partitions or none (the group leader
  assigned before its metadata listed the topic: kafka-python then rejoins at once) -- and there
  is one covering all six before the churn in which every member read, and one after it that
  includes the newcomer;
* commits are answered (``ok``, or ``fail`` when a rebalance overtook them; never ``info`` in a
  run without faults), and an ``ok`` commit's offset is at most one past the highest offset its
  process polled in that partition, in the generation the process was assigned;
* the checker accepts the new ops: the verdict and anomalies are the same as for the same
  history without them, and the run is valid.

group.initial.rebalance.delay.ms is 0 here (Kafka's and the bundled broker's default is 3 s): the
consumers then join one generation at a time, so a test sees several rebalances in seconds.

Every phase waits on a condition of the recorded history, never on time: under CPU load the
clients join, fetch and commit slowly, and a run may see more generations than an idle one.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_impl.dump import dump
from broker_impl.localcluster import LocalCluster
from checker.api import check_runs, open_engine
from checker.definitions import ALL_CHECKS
from checker.evidence import load_run
from harness.run.runner import write_spec
from harness.run.spec import TestSpec
from nemesis.churn_plan import ChurnPlan
from nemesis.consumer_churn import run_churn
from nemesis.spec import NemesisSpec
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from testbed.record.rundir import RunDir
from tests.local_cluster import ClusterFactory, start_cluster  # noqa: F401 -- the fixture
from workloads.queue import QueueSpec, QueueWorkload
from workloads.txn import DEFAULT_ABORT_P

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
CONSUMERS = 3
SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
GROUP_OPS = ("assign", "revoke", "commit", "consumer-churn")
ENOUGH_COMMITS = 10
"""A run must hold more acknowledged commits than this; the run goes on until it does."""


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        threading.Event().wait(0.05)


def generations(ops: list[Op]) -> dict[int, dict[str, tuple[int, ...]]]:
    """generation -> member id -> partitions, from the assign completions recorded so far."""
    members: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for op in list(ops):
        if op.f == "assign" and op.type == "ok" and op.value["generation"] is not None:
            members[op.value["generation"]][op.value["member_id"]] = tuple(op.value["partitions"])
    return members


def settled(ops: list[Op], after: int = -1, member: str | None = None) -> int | None:
    """The first generation above ``after`` in which all consumers recorded their assignment
    (including ``member``'s, if given) and the assignment covers every partition.

    Coverage matters: the group leader assigns the partitions its own metadata lists, and a
    kafka-python leader that joined before its first metadata answer named the topic assigns
    none (it cannot wait for metadata inside the rebalance; Java's assignor does the same) and
    rejoins as soon as the metadata arrives.  The members of such a generation never read, so
    it is not settled; the next one is.
    """
    for generation, members in sorted(generations(ops).items()):
        covered = sorted(p for owned in members.values() for p in owned) == list(range(PARTITIONS))
        if (
            generation > after
            and len(members) == CONSUMERS
            and covered
            and (member is None or member in members)
        ):
            return generation
    return None


def records_read(op: Op) -> list[dict[str, Any]]:
    """The records an ``ok`` read returned: a ``poll`` op's, or (``--txn``) a read-only ``txn``
    op's poll micro-ops'."""
    if op.type != "ok" or op.f not in ("poll", "txn"):
        return []
    if op.f == "poll":
        return list(op.value)
    return [record for micro in op.value if micro["f"] == "poll" for record in micro.get("records", [])]


def polled_records(ops: list[Op], process: int) -> int:
    return sum(len(records_read(op)) for op in ops if op.process == process)


def ok_commits(ops: list[Op]) -> int:
    return sum(op.f == "commit" and op.type == "ok" for op in list(ops))


def all_read(ops: list[Op], generation: int) -> bool:
    """Every process assigned in ``generation`` has polled records."""
    assigns = [op for op in list(ops) if op.f == "assign" and op.type == "ok"]
    return all(polled_records(ops, op.process) for op in assigns if op.value["generation"] == generation)


def run_group_workload(
    cluster: LocalCluster, client: str, stop_way: str, run_dir: Path, txn: bool = False
) -> list[Op]:
    """Produce and consume with churn in the middle; the run directory of it, checkable.  ``txn``:
    the producers run transactions (half aborted) and the members read ``read_committed``."""
    topic = f"group-{client}-{stop_way}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    workload_spec = QueueSpec(
        partitions=PARTITIONS,
        producers=2,
        consumers=CONSUMERS,
        rate=100,
        client=client,
        consume_via="subscribe",
        txn=txn,
        abort_p=0.5 if txn else DEFAULT_ABORT_P,
    )
    spec = TestSpec(
        topic=topic,
        settings=SETTINGS,
        workload=workload_spec,
        nemesis=NemesisSpec(faults=("consumer-churn",)),
    )
    directory = RunDir(run_dir)
    directory.nodes.mkdir(parents=True)
    nodes = [f"n{broker}" for broker in cluster.state["brokers"]]
    write_spec(spec, directory, nodes)
    recorder = Recorder(directory.history_jsonl)
    ops: list[Op] = []
    recorder.listeners.append(ops.append)
    workload = QueueWorkload(workload_spec, recorder, cluster.bootstrap(), topic)
    stop = threading.Event()
    thread = threading.Thread(target=workload.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: settled(ops) is not None, "the three consumers to settle in one generation")
        before = settled(ops)
        assert before is not None
        first_members = generations(ops)[before]
        wait_for(lambda: all_read(ops, before), "every member of the settled generation to read")
        churn = run_churn(recorder, workload, ChurnPlan(stop_way, 1))
        assert churn.type == "ok", churn
        newcomer = churn.value["started"]["process"]
        wait_for(
            lambda: any(op.process == newcomer and op.f == "assign" for op in ops),
            "the newcomer's assignment",
        )
        newcomer_member = next(
            op.value["member_id"] for op in ops if op.process == newcomer and op.f == "assign"
        )
        wait_for(
            lambda: settled(ops, before, newcomer_member) is not None,
            "a generation after the churn with all three, the newcomer among them",
            timeout=120,
        )
        settled_generation = settled(ops, before, newcomer_member)
        assert settled_generation is not None
        assert newcomer_member not in first_members
        wait_for(lambda: polled_records(ops, newcomer) > 0, "the newcomer to read")
        # Under load the phases above may pass in a few polls; the history must still hold
        # enough acknowledged commits for the commit assertions to mean something.
        wait_for(lambda: ok_commits(ops) > ENOUGH_COMMITS, f"more than {ENOUGH_COMMITS} acknowledged commits")
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive() and workload.errors == []
    assert all(workload.drain(time.monotonic() + 60).values())
    recorder.close()
    for broker in cluster.state["brokers"]:
        cluster.stop(broker, controlled=False)  # as the harness ends a run
        node_dir = directory.node_dir(f"n{broker}")
        node_dir.mkdir(parents=True, exist_ok=True)
        with directory.dump(f"n{broker}").open("w") as out:
            dump(Path(cluster.state["brokers"][broker]["data"]), out)
        shutil.copy(cluster.events_path(broker), directory.broker_events(f"n{broker}"))
    cluster.stop("controller")  # the event logs are collected as the harness collects them
    directory.node_dir("controller").mkdir(parents=True, exist_ok=True)
    shutil.copy(cluster.events_path("controller"), directory.node_dir("controller"))
    return ops


def assert_well_formed_group_history(ops: list[Op], churn_way: str) -> None:
    pending: dict[Any, Op] = {}
    by_process: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if op.type == "invoke":
            assert op.process not in pending, f"two ops pending in process {op.process}"
            pending[op.process] = op
        else:
            invoke = pending.pop(op.process)
            assert invoke.f == op.f
            if isinstance(op.process, int):
                by_process[op.process].append(op)
    assert not pending, f"invokes never completed: {pending}"

    assigned: dict[int, Op] = {}
    for process, completions in by_process.items():
        kinds = [op.f for op in completions]
        if "poll" not in kinds and "assign" not in kinds:
            continue  # a producer (its txn ops too) or a drain
        if "drain" in kinds:
            continue
        assert kinds[0] == "assign", f"process {process} does not start with its assignment: {kinds[:5]}"
        assert "revoke" not in kinds[:-1], f"process {process} acts after its revoke"
        assignment = completions[0].value
        assigned[process] = completions[0]
        highest: dict[int, int] = {}
        for op in completions[1:]:
            if op.f in ("poll", "txn") and op.type == "ok":
                for record in records_read(op):
                    assert record["partition"] in assignment["partitions"], (process, record)
                    highest[record["partition"]] = max(highest.get(record["partition"], -1), record["offset"])
            elif op.f == "commit":
                assert op.type in ("ok", "fail"), f"a commit without faults ended {op.type}: {op}"
                assert op.value["polled_by"] == process and op.value["generation"] == assignment["generation"]
                for partition, offset in op.value["offsets"].items():
                    assert int(partition) in assignment["partitions"]
                    assert offset <= highest[int(partition)] + 1, (process, op.value, highest)

    commits = [op for op in ops if op.f == "commit" and op.type != "invoke"]
    assert sum(op.type == "ok" for op in commits) > ENOUGH_COMMITS
    for generation, members in generations(ops).items():
        partitions = [p for owned in members.values() for p in owned]
        assert len(partitions) == len(set(partitions)), f"generation {generation} assigns twice: {members}"
        if len(members) == CONSUMERS:
            # All or nothing: the leader assigns every partition its metadata lists, and a
            # topic's metadata lists all of them or (not known yet, see settled) none.
            assert sorted(partitions) in ([], list(range(PARTITIONS))), f"generation {generation}: {members}"

    churn = next(op for op in ops if op.f == "consumer-churn" and op.type != "invoke")
    stopped = churn.value["stopped"]["process"]
    revokes = [op for op in ops if op.f == "revoke" and op.type == "ok" and op.value["consumer"] ==
               churn.value["stopped"]["consumer"]]  # fmt: skip
    assert revokes, f"the stopped consumer ({churn.value['stopped']}) recorded no revoke"
    assert churn.value["stop"] == churn_way and stopped in assigned


def check(run_dir: Path) -> dict[str, Any]:
    with open_engine("pandas") as engine:
        return check_runs([load_run(run_dir)], engine, ALL_CHECKS, 5)[0]


def without_group_ops(run_dir: Path, copy: Path) -> Path:
    """A copy of the run whose history lacks every op this workload mode added."""
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("history.*", "results.json"))
    lines = RunDir(run_dir).history_jsonl.read_text().splitlines()
    kept = [line for line in lines if json.loads(line).get("f") not in GROUP_OPS]
    RunDir(copy).history_jsonl.write_text("\n".join(kept) + "\n")
    return copy


@pytest.mark.parametrize(
    ("client", "way"),
    [("kafka-python", "leave"), ("confluent-kafka", "leave"), ("confluent-kafka", "stall")],
)
def test_a_group_with_churn_records_well_formed_rebalances_and_commits(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture
    tmp_path: Path,
    client: str,
    way: str,
) -> None:
    cluster = start_cluster(3, SETTINGS)
    run_dir = tmp_path / "run"
    ops = run_group_workload(cluster, client, way, run_dir)
    assert_well_formed_group_history(ops, way)

    results = check(run_dir)
    plain = check(without_group_ops(run_dir, tmp_path / "plain"))
    assert results["valid"] is True, results
    assert (results["valid"], results["anomalies"]) == (plain["valid"], plain["anomalies"])


def test_members_under_txn_record_reads_as_transactions_and_the_group_checks_read_them(
    start_cluster: ClusterFactory,  # noqa: F811 -- the fixture
    tmp_path: Path,
) -> None:
    """``--txn --consume-via subscribe``: the members read ``read_committed`` and record each poll
        as a read-only ``txn`` op (no ``poll`` op: the offset gaps of markers and aborted records are
        no skips), the group checks read those reads and the committed transactions' sends, and the run
        is valid.  Planted: without some member reads below a committed position, group-skip.  (Spark
    reads them alike: the ``--txn`` cases of ``tests/checker/group_cases.py``.)"""
    cluster = start_cluster(3, SETTINGS)
    run_dir = tmp_path / "run"
    ops = run_group_workload(cluster, "confluent-kafka", "leave", run_dir, txn=True)
    assert_well_formed_group_history(ops, "leave")
    members = {op.process for op in ops if op.f == "assign"}
    assert not [op for op in ops if op.f == "poll"], "a member recorded a poll op under --txn"
    member_reads = [op for op in ops if op.process in members and records_read(op)]
    assert len(member_reads) > 10
    assert any(op.f == "txn" and op.type == "fail" for op in ops), "no transaction aborted"
    results = check(run_dir)
    assert results["valid"] is True, results["anomalies"]

    planted = tmp_path / "planted"
    shutil.copytree(run_dir, planted, ignore=shutil.ignore_patterns("history.parquet", "results.json"))
    dropped = set()
    for read in member_reads[:5]:  # each completion and its invoke (the process's op before it)
        invoke = max(op.index for op in ops if op.process == read.process and op.index < read.index)
        dropped |= {read.index, invoke}
    lines = RunDir(run_dir).history_jsonl.read_text().splitlines()
    kept = [line for line in lines if json.loads(line).get("index") not in dropped]
    RunDir(planted).history_jsonl.write_text("\n".join(kept) + "\n")
    found = check(planted)["anomalies"]
    assert "group-skip" in found, found
