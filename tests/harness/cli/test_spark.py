"""``tidemark spark serve``'s bad flags: one line naming the flag, exit 254, and no JVM started
(the serve lifecycle with a real server: ``tests/checker/spark/test_connect_server.py``)."""

from __future__ import annotations

import pytest

from harness.cli import spark as spark_cli
from harness.cli.main import main
from tests.harness.cli.commands import captured_one_line


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--port", "70000"], "--port 70000: expected 0-65535"),
        (["--port", "-1"], "--port -1: expected 0-65535"),
        (["--master", "yarn"], "--master 'yarn': expected local[N], local[*] or spark://HOST:PORT"),
        (["--master", "local[two]"], "--master 'local[two]'"),
        (["--host", "127.0.0.1/8"], "--host '127.0.0.1/8': expected an address"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_before_any_jvm(
    flags: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_server(*args: object, **kwargs: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr("checker.spark.connect_server.connect_server", no_server)
    assert main(["spark", "serve", *flags]) == 254
    captured_one_line(capsys, "tidemark spark: error: " + named)


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,2]", "spark://a:7077,b:7077"])
def test_the_masters_a_server_can_run_on_are_taken(master: str) -> None:
    assert spark_cli._MASTER.match(master)
