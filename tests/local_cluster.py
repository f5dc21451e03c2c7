"""The ``start_cluster`` fixture: the bundled broker as real local processes, always torn down."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from broker_impl.localcluster import LocalCluster

ClusterFactory = Callable[..., LocalCluster]


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """``start_cluster(brokers=3, settings)`` -> a running LocalCluster, always torn down."""
    started: list[LocalCluster] = []

    def start(brokers: int = 3, settings: Mapping[str, object] | None = None) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster-{len(started)}")
        started.append(cluster)
        cluster.up(
            brokers,
            {
                key: str(value).lower() if isinstance(value, bool) else str(value)
                for key, value in (settings or {}).items()
            },
        )
        return cluster

    yield start
    for cluster in started:
        cluster.down()
