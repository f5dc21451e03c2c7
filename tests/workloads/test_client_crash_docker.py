"""Producers killed mid-operation, end to end in Docker (issue 35, must-have 4: clients).

``tidemark run --nemesis client-crash`` on three brokers in containers, the queue workload's
producers each in a child process (implied by the fault), once with plain idempotent producers and
once with transactional ones: every few seconds the nemesis SIGKILLs one producer process in the
middle of a call.  With the default (safe) settings the run must stay valid -- a dead idempotent
producer's in-flight batch is an ``info`` send, a dead transactional producer's open transaction
must be fenced by its successor and aborted by its coordinator before the drain reads past it --
and it must really have crashed producers mid-call: a crash report that says the call in flight
died with the process, and that process's op completed with the crash as its error (``info``; for
a transaction whose commit was never asked for, ``fail``).  After the run, and after a run
interrupted by Ctrl-C, no client process is left.

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
RUN = ["--nemesis", "client-crash", "--nemesis-interval", "2", "--time-limit", "24", "--producers", "2"]


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


def crashed_mid_call(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(crash completion, the victim's op that the crash ended) for every crash that interrupted a call."""
    found = []
    for crash in ops:
        if crash.process != NEMESIS_PROCESS or crash.f != "client-crash" or crash.type != "ok":
            continue
        killed = crash.value["killed"]
        if not killed["interrupted"]:
            continue
        ended = [
            op
            for op in ops
            if op.process == killed["process"] and op.type != "invoke" and "crashed mid-" in str(op.error)
        ]
        assert len(ended) == 1, (killed, ended)  # one op per process ends with the crash: it retires
        found.append((crash, ended[0]))
    return found


@pytest.mark.parametrize("txn", [False, True], ids=["idempotent", "transactional"])
def test_producers_killed_mid_call_leave_a_valid_run_and_no_process(
    image: str, docker_client: docker.DockerClient, tmp_path: Path, txn: bool
) -> None:
    output = finish(start_run(tmp_path / "store", *(["--txn"] if txn else [])), f"tidemark run (txn={txn})")
    runs = sorted(path.parent for path in (tmp_path / "store").glob("*/*/results.json"))
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
    crashes = crashed_mid_call(ops)
    assert crashes, [op.value for op in ops if op.f == "client-crash"]
    for crash, ended in crashes:
        in_flight = crash.value["killed"]["in_flight"]
        assert ended.f == ("txn" if txn else "send")
        if not txn or in_flight == "commit":
            assert ended.type == "info", (crash.value, ended)  # the outcome is unknown
        else:
            assert ended.type in ("info", "fail"), (crash.value, ended)  # fail: never asked to commit
    assert any(ended.type == "info" for _, ended in crashes) or txn
    last_crash = max(crash.time for crash, _ in crashes)
    later = [op for op in ops if op.time > last_crash and op.type == "ok" and op.f in ("send", "txn")]
    assert later, "no producer went on after the crash"
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
