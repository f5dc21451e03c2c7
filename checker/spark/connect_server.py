"""A Spark Connect server from the installed PySpark, for as long as a block (or ``tidemark spark serve``) runs.

The checker's Spark floor on small runs is a fresh driver JVM (its JIT and class loading), paid
again by every ``tidemark check``, every campaign check and every per-run check of a hunt.  A
Spark Connect server is a driver that stays: :func:`connect_server` starts one and the checker
reaches it as a client (:mod:`checker.spark.remote`), so campaigns and hunts pay the JVM once.

How it starts: ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
(the server is in the wheel's ``jars/``), in the foreground as a child process, with the driver
settings an embedded session gets (:mod:`checker.spark.session`: JIT thresholds, the class
archive, no UI) and this interpreter for its Python workers (``applyInPandas`` of
:mod:`checker.txn` imports this package there).  Not PySpark's helpers: ``remote("local")``
runs the server inside this process's own JVM, and 4.3's ``pyspark.sql.connect.local_server``
daemonises it (``sbin/start-connect-server.sh``) to outlive its caller until told to stop --
the opposite of the clean-up contract below.

Ready means answering: a gRPC call (:func:`checker.spark.remote.server_version`) succeeds, polled
while the server lives; the port is the one its log says it bound (Spark takes the next port when
the one asked for is taken).  Its log is a file (WARN and the start line only: a long campaign's
checks would fill it at INFO).

Clean-up contract, as :mod:`checker.spark.standalone`'s daemons (whose process helpers it uses):
the server is stopped -- SIGTERM to its process group (its Python workers included), SIGKILL
after a grace period -- when the block ends, also on an exception or Ctrl-C; and the kernel
SIGKILLs it when the thread that started it dies (``PR_SET_PDEATHSIG``), so even a SIGKILLed
caller leaves no JVM behind.  Bound to 127.0.0.1 unless told otherwise: the server runs whatever
plan a client sends it (Python too), so it must not listen where strangers reach it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from checker.spark.remote import Remote, ServerUnreachable, server_version
from checker.spark.session import (
    DEFAULT_DRIVER_MEMORY,
    STATIC_SETTINGS,
    driver_java_options,
    session_settings,
)
from checker.spark.standalone import die_with_parent, free_port, spark_home, stop_group

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
"""Spark Connect's own default port (what ``sc://HOST`` without a port means to PySpark)."""
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MASTER = "local[2]"
READY_TIMEOUT_S = 180.0
"""How long the server may take to answer (a JVM start on a loaded 2-core machine takes 10-40 s)."""
PROBE_TIMEOUT_S = 2.0
_STARTED = re.compile(r"Spark Connect server started at: \S*?:(\d+)")
_WILDCARD = ("0.0.0.0", "::", "")
_LOG_CONFIG = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.server.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.server.level = info
"""


class ConnectServerError(RuntimeError):
    """The server did not come up: the message says why and ends with its log's tail."""


@dataclasses.dataclass(frozen=True)
class ConnectServer:
    """A running server: its address for clients, its JVM and its log."""

    url: str
    """``sc://HOST:PORT``, for ``--remote`` and :func:`checker.spark.remote.parse_remote`."""
    process: subprocess.Popen[bytes]
    log: Path
    master: str


def server_command(
    host: str, port: int, master: str, driver_memory: str, work: Path, conf: Mapping[str, str] | None = None
) -> list[str]:
    """The ``spark-submit`` command line of a server on ``host:port`` over ``master``; ``conf``
    adds or overrides Spark settings (a profile's event log: ``bench/warm_profile.py``)."""
    local = master.startswith("local")
    java = [*driver_java_options(), f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}"]
    settings = {
        **STATIC_SETTINGS,
        **session_settings(local),
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.extraJavaOptions": " ".join(java),
        "spark.local.dir": str(work / "scratch"),
        **(conf or {}),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    command += ["--name", "tidemark-connect", "--master", master, "--driver-memory", driver_memory]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def _environment(host: str) -> dict[str, str]:
    env = dict(os.environ)
    for switch in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE"):
        env.pop(switch, None)  # this process may be a Connect client: the server is not one
    env.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable))
    if host not in _WILDCARD:
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1" if host in ("127.0.0.1", "localhost") else host)
    return env


def _tail(log: Path, lines: int = 15) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until_answering(process: subprocess.Popen[bytes], log: Path, port: int) -> int:
    """The port the server answers on, once it does; :class:`ConnectServerError` when it exits
    first or does not answer within :data:`READY_TIMEOUT_S`."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise ConnectServerError(
                f"the Spark Connect server exited with {process.returncode}; {log}:\n{_tail(log)}"
            )
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        started = _STARTED.search(text)
        bound = int(started.group(1)) if started else port
        with contextlib.suppress(ServerUnreachable):
            server_version(Remote(f"sc://127.0.0.1:{bound}", "127.0.0.1", bound), PROBE_TIMEOUT_S)
            return bound
        if time.monotonic() > deadline:
            raise ConnectServerError(
                f"the Spark Connect server did not answer within {READY_TIMEOUT_S:g} s; {log}:\n{_tail(log)}"
            )
        time.sleep(0.25)  # polling the condition above, not waiting for a time


@contextlib.contextmanager
def connect_server(
    port: int | None = None,
    host: str = DEFAULT_HOST,
    master: str = DEFAULT_MASTER,
    *,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    work_dir: Path | None = None,
    conf: Mapping[str, str] | None = None,
) -> Iterator[ConnectServer]:
    """A Spark Connect server on ``host:port`` (``port`` None or 0: a free one) over ``master``,
    answering when the block starts and stopped when it ends (see the module docstring).

    ``work_dir`` keeps its log and scratch (default: a temporary directory removed afterwards);
    ``conf``: more Spark settings for the server (:func:`server_command`).
    :class:`ConnectServerError` when it exits or does not answer within :data:`READY_TIMEOUT_S`.
    """
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        raise ConnectServerError("no Java runtime (java on PATH or JAVA_HOME): Spark needs Java 17")
    owned = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tidemark-connect-")) if work_dir is None else work_dir
    (work / "scratch").mkdir(parents=True, exist_ok=True)
    (work / "log4j2.properties").write_text(_LOG_CONFIG, encoding="utf-8")
    asked = port or free_port()
    log = work / "connect-server.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        with log.open("wb") as sink:
            process = subprocess.Popen(
                server_command(host, asked, master, driver_memory, work, conf),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=_environment(host),
                cwd=work,
                start_new_session=True,  # its own process group: stopped whole, Python workers included
                preexec_fn=die_with_parent(os.getpid()),
            )
        bound = _wait_until_answering(process, log, asked)
        shown = socket.getfqdn() if host in _WILDCARD else host
        yield ConnectServer(f"sc://{shown}:{bound}", process, log, master)
    finally:
        if process is not None:
            stop_group(process)
        if owned:
            shutil.rmtree(work, ignore_errors=True)
