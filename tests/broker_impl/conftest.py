"""Fixtures for tests that run the bundled broker as real local processes (see tests/local_cluster.py)."""

from __future__ import annotations

from tests.local_cluster import ClusterFactory, start_cluster

__all__ = ["ClusterFactory", "start_cluster"]
