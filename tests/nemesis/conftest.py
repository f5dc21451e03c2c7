"""Fixtures the nemesis tests share: a recorder with its ops, and a cluster of network namespaces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.record.ops import Op
from testbed.record.recorder import Recorder
from tests.nemesis.netns import NetnsCluster, namespaces_available


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Recorder, list[Op]]]:
    """A recorder writing ``history.jsonl`` under ``tmp_path``, and the list of every op it records."""
    recorder = Recorder(tmp_path / "history.jsonl")
    ops: list[Op] = []
    recorder.listeners.append(ops.append)
    yield recorder, ops
    recorder.close()


@pytest.fixture
def netns(tmp_path: Path) -> Iterator[NetnsCluster]:
    """Real nodes without containers (:mod:`tests.nemesis.netns`): skipped where namespaces cannot
    be made, failed under ``CI=true``; every namespace is gone afterwards, or the test fails."""
    problem = namespaces_available()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    with NetnsCluster(tmp_path) as made:
        yield made
    assert made.leftovers() == [], "namespaces left behind"
