"""The Spark Connect client's contract before any session: what ``--remote`` accepts, and that a
server that does not answer is one sentence naming its address -- no JVM, no server needed.

(Checks through a live server, and their parity with pandas: ``test_connect_server.py``.)
"""

from __future__ import annotations

import os
import socket

import pytest

from checker.spark.remote import (
    Remote,
    RemoteError,
    ServerUnreachable,
    links_visible,
    parse_remote,
    server_version,
)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("sc://127.0.0.1:15002", "127.0.0.1", 15002),
        ("sc://spark-head.example.org:443/;use_ssl=true;token=abc", "spark-head.example.org", 443),
        ("sc://[::1]:15002", "[::1]", 15002),
        (" sc://localhost:1 ", "localhost", 1),
    ],
)
def test_an_address_with_a_port_is_taken(text: str, host: str, port: int) -> None:
    remote = parse_remote(text)
    assert (remote.host, remote.port) == (host, port)
    assert remote.address == f"sc://{host}:{port}"  # parameters (a token) stay out of messages


@pytest.mark.parametrize(
    "text",
    [
        "localhost:15002",  # no scheme
        "sc://localhost",  # no port: Spark's default would reach whatever listens there
        "sc://localhost:0",
        "sc://localhost:65536",
        "spark://localhost:7077",  # a master, not a Connect server
        "sc://local host:15002",
        "sc://localhost:15002/path",
        "",
    ],
)
def test_anything_else_is_refused_naming_the_expected_form(text: str) -> None:
    with pytest.raises(RemoteError, match=r"expected sc://HOST:PORT"):
        parse_remote(text)


def test_only_a_server_on_this_machine_sees_the_bucketed_tables_links() -> None:
    assert links_visible(parse_remote("sc://127.0.0.1:15002"))
    assert links_visible(parse_remote("sc://localhost:15002"))
    assert not links_visible(parse_remote("sc://spark-head:15002"))


def test_a_port_nobody_answers_on_is_one_sentence_naming_the_address() -> None:
    with socket.socket() as taken:  # bound, never listening: connections are refused
        taken.bind(("127.0.0.1", 0))
        port = int(taken.getsockname()[1])
        remote = Remote(f"sc://127.0.0.1:{port}", "127.0.0.1", port)
        with pytest.raises(ServerUnreachable) as caught:
            server_version(remote, timeout=5)
    message = str(caught.value)
    assert message.startswith(f"no Spark Connect server answers at sc://127.0.0.1:{port} (")
    assert "\n" not in message
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # asking switched this process to nothing
