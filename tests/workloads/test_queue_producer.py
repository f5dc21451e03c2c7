"""The queue workload's producer loop with fake clients: a send whose outcome is unknown retires
its process, and the fresh process sends through a client of its own (Jepsen's interpreter reopens
a crashed worker's client) -- a stuck client would otherwise time out every later send."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from testbed.record.recorder import Recorder
from workloads import queue as queue_module
from workloads.clients import IndefiniteFailure
from workloads.queue import QueueSpec, QueueWorkload


class FakeProducer:
    """Acknowledges every send at the next offset, or, when ``stuck``, never answers (info)."""

    def __init__(self, stuck: bool, after_sends: threading.Event, sends_wanted: int) -> None:
        self.stuck = stuck
        self.closed = False
        self.sends = 0
        self.after_sends = after_sends
        self.sends_wanted = sends_wanted

    def send(self, topic: str, partition: int, key: str, value: str, timeout: float) -> int:
        if self.stuck:
            raise IndefiniteFailure("KafkaTimeoutError: Timeout after waiting for 5.0 secs.")
        self.sends += 1
        if self.sends >= self.sends_wanted:
            self.after_sends.set()
        return self.sends - 1

    def close(self) -> None:
        self.closed = True


def test_a_process_retired_by_an_unknown_outcome_is_replaced_with_a_fresh_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = threading.Event()
    made: list[FakeProducer] = []
    refusals = [RuntimeError("NoBrokersAvailable")]  # the first reopen finds no broker

    def make_producer(*_: Any) -> FakeProducer:
        if made and refusals:
            raise refusals.pop()
        made.append(FakeProducer(stuck=not made, after_sends=stop, sends_wanted=3))
        return made[-1]

    monkeypatch.setattr(queue_module, "make_producer", make_producer)
    recorder = Recorder(tmp_path / "history.jsonl")
    ops: list[Any] = []
    recorder.listeners.append(ops.append)
    workload = QueueWorkload(QueueSpec(producers=1, consumers=1, rate=0.0), recorder, "x:9092", "t")
    worker = threading.Thread(target=workload._produce, args=(0, stop))
    worker.start()
    acknowledged = stop.wait(10)
    stop.set()  # ends the loop also when the test fails
    worker.join(10)
    recorder.close()
    assert acknowledged, "the fresh process' client never acknowledged"

    completions = [(op.process, op.type) for op in ops if op.type != "invoke"]
    assert completions[0] == (0, "info"), "the stuck client's send: outcome unknown"
    assert completions[1:] == [(2, "ok")] * 3, "a fresh process (ids 0, 1 taken) on a fresh client"
    assert len(made) == 2 and made[0].closed and made[1].closed, "the stuck client was closed"
    assert refusals == [], "a reopen that found no broker was tried again"
