"""Shared fixtures: one SparkSession for every Spark test of the checker (start-up costs 5-12 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from checker.spark.session import spark_session

    with spark_session("local[2]", driver_memory="2g") as session:
        yield session


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A few small runs, loaded from their directories and from their packed store
    (:func:`tests.checker.stored_runs.small_store`), shared by a module's tests."""
    from tests.checker.stored_runs import small_store

    return small_store(tmp_path_factory.mktemp("store"))
