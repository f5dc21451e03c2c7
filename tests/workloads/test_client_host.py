"""Clients in child processes (``workloads.client_host``, ``workloads.client_child``), without a broker.

Real child processes and real client libraries: a confluent-kafka producer bootstrapped at a port
nobody listens on holds each ``send`` for its delivery timeout (seconds), which is the window a
crash lands in.  What is checked: a crash mid-call ends that call as the interface's unknown
outcome (``IndefiniteFailure`` for a plain producer, ``TxnFatal`` for a transactional one) and
its op ``info``; the crash report says which call it interrupted; errors keep their class across
the pipe; and no child process outlives its parent -- killed by SIGKILL, or its pipe closed.
"""

from __future__ import annotations

import io
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.record.history import read_history
from testbed.record.recorder import Recorder
from workloads.client_child import answer_of, serve
from workloads.client_host import ClientHost, HostedClient, HostedTxnProducer
from workloads.clients import DefiniteFailure, IndefiniteFailure
from workloads.queue import QueueSpec, QueueWorkload
from workloads.txn_clients import TxnFatal

NOBODY = "127.0.0.1:1"
"""A bootstrap address nobody listens on: the producer opens, its sends wait for their timeout."""
TIMEOUT = 3.0


def alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_crash_mid_send_is_an_unknown_outcome_and_leaves_no_process() -> None:
    host = ClientHost()
    producer = host.producer(7, "confluent-kafka", NOBODY, "all", True, TIMEOUT)
    pid = producer.hosted.pid
    thread, outcome = in_thread(lambda: producer.send("t", 0, "k0", "1", TIMEOUT))
    report = host.crash(12)
    thread.join(10)
    assert report == {
        "process": 7,
        "pid": pid,
        "client": "producer",
        "in_flight": "send",
        "interrupted": True,
    }
    assert isinstance(outcome.get("error"), IndefiniteFailure), outcome
    assert "crashed mid-send" in str(outcome["error"]) and "SIGKILL" in str(outcome["error"])
    assert not alive(pid) and host.running() == []
    producer.close()  # a dead client's close does nothing and never raises
    with pytest.raises(LookupError, match="no producer process is running"):
        host.crash(0)


def test_a_transactional_producer_crashed_mid_call_is_fatal() -> None:
    host = ClientHost()
    hosted = host.producer(3, "confluent-kafka", NOBODY, "all", True, TIMEOUT).hosted
    txn = HostedTxnProducer(hosted, TIMEOUT)  # the pipe's mapping; its send is the plain one's
    thread, outcome = in_thread(lambda: txn.send("t", 0, "k0", "1", TIMEOUT))
    assert host.crash(0)["interrupted"] is True
    thread.join(10)
    assert isinstance(outcome.get("error"), TxnFatal) and "crashed mid-send" in str(outcome["error"])
    with pytest.raises(TxnFatal, match="crashed mid-commit"):
        txn.commit(TIMEOUT)  # the process is gone: every later call is fatal too
    assert hosted.died_in == "send"  # the call the crash interrupted, not the later ones
    txn.close()


def test_the_workload_records_the_crashed_send_info_and_retires_its_process(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history.jsonl")
    spec = QueueSpec(
        producers=1, consumers=0, client="confluent-kafka", request_timeout=TIMEOUT, client_processes=True
    )
    workload = QueueWorkload(spec, recorder, NOBODY, "t")
    assert workload.crash_unavailable() is None
    producer = workload._new_producer(0)
    thread, outcome = in_thread(lambda: workload._send(producer, 0, 1, 1))
    report = workload.crash_client(5)
    thread.join(10)
    recorder.close()
    assert outcome == {"result": False}  # False: the process must retire
    [invoke, completion] = read_history(tmp_path / "history.jsonl")[0]
    assert (invoke.type, completion.type, completion.process) == ("invoke", "info", report["process"])
    assert "crashed mid-send" in str(completion.error)


def test_without_client_processes_the_workload_refuses_a_crash(tmp_path: Path) -> None:
    workload = QueueWorkload(QueueSpec(), Recorder(tmp_path / "history.jsonl"), NOBODY, "t")
    assert "--client-processes" in str(workload.crash_unavailable())
    with pytest.raises(LookupError, match="--client-processes"):
        workload.crash_client(0)
    with pytest.raises(ValueError, match="cannot host --txn-ctp"):
        QueueSpec(txn=True, txn_ctp=True, client_processes=True)


def test_a_failed_open_raises_in_the_parent_and_ends_the_child() -> None:
    host = ClientHost()
    with pytest.raises(TxnFatal, match="no client process"):
        host.txn_producer(1, "no-such-client", NOBODY, "tid", TIMEOUT)
    assert wait_for(lambda: host.running() == [], 5)
    host.shutdown()
    with pytest.raises(Exception, match="shut down"):
        host.producer(2, "confluent-kafka", NOBODY, "all", True, TIMEOUT)


class Client:
    def send(self, *args: Any) -> int:
        raise DefiniteFailure("queue full")

    def commit(self, timeout: float) -> None:
        raise KeyError("surprise")


def test_answers_name_the_errors_the_interfaces_know_and_only_those() -> None:
    assert answer_of(None, {"call": "send", "args": []})[1]["error"] == "other"  # not open yet
    assert answer_of(Client(), {"call": "send", "args": []})[1] == {
        "error": "DefiniteFailure",
        "text": "queue full",
    }
    assert answer_of(Client(), {"call": "commit", "args": [1]})[1] == {
        "error": "other",
        "text": "KeyError: 'surprise'",
    }
    assert answer_of(Client(), {"call": "__class__"})[1]["error"] == "other"  # only the interface's calls
    requests: queue.Queue[dict[str, Any]] = queue.Queue()
    for request in ({"call": "send", "args": []}, {"call": "close"}):
        requests.put(request)
    answers = io.StringIO()
    serve(requests, answers)  # ends after answering close
    assert [json.loads(line)["error"] for line in answers.getvalue().splitlines()] == ["other", "other"]


def test_a_child_dies_with_its_parent_killed_by_sigkill(tmp_path: Path) -> None:
    """The harness killed outright: PR_SET_PDEATHSIG takes the client process with it."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from workloads.client_host import ClientHost\n"
        f"producer = ClientHost().producer(0, 'confluent-kafka', {NOBODY!r}, 'all', True, 3.0)\n"
        "print(producer.hosted.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait(10)
    assert wait_for(lambda: not alive(child), 5), f"client process {child} outlived its parent"


def test_a_child_ends_when_its_pipe_closes() -> None:
    """The watchdog: end of file on its requests ends the process even while no call is made."""
    hosted = HostedClient("producer", 0)
    pid = hosted.pid
    stdin = hosted._popen.stdin
    assert stdin is not None
    stdin.close()
    assert hosted._popen.wait(10) == 0 and not alive(pid)
