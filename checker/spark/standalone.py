"""A Spark standalone cluster (one master, N workers) started from the PySpark package itself.

The checker's batch story includes "point it at a cluster": ``tidemark check --master
spark://HOST:7077`` and ``spark-submit harness/cli/spark_submit.py``.  That path differs from
``local[*]`` in ways that matter -- executors are separate JVMs that read the Parquet files
themselves, the bucketed-table trick of :mod:`checker.spark.inputs` is off, results travel
back over the network -- so it is tested against a real master and worker, not assumed.

PySpark's wheel ships ``bin/spark-class`` and every jar a master and a worker need, but not
``sbin/start-master.sh``; :func:`standalone_cluster` runs the two daemons in the foreground
as child processes instead (``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``),
bound to 127.0.0.1 on free ports, and returns once the master has registered every worker.

Clean-up contract (shared with :mod:`checker.spark.connect_server`, which uses the process
helpers here): the daemons are stopped (their whole process groups, executors included)
when the block ends, also on an exception or Ctrl-C; and each daemon gets SIGKILL from the
kernel when the process that started it dies (``PR_SET_PDEATHSIG``), so a SIGKILLed test run
leaves no JVM behind.  Run it as a module for a cluster to try the commands of the README::

    .venv/bin/python -m checker.spark.standalone --workers 1 --cores 2
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 120.0
"""How long the master and workers may take to come up (a JVM start on a loaded 2-core machine)."""
_PR_SET_PDEATHSIG = 1


class StandaloneError(RuntimeError):
    """The cluster did not come up: the message names the daemon and ends with its log's tail."""


@dataclasses.dataclass(frozen=True, slots=True)
class StandaloneCluster:
    """A running cluster: where to submit, and where its daemons log."""

    master_url: str
    logs: tuple[Path, ...]


def spark_home() -> Path:
    """The PySpark package directory, which is a complete ``SPARK_HOME`` (bin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A port of 127.0.0.1 free right now (another process may take it before it is bound)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _find_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the daemons are stopped by the block alone


_PRCTL = _find_prctl()
"""Looked up here, not in the child: between fork and exec a child of a threaded parent may
only call async-signal-safe code, and a ``dlopen`` is not."""


def die_with_parent(parent: int) -> Callable[[], None]:
    """What the child runs before exec: SIGKILL when ``parent`` dies (Linux).

    The kernel sends the signal when the *thread* that forked exits, so clusters are started
    from the thread that stops them (the ``with`` block's).  A parent that died before the
    call already made the child an orphan: it exits at once.
    """

    def arm() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)

    return arm


def _environment(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work),
        SPARK_WORKER_DIR=str(work / "worker"),
        # Executors need no Python (the checker has no UDFs), but a Python task would use this one.
        PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
    )
    return env


def _start(
    name: str, args: list[str], work: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    log = work / f"{name}.log"
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped whole, executors included
            preexec_fn=die_with_parent(os.getpid()),
        )
    return process, log


def _wait_for(
    pattern: str, count: int, log: Path, daemons: dict[str, tuple[subprocess.Popen[bytes], Path]]
) -> list[str]:
    """The first group of each of the first ``count`` matches of ``pattern`` in ``log``, once
    there are that many.  :class:`StandaloneError` when any daemon exits first (naming it and
    ending with its log) or :data:`READY_TIMEOUT_S` runs out."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    compiled = re.compile(pattern)
    while True:
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        found = [match.group(1) if match.groups() else match.group(0) for match in compiled.finditer(text)]
        if len(found) >= count:
            return found[:count]
        dead = [
            (name, process, path) for name, (process, path) in daemons.items() if process.poll() is not None
        ]
        if dead or time.monotonic() > deadline:
            name, process, path = dead[0] if dead else ("the Spark master", None, log)
            state = f"exited with {process.returncode}" if process is not None else "timed out"
            shown = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            tail = "\n".join(shown.splitlines()[-15:])
            raise StandaloneError(f"{name} {state} while waiting for {pattern!r} in {log}; {path}:\n{tail}")
        time.sleep(0.2)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a daemon's process group: SIGTERM, then SIGKILL; never raises (clean-up goes on)."""
    if process.poll() is not None:
        return
    for sent, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sent)
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 1, cores: int = 1, memory: str = "1g", work_dir: Path | None = None
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1, stopped afterwards.

    ``work_dir`` keeps the daemons' logs and the workers' scratch (default: a temporary
    directory removed afterwards).  Raises :class:`StandaloneError` when a daemon dies or does
    not register within :data:`READY_TIMEOUT_S`.
    """
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        raise StandaloneError("no Java runtime (java on PATH or JAVA_HOME): Spark needs Java 17")
    owned = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tidemark-standalone-")) if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    env = _environment(work)
    port = free_port()
    daemons: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        master, master_log = _start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            work,
            env,
        )
        daemons["the Spark master"] = (master, master_log)
        # The URL the master reports: if another process took the port meanwhile, Spark binds
        # the next one, and the workers must be told that one.
        (master_url,) = _wait_for(r"Starting Spark master at (spark://\S+)", 1, master_log, daemons)
        _wait_for(r"I have been elected leader", 1, master_log, daemons)
        for number in range(workers):
            worker, worker_log = _start(
                f"worker-{number}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work / f"worker-{number}"),
                ],
                work,
                env,
            )
            daemons[f"Spark worker {number}"] = (worker, worker_log)
        _wait_for(r"Registering worker", workers, master_log, daemons)
        yield StandaloneCluster(master_url, tuple(path for _, path in daemons.values()))
    finally:
        for process, _ in reversed(list(daemons.values())):
            stop_group(process)
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run a Spark standalone cluster on 127.0.0.1 until Ctrl-C.")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    args = parser.parse_args()
    # SIGTERM ends the block like Ctrl-C does, so the daemons are stopped either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with standalone_cluster(args.workers, args.cores, args.memory) as cluster:
            print(cluster.master_url, flush=True)
            while True:
                time.sleep(3600)
    except StandaloneError as error:
        print(f"standalone: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
