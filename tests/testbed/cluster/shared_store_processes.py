"""tansu or nisshi brokers and their PostgreSQL as local processes, from the harness's own command lines.

:class:`LocalSharedStore` starts what :class:`testbed.cluster.shared_store.SharedStoreCluster` starts
in containers -- ``initdb``, the postmaster with the run's settings, the schema where the system needs
Tidemark to create it (tansu), N brokers -- from the same argv builders
(:mod:`testbed.cluster.postgres`, :func:`testbed.cluster.shared_store.broker_argv`), on
127.0.0.1 and free ports, optionally with PostgreSQL's data directory on the lazy filesystem.
Every process it starts is stopped on the way out, also when the test failed.

As root, PostgreSQL runs as the ``postgres`` user (it refuses root). A host may run its own
PostgreSQL as that user too, so a crash here kills exactly the postmaster and its children, found
by parent pid while the postmaster is stopped (it can fork no new ones then), never "every process
of the user" as the container node does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testbed.cluster import postgres
from testbed.cluster.external_probe import probe_cluster
from testbed.cluster.kafka_admin import wait_until
from testbed.cluster.shared_store import broker_argv

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


class LocalSharedStore:
    """PostgreSQL plus ``brokers`` brokers of ``binary`` on this machine (a context manager);
    ``applies_schema`` False for a broker that creates its own tables (nisshi)."""

    def __init__(
        self,
        binary: Path,
        pg_bin: Path,
        *,
        brokers: int = 2,
        settings: dict[str, str] | None = None,
        lazy: bool = False,
        applies_schema: bool = True,
    ) -> None:
        self.binary = binary
        self.applies_schema = applies_schema
        self.pg_bin = str(pg_bin)
        self.settings = dict(settings or {})
        self.lazy = lazy
        self.user = postgres.SUPERUSER if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="tidemark-tansu-"))
        self.root.chmod(0o755)  # the postgres user must reach its data directory
        self.pg_port = free_port()
        self.broker_ports = [free_port() for _ in range(brokers)]
        self.postmaster: subprocess.Popen[bytes] | None = None
        self.lazyfs: subprocess.Popen[bytes] | None = None
        self.brokers: list[subprocess.Popen[bytes] | None] = [None] * brokers
        self._logs: list[IO[bytes]] = []

    # ---- paths ------------------------------------------------------------------------

    @property
    def mount(self) -> Path:
        return self.root / ("mnt" if self.lazy else "data")

    @property
    def pgdata(self) -> Path:
        return self.mount / "pgdata"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.broker_ports)

    def _log(self, name: str) -> IO[bytes]:
        handle = (self.root / f"{name}.log").open("ab")
        self._logs.append(handle)
        return handle

    # ---- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> LocalSharedStore:
        try:
            self.mount.mkdir()
            (self.root / "sock").mkdir()
            (self.root / "pg_hba.conf").write_text(postgres.HBA_CONF, encoding="utf-8")
            if self.lazy:
                self._mount_lazyfs()
            self.pgdata.mkdir(mode=0o700)
            self._own(self.pgdata, self.root / "sock")
            subprocess.run(
                postgres.initdb_argv(self.pg_bin, str(self.pgdata), user=self.user),
                check=True,
                stdout=self._log("initdb"),
                stderr=subprocess.STDOUT,
            )
            self.start_postgres()
            if self.applies_schema:
                self.psql(file=str(postgres.SCHEMA_FILE))
            for index in range(len(self.brokers)):
                self.start_broker(index)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every process started here and remove the directory (idempotent)."""
        for index in range(len(self.brokers)):
            self.kill_broker(index)
        self.crash_postgres()
        if self.lazyfs is not None:
            self._lazyfs_command("unmount", str(self.mount), check=False)
            _stop(self.lazyfs)
            self.lazyfs = None
        for handle in self._logs:
            handle.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _own(self, *paths: Path) -> None:
        if self.user is not None:
            for path in paths:
                shutil.chown(path, self.user, self.user)

    # ---- PostgreSQL -------------------------------------------------------------------

    def start_postgres(self) -> None:
        argv = postgres.server_argv(
            self.pg_bin,
            str(self.pgdata),
            settings=self.settings,
            hba_file=str(self.root / "pg_hba.conf"),
            socket_dir=str(self.root / "sock"),
            port=self.pg_port,
            listen="127.0.0.1",
            user=self.user,
        )
        log = self._log("postgresql")
        self.postmaster = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ready = postgres.ready_argv(self.pg_bin, "127.0.0.1", self.pg_port)
        wait_until(
            lambda: subprocess.run(ready).returncode == 0, START_TIMEOUT, "PostgreSQL to accept connections"
        )

    def crash_postgres(self, *, power_loss: bool = False) -> None:
        """SIGKILL the postmaster and every child at once (a crash); with ``power_loss``, then drop
        what the lazy filesystem holds unsynced. Restart with :meth:`start_postgres`."""
        postmaster, self.postmaster = self.postmaster, None
        if postmaster is not None and postmaster.poll() is None:
            os.kill(postmaster.pid, signal.SIGSTOP)  # no more forks while we list its children
            victims = [*_children(postmaster.pid), postmaster.pid]
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            postmaster.wait(timeout=30)
            wait_until(lambda: all(_gone(pid) for pid in victims), 30, "every PostgreSQL process to exit")
        if power_loss:
            self._lazyfs_command("control", str(self.mount), "drop")

    def psql(self, *, command: str | None = None, file: str | None = None) -> str:
        argv = postgres.psql_argv("127.0.0.1", self.pg_port, command=command, file=file)
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout

    def dump(self) -> list[str]:
        """The replica-dump lines of the PostgreSQL log, as the container node writes them."""
        return list(postgres.dump_lines(self.psql(command=postgres.DUMP_SQL).splitlines()))

    # ---- the lazy filesystem ----------------------------------------------------------

    def _lazyfs_command(self, *arguments: str, check: bool = True) -> None:
        subprocess.run(
            [sys.executable, "-m", "nemesis.lazyfs", *arguments], check=check, capture_output=True, timeout=60
        )

    def _mount_lazyfs(self) -> None:
        backing = self.root / "backing"
        backing.mkdir()
        argv = [
            sys.executable,
            "-m",
            "nemesis.lazyfs",
            "mount",
            str(backing),
            str(self.mount),
            "--foreground",
        ]
        self.lazyfs = subprocess.Popen(
            [*argv, "--allow-other"],
            stdout=self._log("lazyfs"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def mounted() -> bool:
            assert self.lazyfs is not None
            if self.lazyfs.poll() is not None:
                raise RuntimeError(f"lazyfs exited {self.lazyfs.returncode}: see {self.root}/lazyfs.log")
            status = subprocess.run(
                [sys.executable, "-m", "nemesis.lazyfs", "control", str(self.mount), "status"],
                capture_output=True,
            )
            return status.returncode == 0

        wait_until(mounted, 20, "the lazy filesystem")

    def settle(self) -> None:
        """Write back everything so far (lazyfs ``sync``), as the cluster does once the topic exists."""
        if self.lazy:
            self._lazyfs_command("control", str(self.mount), "sync")

    # ---- brokers ------------------------------------------------------------------------

    def start_broker(self, index: int) -> None:
        port = self.broker_ports[index]
        argv = broker_argv(
            str(self.binary),
            port=port,
            advertised_host="127.0.0.1",
            storage=postgres.storage_url("127.0.0.1", self.pg_port),
        )
        self.brokers[index] = subprocess.Popen(
            argv, stdout=self._log(f"broker-{index}"), stderr=subprocess.STDOUT, start_new_session=True
        )
        probe_cluster(f"127.0.0.1:{port}", wait=START_TIMEOUT)

    def kill_broker(self, index: int) -> None:
        process, self.brokers[index] = self.brokers[index], None
        if process is not None:
            _stop(process)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        return (
            "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
            if path.exists()
            else ""
        )


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
