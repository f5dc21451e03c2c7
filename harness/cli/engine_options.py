"""The Spark Connect flags of every command that chooses a checker engine.

``--remote sc://HOST:PORT`` (``check``, ``analyze``, ``run``, ``rerun``, ``campaign``, ``hunt``):
check through that Spark Connect server (:mod:`checker.spark.remote`) instead of a driver JVM
of the command's own; it implies the Spark engine.  ``--no-spark-server`` (``campaign``,
``hunt``): do not start the server a Spark campaign or hunt otherwise checks through
(:mod:`harness.run.check_server`).

Both are checked before anything starts, each failure one line naming the flag (exit 254,
:class:`UsageError`): a value that is not ``sc://HOST:PORT``, ``--remote`` with ``--master``, and
a server that does not answer at the address.  ``--remote`` wins over ``--engine``, as
``--master`` does: both name a Spark to check on.
"""

from __future__ import annotations

import argparse

from harness.cli.errors import UsageError


def add_remote_option(parser: argparse.ArgumentParser) -> None:
    """``--remote``; :func:`remote_of` reads it back checked."""
    parser.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="check through this Spark Connect server (tidemark spark serve prints one); implies --engine spark."
        " The server reads the runs by their absolute paths: on another machine, mount the store at the same paths",
    )


def add_server_option(parser: argparse.ArgumentParser) -> None:
    """``--no-spark-server`` of the commands that check many runs one after another."""
    parser.add_argument(
        "--no-spark-server",
        action="store_true",
        help="with the Spark engine, start no Spark Connect server for the whole command: each check"
        " starts its own driver JVM (the server's 10-20 s start then buys nothing, e.g. one small check)",
    )


def remote_of(args: argparse.Namespace) -> str | None:
    """The ``--remote`` address, checked: its form, that no other flag contradicts it, and that a
    Spark Connect server answers there.  ``None`` without the flag."""
    remote: str | None = getattr(args, "remote", None)
    if remote is None:
        return None
    from checker.spark.remote import RemoteError, ServerUnreachable, parse_remote, server_version

    try:
        address = parse_remote(remote)
    except RemoteError as error:
        raise UsageError(f"--remote: {error}") from None
    if getattr(args, "master", None):
        raise UsageError("--remote and --master: choose one (a Connect server has its own master)")
    try:
        server_version(address)
    except ServerUnreachable as error:
        raise UsageError(f"--remote: {error}") from None
    return remote


def engine_of(args: argparse.Namespace, remote: str | None, default: str = "pandas") -> str:
    """The engine a command checks with: ``--remote`` implies Spark, else ``--engine`` (or
    ``default`` when the command leaves it unset, as a campaign does for its file's own)."""
    if remote:
        return "spark"
    engine: str | None = getattr(args, "engine", None)
    return engine or default
