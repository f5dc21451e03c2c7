"""The bundled cluster puts every event log where it collects the node logs (no Docker).

Each node is a directory standing in for its filesystem: ``configure`` writes the properties
files there, a broker and the controller open their event logs exactly as they would from
those files, and ``collect_logs`` must bring the events into the run's ``nodes/<node>/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from broker_impl import config as broker_config
from broker_impl.events import BROKER_EVENTS_FILE, CONTROLLER_EVENTS_FILE, open_event_log
from testbed.cluster.bundled import (
    CONFIG_DIR,
    LOG_DIR,
    BundledCluster,
    SettingsError,
    effective_settings,
    split_settings,
)
from testbed.cluster.kafka_admin import ClusterUnavailable
from testbed.nodes.remote import CommandFailed, ExecResult, Remote
from testbed.record.events import read_events


class DirectoryNode:
    """The part of a Remote that ``configure`` and ``collect_logs`` use, on a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def local(self, remote_path: str) -> Path:
        return self.root / remote_path.lstrip("/")

    def exec(self, command: Sequence[str], **_options: Any) -> ExecResult:
        assert list(command[:2]) == ["mkdir", "-p"], command
        for directory in command[2:]:
            self.local(directory).mkdir(parents=True, exist_ok=True)
        return ExecResult(0, b"", b"")

    def put(self, source: bytes, remote_path: str, **_options: Any) -> None:
        self.local(remote_path).parent.mkdir(parents=True, exist_ok=True)
        self.local(remote_path).write_bytes(source)

    def get(self, remote_path: str, local_path: Path, **_options: Any) -> None:
        shutil.copytree(self.local(remote_path), local_path, dirs_exist_ok=True)


def _cluster(tmp_path: Path) -> tuple[BundledCluster, dict[str, DirectoryNode]]:
    nodes = {name: DirectoryNode(tmp_path / "nodes" / name) for name in ("controller", "n1", "n2")}
    cluster = BundledCluster(
        {name: cast(Remote, node) for name, node in nodes.items()},
        {"controller": "10.0.0.2", "n1": "10.0.0.3", "n2": "10.0.0.4"},
        ["n1", "n2"],
        "controller",
        {},
    )
    cluster.configure()
    return cluster, nodes


def _settings(node: DirectoryNode, name: str, keys: tuple[broker_config.Key, ...]) -> dict[str, Any]:
    text = node.local(f"{CONFIG_DIR}/{name}").read_text()
    return broker_config.parse_properties(text, name, keys)


def test_event_logs_are_written_where_the_node_logs_are_collected(tmp_path: Path) -> None:
    cluster, nodes = _cluster(tmp_path)
    run_nodes = tmp_path / "run" / "nodes"
    for name, file_name, properties, keys, default in (
        ("n1", BROKER_EVENTS_FILE, "broker.properties", broker_config.BROKER_KEYS, "log.dirs"),
        (
            "controller",
            CONTROLLER_EVENTS_FILE,
            "controller.properties",
            broker_config.CONTROLLER_KEYS,
            "metadata.log.dir",
        ),
    ):
        settings = _settings(nodes[name], properties, keys)
        assert settings["event.log.enable"] is True
        assert settings["event.log.dir"] == LOG_DIR, "beside the process logs, off the lazy filesystem"
        # The process opens its log as it would on the node (its paths mapped into the directory).
        local = {**settings, "event.log.dir": str(nodes[name].local(settings["event.log.dir"]))}
        log = open_event_log(local, settings[default], file_name, 1)
        log.emit("start", format="tidemark-broker-events", schema_version=1)
        log.close()
        cluster.collect_logs(name, run_nodes / name)
        assert [event["kind"] for event in read_events(run_nodes / name / file_name)] == ["start"]


def test_the_event_log_directory_is_not_a_setting_to_change() -> None:
    with pytest.raises(SettingsError, match=r"event\.log\.dir: not a setting the harness lets you change"):
        split_settings({"event.log.dir": "/tmp/elsewhere"})
    assert split_settings({"event.log.enable": "false"}) == (
        {"event.log.enable": "false"},
        {"event.log.enable": "false"},
    )
    effective = effective_settings({})
    assert effective["event.log.enable"] == "true", "test.json records whether event logs were written"
    assert "event.log.dir" not in effective


def test_a_replica_read_that_fails_is_no_answer_this_time_not_an_error(tmp_path: Path) -> None:
    # A follower's truncation can remove a segment between the dump listing and reading it: the
    # dump exits non-zero, and a scenario's wait must poll again rather than fail the run.
    class FailingDump(DirectoryNode):
        def exec(self, command: Sequence[str], **_options: Any) -> ExecResult:
            if "broker_impl.dump" in command:
                raise CommandFailed(
                    "n1", " ".join(command), 1, b"", b"FileNotFoundError: 00000000000000000512.log"
                )
            return super().exec(command)

    cluster = BundledCluster(
        {"n1": cast(Remote, FailingDump(tmp_path))}, {"n1": "10.0.0.3"}, ["n1"], None, {}
    )
    with pytest.raises(ClusterUnavailable, match=r"n1's replica could not be read: .*FileNotFoundError"):
        cluster.replica_log_end("n1", "queue", 0)
