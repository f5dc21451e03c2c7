"""The checker as a Spark Connect client: ``tidemark check --remote sc://HOST:PORT``.

A fresh driver JVM pays its JIT compilers and class loading again for every check (at 1000 small
runs most of a check's CPU); a Spark Connect server (:mod:`checker.spark.connect_server`, or any
Spark 4.3 cluster's) is a driver that stays warm between checks, and the checker reaches it as a
thin client: :func:`remote_session` gives a session whose DataFrames are plans sent over gRPC.
The engine (:mod:`checker.spark.engine`) is the same code either way, since it uses the
DataFrame API only -- no RDD, no ``SparkContext``, no JVM in this process (``applyInPandas``
runs on the server's Python workers, which must import this package: a server started by
``tidemark spark serve`` uses this virtualenv).

What the server reads, it reads by the paths this process names: the stored runs' Parquet files
(absolute paths) and the links of a bucketed table (:mod:`checker.spark.inputs`, in a temporary
directory here).  On one machine that is given; a server elsewhere must see the store at the
same paths, and then gets no bucketed tables (:func:`links_visible`).

Errors are for one line on a terminal: :class:`RemoteError` for a value that is not
``sc://HOST:PORT`` (the user's input), :class:`ServerUnreachable` when nothing answers there --
asked with one gRPC call before any session is made, so neither ends in a traceback.

One process, one mode: PySpark switches its functions to Spark Connect for the whole process
once a Connect session exists (``SPARK_CONNECT_MODE_ENABLED``); :func:`remote_session` restores
that switch when its block ends, but a process should not hold an embedded session and a
Connect session at once (the tests run Connect checks as subprocesses).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

from checker.spark.session import session_settings

REMOTE_FORM = "sc://HOST:PORT"
ANSWER_TIMEOUT_S = 10.0
"""How long the first gRPC call may take before a server counts as not answering."""
_REMOTE = re.compile(
    r"^sc://(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
    r":(?P<port>[0-9]{1,5})(?P<params>/(?:;[A-Za-z_]+=[^;/\s]*)*)?$"
)
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_MODE = "SPARK_CONNECT_MODE_ENABLED"


class RemoteError(ValueError):
    """A ``--remote`` value that is not ``sc://HOST:PORT`` (the message says what was given)."""


class ServerUnreachable(RuntimeError):
    """No Spark Connect server answers at the address (the message names it and why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Remote:
    """A parsed Spark Connect address; ``url`` is what PySpark is given (parameters included)."""

    url: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``sc://HOST:PORT`` without parameters (a ``token=`` stays out of messages)."""
        return f"sc://{self.host}:{self.port}"


def parse_remote(text: str) -> Remote:
    """``sc://HOST:PORT``, optionally with Spark Connect's parameters (``/;token=...;use_ssl=true``).

    :class:`RemoteError` for anything else: the port is required (Spark's default 15002 would
    silently reach some other server), and a path or a stray space is a typo, not an address.
    """
    match = _REMOTE.match(text.strip())
    port = int(match["port"]) if match else 0
    if match is None or not 0 < port < 65536:
        raise RemoteError(f"{text!r} is not a Spark Connect address: expected {REMOTE_FORM}")
    return Remote(text.strip(), match["host"], port)


def links_visible(remote: Remote) -> bool:
    """Whether a server at ``remote`` sees this machine's temporary files (it is on this machine):
    the condition for the bucketed tables of :mod:`checker.spark.inputs`, whose links are here."""
    return remote.host in _LOOPBACK


def server_version(remote: Remote, timeout: float = ANSWER_TIMEOUT_S) -> str:
    """The Spark version the server at ``remote`` answers with: one gRPC call, no session kept.

    :class:`ServerUnreachable` (naming the address) when nothing answers within ``timeout``.
    Made with PySpark's own channel builder and messages, so whatever ``remote``'s parameters
    say (a token, TLS) applies; it does not switch this process to Spark Connect mode.
    """
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    builder = DefaultChannelBuilder(remote.url)
    session = str(uuid.uuid4())
    user = base_pb2.UserContext(user_id="tidemark")
    with builder.toChannel() as channel:
        stub = base_pb2_grpc.SparkConnectServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            answer = stub.AnalyzePlan(
                base_pb2.AnalyzePlanRequest(
                    session_id=session,
                    user_context=user,
                    spark_version=base_pb2.AnalyzePlanRequest.SparkVersion(),
                ),
                timeout=timeout,
                metadata=builder.metadata(),
            )
            with contextlib.suppress(grpc.RpcError):  # the server drops idle sessions itself too
                stub.ReleaseSession(
                    base_pb2.ReleaseSessionRequest(session_id=session, user_context=user),
                    timeout=timeout,
                    metadata=builder.metadata(),
                )
        except grpc.RpcError as error:
            detail = " ".join(str(error.details() or error.code()).split())
            raise ServerUnreachable(
                f"no Spark Connect server answers at {remote.address} ({detail})"
            ) from None
    return str(answer.spark_version.version)


@contextlib.contextmanager
def remote_session(remote: Remote, timeout: float = ANSWER_TIMEOUT_S) -> Iterator[Any]:
    """A Spark Connect session on the server at ``remote``, configured as an embedded one is
    (:func:`checker.spark.session.session_settings`, for the server's master), released when the
    block ends -- the server and its JVM go on.

    :class:`ServerUnreachable` first when the server does not answer (:func:`server_version`).
    """
    server_version(remote, timeout)
    from pyspark.sql import SparkSession

    from checker.spark.inputs import session_master  # PySpark's SQL modules: only when a session is made

    switched = _MODE not in os.environ
    session = SparkSession.builder.remote(remote.url).create()
    try:
        for key, value in session_settings(session_master(session).startswith("local")).items():
            session.conf.set(key, value)
        yield session
    finally:
        with contextlib.suppress(Exception):  # a server that went away has no session to release
            session.stop()
        if switched:
            os.environ.pop(_MODE, None)
