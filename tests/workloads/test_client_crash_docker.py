"""Producers and consumers killed mid-operation, end to end in Docker (issue 35, must-have 4: clients).

``tidemark run --nemesis client-crash,consumer-crash`` on three brokers in containers, the queue
workload's producers and consumers each in a child process (implied by the faults), once with
plain idempotent producers and the consumers as one consumer group, and once with transactional
producers and ``assign`` consumers: every couple of seconds the nemesis SIGKILLs one producer or
one consumer process in the middle of a call.  With the default (safe) settings the run must stay
valid -- a dead idempotent producer's in-flight batch is an ``info`` send, a dead transactional
producer's open transaction must be fenced by its successor and aborted by its coordinator before
the drain reads past it, a dead group member never leaves, so its coordinator must expire its
session and hand its partitions on -- and it must really have crashed clients mid-call: a crash
report that says the call in flight died with the process, and the op of that call completed with
the crash (and the dead pid) as its error (``info``; for a transaction whose commit was never asked
for, ``fail``).  Producers and consumers went on after their last crash; the group's survivors
took the dead members' partitions.  After the run, and after a run interrupted by Ctrl-C, no
client process is left.

The run is a ``tidemark run`` child process with a deadline (as ``test_consumer_groups_docker``):
a hang is a failure naming the deadline, and the dead run's containers are removed by label.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import docker
import pytest

from testbed.cluster.docker_labels import remove_orphans
from testbed.record.history import read_history
from testbed.record.ops import NEMESIS_PROCESS, Op
from tests.workloads.cli_child import finish as finish_within
from tests.workloads.cli_child import start_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DEADLINE_SECONDS = 300
"""A run takes 60-100 s; one still going after this hangs."""
RUN = [
    "--nemesis",
    "client-crash,consumer-crash",
    "--nemesis-interval",
    "2",
    "--time-limit",
    "24",
    "--producers",
    "2",
]


def client_processes() -> list[int]:
    """The pids of every hosted client process on this machine (``workloads.client_child``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"workloads.client_child" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile
    return found


def wait_until(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return bool(condition())  # type: ignore[operator]


def start_run(store: Path, *extra: str) -> subprocess.Popen[bytes]:
    return start_cli("run", *RUN, *extra, "--store", str(store))


def finish(child: subprocess.Popen[bytes], what: str) -> str:
    return finish_within(child, what, DEADLINE_SECONDS)


ENDED_BY: dict[str, tuple[str, ...]] = {
    "send": ("send", "txn"),
    "begin": ("txn",),
    "commit": ("txn",),
    "abort": ("txn",),
    "poll": ("poll", "txn"),
    "commit_sync": ("commit",),
    "commit_async": ("commit",),
}
"""The ops a call the crash interrupted may be (a transactional call ends its ``txn`` op; an
``assign`` consumer's poll under ``--txn`` is a read-only ``txn``)."""


def crashed_mid_call(ops: list[Op], fault: str, every_kill: bool = False) -> list[tuple[Op, Op]]:
    """(crash completion, the victim's op that the crash ended) for every ``fault`` that interrupted
    a call (``every_kill``: every kill -- one that landed between two calls ends the next): the
    first op to end with an error naming the dead pid (a group member's later poll finds the death
    too, and names the pid again)."""
    found = []
    for crash in ops:
        if crash.process != NEMESIS_PROCESS or crash.f != fault or crash.type != "ok":
            continue
        killed = crash.value["killed"]
        if not killed["interrupted"] and not every_kill:
            continue
        named = f"client process {killed['pid']} "
        ended = [
            op
            for op in ops
            if op.type != "invoke" and "crashed mid-" in str(op.error) and named in str(op.error)
        ]
        assert ended, killed
        assert killed["process"] in (None, ended[0].process), (killed, ended[0])
        assert not killed["interrupted"] or ended[0].f in ENDED_BY[killed["in_flight"]], (killed, ended[0])
        found.append((crash, ended[0]))
    return found


def finished_run(store: Path, output: str, txn: bool) -> tuple[list[Op], Path]:
    """The run's history, after checking it is valid, hosted its clients and had no problems."""
    runs = sorted(path.parent for path in store.glob("*/*/results.json"))
    assert runs, output[-3000:]
    run_dir = runs[-1]
    test = json.loads((run_dir / "test.json").read_text())
    assert test["workload"]["client_processes"] is True and test["workload"]["txn"] is txn
    results = json.loads((run_dir / "results.json").read_text())
    problems = json.loads((run_dir / "run.json").read_text()).get("problems")
    assert not problems, problems
    assert results["valid"] is True, json.dumps(results["anomalies"], indent=1)[:3000]
    ops, skipped = read_history(run_dir / "history.jsonl")
    assert skipped == []
    return ops, run_dir


def check_producer_crashes(ops: list[Op], txn: bool) -> None:
    """Producers died mid-call, their calls' ops ended as the op model says, and they went on."""
    crashes = crashed_mid_call(ops, "client-crash")
    assert crashes, [op.value for op in ops if op.f == "client-crash"]
    for crash, ended in crashes:
        in_flight = crash.value["killed"]["in_flight"]
        if not txn or in_flight == "commit":
            assert ended.type == "info", (crash.value, ended)  # the outcome is unknown
        else:
            assert ended.type in ("info", "fail"), (crash.value, ended)  # fail: never asked to commit
    assert any(ended.type == "info" for _, ended in crashes) or txn
    last_crash = max(crash.time for crash, _ in crashes)
    later = [op for op in ops if op.time > last_crash and op.type == "ok" and op.f in ("send", "txn")]
    assert later, "no producer went on after the crash"


def reads_after(ops: list[Op], time: int) -> list[Op]:
    """The consumers' reads (``poll``, or a ``txn`` with a poll in it) completed after ``time``."""
    return [
        op
        for op in ops
        if op.time > time
        and op.type == "ok"
        and op.process != NEMESIS_PROCESS
        and (op.f == "poll" or (op.f == "txn" and any(micro.get("f") == "poll" for micro in op.value)))
    ]


def test_transactional_producers_and_assign_consumers_killed_mid_call_leave_a_valid_run(
    image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """The random nemesis: ``client-crash`` and ``consumer-crash`` every couple of seconds."""
    output = finish(start_run(tmp_path / "store", "--txn"), "tidemark run --txn")
    ops, _ = finished_run(tmp_path / "store", output, txn=True)
    check_producer_crashes(ops, txn=True)
    consumer_crashes = crashed_mid_call(ops, "consumer-crash")
    assert consumer_crashes, [op.value for op in ops if op.f == "consumer-crash"]
    assert {crash.value["killed"]["client"] for crash, _ in consumer_crashes} == {"consumer"}
    assert all(ended.type == "info" for _, ended in consumer_crashes)  # a read's outcome: unknown
    last_crash = max(crash.time for crash, _ in consumer_crashes)
    assert reads_after(ops, last_crash), "no consumer read after the last consumer crash"
    assert client_processes() == []


def test_a_group_member_killed_before_its_coordinator_is_expired_and_the_group_reads_on(
    image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """The ``group-member-crash`` scenario: a producer, then a member mid-poll, then the group's
    coordinator; the dead member never revoked, the survivors rebalanced after its session ran out."""
    child = start_cli("run", "--scenario", "group-member-crash", "--store", str(tmp_path / "store"))
    output = finish(child, "tidemark run --scenario group-member-crash")
    ops, _ = finished_run(tmp_path / "store", output, txn=False)
    check_producer_crashes(ops, txn=False)
    [(crash, ended)] = crashed_mid_call(ops, "consumer-crash", every_kill=True)  # mid-poll, or just after one
    assert crash.value["killed"]["client"] == "group-consumer" and ended.type == "info"
    dead = ended.process
    assert not [op for op in ops if op.process == dead and op.f == "revoke"]  # it never left
    [coordinator_killed] = [
        op for op in ops if op.process == NEMESIS_PROCESS and op.f == "kill" and op.type == "ok"
    ]
    assert coordinator_killed.time > crash.time
    later_assigns = [  # a rebalance by the new coordinator (a takeover keeps the old generation's)
        op
        for op in ops
        if op.f == "assign"
        and op.type == "ok"
        and op.time > coordinator_killed.time
        and "takeover" not in op.value
    ]
    assert later_assigns, "no member was assigned partitions after the crash"
    # Read on after the survivors' first assignment (the run's end rebalances once more as members
    # close: 34.1 s of 34.3 in a CI run, with no poll after it).
    assert reads_after(ops, min(op.time for op in later_assigns)), "the group did not read on"
    assert client_processes() == []


def test_an_interrupted_run_leaves_no_client_process(
    image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Ctrl-C while the producers' processes run: the harness tears down, the children die with it."""
    before = set(client_processes())
    child = start_run(tmp_path / "store")
    try:
        assert wait_until(lambda: set(client_processes()) - before, 120), "no client process started"
        os.killpg(child.pid, signal.SIGINT)
        finish(child, "tidemark run after SIGINT")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            remove_orphans(docker.from_env())
    assert wait_until(lambda: not set(client_processes()) - before, 10), client_processes()
