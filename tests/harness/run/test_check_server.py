"""When a campaign or hunt starts its Spark Connect server, and what it does when the server does not
come up: the choice alone, with the server replaced by a stand-in (the real one:
``tests/checker/spark/test_connect_server.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checker.spark.connect_server import ConnectServer, ConnectServerError
from harness.run import check_server


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every server start asked for, by its keyword arguments; each answers at sc://127.0.0.1:1."""
    calls: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def fake(**options: Any) -> Iterator[ConnectServer]:
        calls.append(options)
        yield ConnectServer("sc://127.0.0.1:1", None, Path("/nowhere/connect-server.log"), options["master"])  # type: ignore[arg-type]
        calls.append({"stopped": True})

    monkeypatch.setattr(check_server, "connect_server", fake)
    return calls


@pytest.mark.parametrize(
    ("engine", "remote", "start"),
    [("pandas", None, True), ("spark", "sc://10.0.0.7:15002", True), ("spark", None, False)],
    ids=["pandas-needs-no-jvm", "a-given-server-is-used", "opted-out"],
)
def test_no_server_is_started_when_none_is_wanted(
    started: list[dict[str, Any]], engine: str, remote: str | None, start: bool
) -> None:
    said: list[str] = []
    with check_server.checking_remote(engine, remote, start=start, say=said.append) as through:
        assert through == remote
    assert not started and not said


def test_a_spark_block_checks_through_one_server_started_for_it_and_stopped_after(
    started: list[dict[str, Any]],
) -> None:
    said: list[str] = []
    with check_server.checking_remote(
        "spark", None, start=True, say=said.append, master="spark://m:7077"
    ) as through:
        assert through == "sc://127.0.0.1:1"
        assert started == [{"master": "spark://m:7077"}]
    assert started[-1] == {"stopped": True}
    assert len(said) == 1 and said[0].startswith("checking through the Spark Connect server sc://127.0.0.1:1")


def test_a_server_that_does_not_come_up_costs_a_jvm_per_check_not_the_campaign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextlib.contextmanager
    def failing(**options: Any) -> Iterator[ConnectServer]:
        raise ConnectServerError("the Spark Connect server exited with 1; /tmp/x.log:\nlast words")
        yield  # a generator, as the real one

    monkeypatch.setattr(check_server, "connect_server", failing)
    said: list[str] = []
    with check_server.checking_remote("spark", None, start=True, say=said.append) as through:
        assert through is None
    assert said == [
        "no Spark Connect server (the Spark Connect server exited with 1; /tmp/x.log:): "
        "each check starts its own Spark"
    ]
