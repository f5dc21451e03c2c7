"""The bundled cluster's live replica reads (``LiveReplicas``) over the real dump tool.

A node here is a local directory standing in for a container: its ``exec`` runs the command the
cluster asks for (``python -m broker_impl.dump --summary DATA_DIR``) with this interpreter on the
directory, so the parsing under test reads what the real tool prints from a real partition log
and a real HW checkpoint file.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from broker_impl import records
from broker_impl.checkpoints import HighWatermarkCheckpoint
from broker_impl.config import NEVER
from broker_impl.log import FlushPolicy, PartitionLog
from testbed.cluster.bundled import BundledCluster
from testbed.cluster.protocol import LiveReplicas
from testbed.nodes.remote import ExecResult, Remote
from tests.broker_impl.batch_builder import make_batch


class DumpingNode:
    def __init__(self, root: Path) -> None:
        self.root = root

    def exec(self, command: Sequence[str], **_options: Any) -> ExecResult:
        assert list(command[1:4]) == ["-m", "broker_impl.dump", "--summary"], command
        local = self.root / command[4].lstrip("/")
        done = subprocess.run(
            [sys.executable, "-m", "broker_impl.dump", "--summary", str(local)],
            capture_output=True,
            check=True,
        )
        return ExecResult(done.returncode, done.stdout, done.stderr)


def test_a_running_replica_reads_as_its_log_end_and_its_checkpointed_high_watermark(tmp_path: Path) -> None:
    cluster = BundledCluster(
        {"n1": cast(Remote, DumpingNode(tmp_path))}, {"n1": "10.0.0.3"}, ["n1"], None, {}
    )
    assert isinstance(cluster, LiveReplicas)
    data = tmp_path / cluster.data_dir.lstrip("/")
    for partition, values in ((0, 6), (1, 2)):
        log = PartitionLog(
            data / f"orders-{partition}", 1 << 20, FlushPolicy(messages=NEVER, milliseconds=NEVER)
        )
        batch = make_batch([b"v"] * values)
        log.append_as_leader(batch, records.validate(batch), 0)
        log.close()
    checkpoint = HighWatermarkCheckpoint(data)
    checkpoint.write([(("orders", 0), 4), (("orders", 1), 2)])

    assert cluster.replica_log_end("n1", "orders", 0) == 6
    assert cluster.replica_checkpointed_high_watermark("n1", "orders", 0) == 4
    assert cluster.replica_checkpointed_high_watermark("n1", "orders", 1) == 2
    assert cluster.replica_checkpointed_high_watermark("n1", "orders", 2) is None
    assert cluster.replica_log_end("n1", "elsewhere", 0) is None

    checkpoint.write([(("orders", 0), 6), (("orders", 1), 2)])  # the broker's next checkpoint
    assert cluster.replica_checkpointed_high_watermark("n1", "orders", 0) == 6
