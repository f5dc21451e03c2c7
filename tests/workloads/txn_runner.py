"""Runs the queue workload's transactional modes against a local cluster for the cluster tests:
the main phase in a thread until the test's condition holds, then the final drain."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker_impl.localcluster import LocalCluster
from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from workloads.queue import QueueSpec, QueueWorkload


def run_then_drain(
    cluster: LocalCluster,
    spec: QueueSpec,
    topic: str,
    history: Path,
    listener: Callable[[Op], None],
    main_phase: Callable[[], None],
) -> None:
    """Record ``spec``'s workload on ``topic`` into ``history`` (``listener`` sees every op) while
    ``main_phase`` runs -- it asserts that the workload got far enough --, stop it, and drain every
    partition completely."""
    recorder = Recorder(history)
    recorder.listeners.append(listener)
    workload = QueueWorkload(spec, recorder, cluster.bootstrap(), topic)
    stop = threading.Event()
    thread = threading.Thread(target=workload.run, args=(stop,), daemon=True)
    thread.start()
    try:
        main_phase()
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive() and workload.errors == []
    cluster.wait_for_leaders(topic)
    try:
        assert all(workload.drain(time.monotonic() + 60).values()), "a partition's drain is incomplete"
    finally:
        recorder.close()
