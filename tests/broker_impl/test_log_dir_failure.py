"""A storage error halts the broker (``broker_impl.log_dir_failure``), and nothing it acknowledged is lost.

Two layers:

* in this process: without an installed channel a storage error propagates unchanged (what unit
  tests and the dump tool rely on); with one, the decorated log operation calls the halt, which is
  stubbed here to raise instead of ending pytest;
* end to end: a real broker process on a real lazyfs mount (``nemesis.lazyfs``) with
  ``flush.messages=1``; the disk starts failing fsyncs of ``*.log`` with EIO; the next acks=all
  produce must not be acknowledged, the broker must halt with a ``log-dir-failure`` event, and after
  a power loss and a restart every record it did acknowledge must still be there.  The failed
  fsync lost the unsynced record for good (fsyncgate), so a broker that ignored the error and
  answered would fail the last check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from broker_impl import log_dir_failure
from broker_impl.events import EventLog
from broker_impl.localcluster import ClusterError, LocalCluster
from broker_impl.log import FlushPolicy, PartitionLog
from tests.nemesis import test_lazyfs
from tests.nemesis.test_lazyfs import LazyMount

from .client_support import produce_all, read_partition
from .conftest import ClusterFactory

lazy, mounter = test_lazyfs.lazy, test_lazyfs.mounter  # the real-mount fixtures, shared

TOPIC = "durable"
HALT_TIMEOUT_SECONDS = 20.0


class Halted(Exception):
    """Raised by the stubbed halt in place of ``os._exit``."""


@pytest.fixture
def halts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[tuple[str, str]]]:
    """An installed channel whose halt raises `Halted` after recording (operation, errno)."""
    recorded: list[tuple[str, str]] = []

    def halt(error: OSError, operation: str, where: Path | None) -> NoReturn:
        recorded.append((operation, os.strerror(error.errno or 0)))
        raise Halted(operation)

    log_dir_failure.install(EventLog.disabled(), tmp_path)
    assert log_dir_failure._channel is not None
    monkeypatch.setattr(log_dir_failure._channel, "halt", halt)
    yield recorded
    log_dir_failure.uninstall()


def _failing_fsync(descriptor: int) -> None:
    raise OSError(5, "Input/output error")


def test_without_a_channel_a_storage_error_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "t-0", 1 << 20, FlushPolicy(1, 1 << 60))
    monkeypatch.setattr(os, "fsync", _failing_fsync)
    log.unflushed_messages = 1
    with pytest.raises(OSError, match="Input/output error"):
        log.flush()


def test_with_a_channel_a_failed_flush_or_checkpoint_halts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, halts: list[tuple[str, str]]
) -> None:
    log = PartitionLog(tmp_path / "t-0", 1 << 20, FlushPolicy(1, 1 << 60))
    monkeypatch.setattr(os, "fsync", _failing_fsync)
    with pytest.raises(Halted):
        log.epochs.assign(0, 0)  # a leader-epoch checkpoint write
    log.flush()  # nothing unflushed: no fsync, no halt ...
    log.unflushed_messages = 1
    with pytest.raises(Halted):
        log.flush()  # ... until there is
    assert halts == [("checkpoint", "Input/output error"), ("flush", "Input/output error")]


# ---- end to end: a real broker on a real lazyfs -------------------------------------------------


def _wait_for_exit(cluster: LocalCluster, pid: int, timeout: float) -> int | None:
    """The exit status of ``cluster``'s child ``pid`` once it ended (-1: it ended but was reaped
    elsewhere; None: still running after ``timeout``)."""
    status: list[int] = []

    def ended() -> bool:
        try:
            finished, raw = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its status is gone, but it did end
            status.append(-1)
            return True
        if finished:
            status.append(os.waitstatus_to_exitcode(raw))
        return bool(finished)

    try:
        cluster.wait_for(ended, timeout, f"process {pid} to end")
    except ClusterError:
        return None
    return status[0]


def _produce_one(bootstrap: str, value: bytes) -> bool:
    """Whether an acks=all send of ``value`` was acknowledged (no retries: one attempt)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", retries=0, request_timeout_ms=5000, max_block_ms=5000
    )
    try:
        producer.send(TOPIC, value).get(timeout=15)
        return True
    except KafkaError:
        return False
    finally:
        producer.close(timeout=5)


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.parametrize(
    ("rule", "failure"),
    [
        ("fail fsync EIO *.log always", ("flush", "EIO")),
        ("fail write EROFS *.log always", ("append", "EROFS")),  # the log directory gone read-only
    ],
    ids=["fsync-EIO", "write-EROFS"],
)
def test_a_storage_error_halts_the_broker_and_no_acknowledged_record_is_lost(
    mounter: Callable[[Path], LazyMount],
    start_cluster: ClusterFactory,
    tmp_path: Path,
    rule: str,
    failure: tuple[str, str],
) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    disk = mounter(backing)
    cluster = start_cluster(1, {"log.dirs": str(disk.mountpoint), "flush.messages": 1})
    cluster.create_topic(TOPIC, 1, 1)
    acknowledged = (
        [b"before-the-fault"] if produce_all(cluster.bootstrap(), TOPIC, [b"before-the-fault"]) else []
    )
    pid = cluster.pid("1")
    disk.control(rule)
    if _produce_one(cluster.bootstrap(), b"on-the-failing-disk"):
        acknowledged.append(b"on-the-failing-disk")
    exit_status = None if len(acknowledged) == 2 else _wait_for_exit(cluster, pid, HALT_TIMEOUT_SECONDS)
    # Power loss, a new disk, a restart: what survives is what had reached the disk.
    cluster.kill("1")
    disk.control("drop")
    disk.control("clear")
    cluster.start("1")
    cluster.wait_ready()
    cluster.wait_for_leaders(TOPIC)
    survivors = [value for _, value in read_partition(cluster.bootstrap(), TOPIC)]
    lost = [value for value in acknowledged if value not in survivors]
    assert not lost, f"acknowledged, then lost at a power loss: {lost} (survivors: {survivors})"
    assert acknowledged == [b"before-the-fault"], "a produce was acknowledged after its fsync failed"
    assert exit_status == log_dir_failure.HALT_EXIT_CODE, f"the broker did not halt: {exit_status}"
    failures = [event for event in _events(cluster.events_path("1")) if event["kind"] == "log-dir-failure"]
    assert [(event["operation"], event["errno"]) for event in failures] == [failure]
    assert (
        "Shutdown broker because all log dirs"
        in (Path(cluster.state["brokers"]["1"]["dir"]) / "process.log").read_text()
    )
