"""The PostgreSQL node of a shared-store cluster (tansu, nisshi), driven through its Remote.

:class:`PostgresNode` lays out the node (data directory, optionally on the lazy filesystem),
creates the database cluster, runs the server as the daemon the nemesis acts on, answers
"is it up", makes the set-up durable, cuts its power and dumps its log -- with the command
lines of :mod:`testbed.cluster.postgres`.

**One daemon, every process.**  The nemesis kills and pauses a node by signalling its daemon
``broker`` (:data:`SERVER_DAEMON`, :data:`nemesis.mechanism.BROKER_DAEMON`), and a Remote
signals the daemon's process group.  PostgreSQL puts every child (backends, checkpointer, WAL
writer) in a session of its own, so the postmaster's group is the postmaster alone: SIGSTOP
would leave the backends serving, and after SIGKILL they would live on holding the shared
memory, so no new postmaster could start.  :class:`WholeServerRemote` -- the Remote this node
hands out -- therefore sends a signal to the daemon and then to every process of the
``postgres`` user (the postmaster first, so it forks no more), and the node waits for all of
them to be gone before a power loss or a restart.

**Layout.**  With the lazy filesystem it is mounted at ``DATA_DIR`` over ``BACKING_DIR`` (the
bundled broker's paths, and its mount: :class:`~testbed.cluster.lazyfs_mount.LazyMount`, with
``--allow-other``, since the server is not root) and the cluster lives
in ``PGDATA`` inside it, so ``drop`` discards exactly what PostgreSQL had not fsynced.  The
authentication file, the schema and the socket directory stay outside: they are not the state
under test.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path

from testbed.cluster import postgres
from testbed.cluster.bundled import BACKING_DIR, CONFIG_DIR, DATA_DIR, LOG_DIR, PYTHON
from testbed.cluster.kafka_admin import wait_until
from testbed.cluster.lazyfs_mount import LazyMount, not_mounted
from testbed.nodes.remote import DEFAULT_TIMEOUT, ForwardingRemote, Remote, RemoteError

SERVER_DAEMON = "broker"
"""The daemon name the nemesis signals on every node it faults (``nemesis.mechanism.BROKER_DAEMON``);
on this node it is the postmaster."""
PGDATA = f"{DATA_DIR}/pgdata"
HBA_PATH = f"{CONFIG_DIR}/pg_hba.conf"
SCHEMA_PATH = f"{CONFIG_DIR}/schema.sql"
SOCKET_DIR = "/run/tidemark-postgresql"
SERVER_LOG = f"{LOG_DIR}/postgresql.log"
LAZYFS_LOG = f"{LOG_DIR}/lazyfs.log"
LOCAL = "127.0.0.1"
SETTLE_TIMEOUT = 30.0
"""Seconds every PostgreSQL process may take to be gone after SIGKILL."""


class WholeServerRemote(ForwardingRemote):
    """A Remote whose ``signal`` of :data:`SERVER_DAEMON` reaches every PostgreSQL process (see the
    module docstring); every other call is the wrapped Remote's."""

    def signal(self, name: str, sig: signal.Signals, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        running = self.inner.signal(name, sig, timeout=timeout)
        if running and name == SERVER_DAEMON:
            signal_name = signal.Signals(sig).name.removeprefix("SIG")
            self.inner.exec(
                ["pkill", f"--signal={signal_name}", "-u", postgres.SUPERUSER], timeout=timeout, check=False
            )
        return running


class PostgresNode:
    """PostgreSQL with ``settings`` (``postgresql.*``) on the node behind ``remote``."""

    def __init__(
        self, remote: Remote, settings: Mapping[str, str], *, lazy: bool, schema: Path | None = None
    ) -> None:
        self.remote = WholeServerRemote(remote)
        self.schema = schema
        """The tables Tidemark creates before any broker connects (tansu's); None when the broker
        creates its own (nisshi)."""
        self.settings = postgres.effective_settings(settings)
        self.lazy_mount = (
            LazyMount(
                self.remote,
                python=PYTHON,
                backing=BACKING_DIR,
                mountpoint=DATA_DIR,
                log_path=LAZYFS_LOG,
                allow_other=True,  # the server is not root
            )
            if lazy
            else None
        )
        """The lazy filesystem under ``PGDATA``, when the run offers power loss."""

    @property
    def node(self) -> str:
        return self.remote.node

    # ---- set-up -----------------------------------------------------------------------

    def configure(self) -> None:
        """Write the authentication file and the schema, if any (outside the data directory)."""
        self.remote.exec(["mkdir", "-p", CONFIG_DIR, LOG_DIR, DATA_DIR], timeout=10)
        self.remote.put(postgres.HBA_CONF.encode(), HBA_PATH)
        if self.schema is not None:
            self.remote.put(self.schema.read_bytes(), SCHEMA_PATH)

    def start(self, ready_timeout: float = 60.0) -> None:
        """Start the server unless it runs (creating the cluster the first time) and wait until it answers."""
        if self.remote.is_alive(SERVER_DAEMON):
            return
        self._wait_until_gone()
        if self.lazy_mount is not None:
            self.lazy_mount.ensure()
        user = postgres.SUPERUSER
        self.remote.exec(
            f"set -e; mkdir -p {PGDATA} {SOCKET_DIR}; chown {user}:{user} {PGDATA} {SOCKET_DIR}; chmod 700 {PGDATA}",
            timeout=30,
        )
        if self.remote.exec(["test", "-s", f"{PGDATA}/PG_VERSION"], timeout=10, check=False).exit_code != 0:
            self.remote.exec(postgres.initdb_argv(postgres.BIN_DIR, PGDATA), timeout=180)
        self.remote.start_daemon(
            SERVER_DAEMON,
            postgres.server_argv(
                postgres.BIN_DIR, PGDATA, settings=self.settings, hba_file=HBA_PATH, socket_dir=SOCKET_DIR
            ),
            log_path=SERVER_LOG,
        )
        wait_until(self.answers, ready_timeout, f"PostgreSQL on {self.node} to accept connections")

    def apply_schema(self) -> None:
        """Create the schema's tables (once, on a new cluster, before any broker connects)."""
        if self.schema is None:
            raise ValueError(
                f"PostgreSQL on {self.node} has no schema to apply: its brokers create their own"
            )
        self.remote.exec(postgres.psql_argv(LOCAL, command=None, file=SCHEMA_PATH), timeout=60)

    def answers(self) -> bool:
        """Whether the server accepts connections now (``pg_isready``)."""
        try:
            result = self.remote.exec(postgres.ready_argv(postgres.BIN_DIR, LOCAL), timeout=5, check=False)
        except RemoteError:
            return False
        return result.exit_code == 0

    def settle(self) -> None:
        """Make everything written so far durable (the lazy filesystem's ``sync``).

        Called once the run's topic exists: the set-up must survive a power loss even with
        ``fsync=off``, as it would on a machine whose kernel had seconds to write it back; only
        the workload's writes are then at the mercy of the settings under test.
        """
        if self.lazy_mount is not None:
            self.lazy_mount.sync()

    # ---- faults ------------------------------------------------------------------------

    def drop_unsynced(self) -> None:
        """Power loss: once every PostgreSQL process is gone, discard what was not fsynced."""
        if self.lazy_mount is None:
            raise not_mounted(self.node)
        self._wait_until_gone()
        self.lazy_mount.drop()

    def _wait_until_gone(self) -> None:
        """Wait until no process of the ``postgres`` user is left (SIGKILLed backends exiting)."""

        def gone() -> bool:
            found = self.remote.exec(["pgrep", "-u", postgres.SUPERUSER], timeout=5, check=False)
            return found.exit_code == 1

        wait_until(gone, SETTLE_TIMEOUT, f"every PostgreSQL process on {self.node} to exit")

    # ---- evidence ----------------------------------------------------------------------

    def dump(self, target: Path) -> None:
        """Write the replica dump of every committed record (:data:`postgres.DUMP_SQL`) to ``target``."""
        result = self.remote.exec(postgres.psql_argv(LOCAL, command=postgres.DUMP_SQL), timeout=300)
        lines = list(postgres.dump_lines(result.stdout_text.splitlines()))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(lines), encoding="utf-8")
