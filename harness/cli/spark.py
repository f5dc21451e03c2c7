"""``tidemark spark serve [--port P] [--host 127.0.0.1] [--master local[2]|spark://...]``.

Starts a Spark Connect server from the installed PySpark (:mod:`checker.spark.connect_server`),
waits until it answers, prints its address (``sc://127.0.0.1:PORT``, the only line on standard
output) for ``tidemark check --remote``, and serves until Ctrl-C or SIGTERM, which stop it with
every process it started (exit 0).  A SIGKILLed ``tidemark`` takes the server with it too (the
kernel kills it: ``PR_SET_PDEATHSIG``).  Bad flags are one line (exit 254); a server that does not
come up says why, with the tail of its log (exit 2: 255 is kept for bugs).
"""

from __future__ import annotations

import argparse
import re
import signal
import sys

from checker.spark.session import DEFAULT_DRIVER_MEMORY
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_UNKNOWN, EXIT_VALID

DEFAULT_PORT = 15002
"""Spark Connect's own default port (as :data:`checker.spark.connect_server.DEFAULT_PORT`, kept
here so ``tidemark --help`` imports no checker module that needs gRPC)."""
_MASTER = re.compile(r"^(local(\[([0-9]+|\*)(,[0-9]+)?\])?|spark://[^\s/]+(,[^\s/]+)*)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="spark_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    serve = sub.add_parser("serve", help="run a Spark Connect server until Ctrl-C and print its address")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument(
        "--master", default="local[2]", help="local[N], local[*] or a standalone master's spark://HOST:PORT"
    )
    serve.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY, help="the server's driver heap")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port {args.port}: expected 0-65535 (0: any free port)")
    if not _MASTER.match(args.master):
        raise UsageError(f"--master {args.master!r}: expected local[N], local[*] or spark://HOST:PORT")
    if not args.host.strip() or any(c.isspace() or c == "/" for c in args.host):
        raise UsageError(f"--host {args.host!r}: expected an address such as 127.0.0.1")
    from checker.spark.connect_server import ConnectServerError, connect_server

    # SIGTERM ends the block as Ctrl-C does, so the server is stopped either way.  SIGINT too, set
    # here rather than left to Python: a process started with SIGINT ignored (a script's `cmd &`,
    # which ignores it for its background jobs; a CI runner under nohup) inherits the ignore, and
    # Python then installs no handler -- `kill -INT` would do nothing and the server run on.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with connect_server(
            args.port or None, args.host, args.master, driver_memory=args.driver_memory
        ) as server:
            print(server.url, flush=True)
            print(f"serving (log {server.log}); Ctrl-C stops it", file=sys.stderr, flush=True)
            code = server.process.wait()
            last = server.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        print(f"tidemark spark serve: error: the server exited with {code}: {''.join(last)}", file=sys.stderr)
        return EXIT_UNKNOWN
    except ConnectServerError as error:  # what it said before it died: the log goes with its directory
        print(f"tidemark spark serve: error: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return EXIT_VALID
