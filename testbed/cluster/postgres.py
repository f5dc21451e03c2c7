"""PostgreSQL as the durable log of a tansu cluster: its settings, command lines, and the dump.

Everything here is a *process-level* piece -- an argv, a config text, a SQL text, a parser of
``psql`` output -- with no Remote and no Docker in it, so the same pieces run a PostgreSQL in a
container (:mod:`testbed.cluster.tansu`) and one started by the tests as a local process.

**Settings.**  ``--set postgresql.fsync=off`` and ``--set postgresql.synchronous_commit=off`` are
the two knobs a run may turn (:data:`SETTINGS`, with PostgreSQL's own defaults).  They are passed
as ``-c`` options on the server's command line, so the run's ``test.json`` (which records the
effective settings) is the whole truth about them; ``postgresql.conf`` is left as ``initdb``
wrote it.  The checker's expectations read the recorded values: ``fsync=off`` plus a power loss
of the PostgreSQL node may lose acknowledged writes, ``synchronous_commit=off`` plus a power loss
or a crash may too (:mod:`checker.expectations`).

**The server** runs as the unprivileged ``postgres`` user (PostgreSQL refuses root) through
``setpriv``, which execs (no intermediate process), so the daemon the harness starts *is* the
postmaster.  Client authentication is ``trust`` from anywhere (an ``hba_file`` outside the data
directory): the cluster sits on the run's private network and holds test data only.

**The dump** (:data:`DUMP_SQL`, :func:`dump_lines`) reads tansu's tables after the run and
writes the replica-dump format of :mod:`testbed.record.replicas`: one ``partition`` line per
(topic, partition) from the ``watermark`` table -- its ``high`` is the next offset tansu hands
out, so high watermark and log end offset alike, since a PostgreSQL transaction makes records
and watermark visible together -- and one ``record`` line per row of ``record``: the records
whose producing transaction committed, which is what a restarted PostgreSQL keeps.  Keys and
values are bytes in PostgreSQL; they are written with the bundled broker's dump rule (UTF-8
text, else ``base64:``), so the two targets' dumps read the same.  Tansu stamps no leader epoch
on stored records: the dump says ``-1`` (Kafka's "no epoch").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from broker_impl.dump import text as dump_text

PG_MAJOR = "15"
"""The PostgreSQL major version: Debian bookworm's, in the tansu image and on a Debian host."""
DEBIAN_PACKAGE = f"postgresql-{PG_MAJOR}"
BIN_DIR = f"/usr/lib/postgresql/{PG_MAJOR}/bin"
"""Where Debian installs ``initdb`` and ``postgres`` (not on PATH)."""
PORT = 5432
SUPERUSER = "postgres"
"""The database superuser, the OS user the server runs as, and the database tansu uses."""
CLUSTER_ID = "tidemark"
"""tansu's ``--cluster-id``: every broker of a run shares it, and the dump reads that cluster's rows."""
SCHEMA_FILE = Path(__file__).with_name("tansu_schema.sql")
"""The tables tansu's PostgreSQL engine expects (tansu does not create them itself)."""

SETTING_PREFIX = "postgresql."
_ON_OFF = ("on", "off")
SETTINGS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "fsync": ("on", _ON_OFF),
    "synchronous_commit": ("on", ("on", "off", "local", "remote_write", "remote_apply")),
}
"""PostgreSQL setting -> (PostgreSQL's default, accepted values); ``--set`` keys carry :data:`SETTING_PREFIX`."""
_BOOLEAN_WORDS = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}

HBA_CONF = (
    "# Tidemark: a test cluster on a private network; every client is trusted.\n"
    "local all all trust\n"
    "host all all 0.0.0.0/0 trust\n"
    "host all all ::/0 trust\n"
)


class SettingsError(ValueError):
    """A ``--set postgresql.*`` key or value PostgreSQL would not take; the message names it."""


def effective_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Every PostgreSQL setting a run controls, ``--set`` applied to PostgreSQL's defaults.

    Keys are ``postgresql.<name>``; boolean words (true/yes/1...) are normalized to ``on``/``off``
    as PostgreSQL itself reads them, so the recorded value is the one every reader compares.
    Raises :class:`SettingsError` for a key outside :data:`SETTINGS` or a value it does not take.
    """
    values = {SETTING_PREFIX + name: default for name, (default, _) in SETTINGS.items()}
    for key, raw in settings.items():
        name = key.removeprefix(SETTING_PREFIX)
        if not key.startswith(SETTING_PREFIX) or name not in SETTINGS:
            known = ", ".join(SETTING_PREFIX + n for n in SETTINGS)
            raise SettingsError(f"--set {key}: not a setting of the tansu target (known: {known})")
        accepted = SETTINGS[name][1]
        value = raw.strip().lower()
        value = _BOOLEAN_WORDS.get(value, value)  # PostgreSQL reads both settings' booleans this way
        if value not in accepted:
            raise SettingsError(f"--set {key}={raw}: expected one of {', '.join(accepted)}")
        values[key] = value
    return dict(sorted(values.items()))


def server_options(settings: Mapping[str, str]) -> dict[str, str]:
    """The effective ``postgresql.*`` settings as PostgreSQL option names (``fsync`` -> ``off``)."""
    return {key.removeprefix(SETTING_PREFIX): value for key, value in effective_settings(settings).items()}


def as_user(user: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run as ``user`` through ``setpriv`` (it execs: the pid stays the program's), or as is."""
    if user is None:
        return list(argv)
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]


def initdb_argv(bin_dir: str, data_dir: str, *, user: str | None = SUPERUSER) -> list[str]:
    """Create a database cluster in ``data_dir`` (which must exist, be empty and belong to ``user``).

    ``initdb`` fsyncs everything it wrote before it exits, so a fresh cluster survives a later
    power loss of the lazy filesystem whatever ``fsync`` the server then runs with.
    """
    return as_user(
        user,
        [
            f"{bin_dir}/initdb",
            f"--pgdata={data_dir}",
            f"--username={SUPERUSER}",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        ],
    )


def server_argv(
    bin_dir: str,
    data_dir: str,
    *,
    settings: Mapping[str, str],
    hba_file: str,
    socket_dir: str,
    port: int = PORT,
    listen: str = "*",
    user: str | None = SUPERUSER,
) -> list[str]:
    """The postmaster in the foreground, configured entirely by ``-c`` options (see the module doc)."""
    options = {
        "listen_addresses": listen,
        "port": str(port),
        "hba_file": hba_file,
        "unix_socket_directories": socket_dir,
        "logging_collector": "off",
        "log_line_prefix": "%m [%p] ",
        **server_options(settings),
    }
    argv = [f"{bin_dir}/postgres", "-D", data_dir]
    for name, value in options.items():
        argv += ["-c", f"{name}={value}"]
    return as_user(user, argv)


def ready_argv(bin_dir: str, host: str, port: int = PORT) -> list[str]:
    """``pg_isready``: exits 0 once the server accepts connections (the readiness condition)."""
    return [f"{bin_dir}/pg_isready", "--quiet", f"--host={host}", f"--port={port}", f"--username={SUPERUSER}"]


def psql_argv(
    host: str, port: int = PORT, *, command: str | None = None, file: str | None = None
) -> list[str]:
    """``psql`` printing bare tab-separated rows, stopping at the first error, reading no ~/.psqlrc.

    Debian's own binary, not the ``/usr/bin/psql`` wrapper, which picks a version by the clusters
    ``postgresql-common`` knows of -- none that matter here.
    """
    argv = [
        f"{BIN_DIR}/psql",
        "--no-psqlrc",
        "--quiet",
        "--tuples-only",
        "--no-align",
        "--field-separator=\t",
        "--set=ON_ERROR_STOP=1",
        f"--host={host}",
        f"--port={port}",
        f"--username={SUPERUSER}",
        f"--dbname={SUPERUSER}",
    ]
    if command is not None:
        argv.append(f"--command={command}")
    if file is not None:
        argv.append(f"--file={file}")
    return argv


def storage_url(host: str, port: int = PORT) -> str:
    """tansu's ``--storage-engine`` for the PostgreSQL at ``host:port``."""
    return f"postgres://{SUPERUSER}@{host}:{port}/{SUPERUSER}"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


_FROM = (
    "from cluster c join topic t on t.cluster = c.id join topition tp on tp.topic = t.id "
    f"where c.name = {_literal(CLUSTER_ID)}"
)


def dump_sql(dialect: str = "postgresql") -> str:
    """Two queries, one tagged row per partition then per record (``psql`` prints them
    tab-separated; :func:`testbed.cluster.nisshi.sqlite_dump_rows` prints SQLite's the same way).

    Keys and values travel as hex (text-safe, no line breaks) with explicit null flags ``t``/``f``,
    because ``psql`` prints a null and an empty string alike.  ``dialect`` ``sqlite`` reads the
    same tables in nisshi's embedded engine (its ``ddl/*.sql`` mirror the PostgreSQL schema's
    ``cluster``, ``topic``, ``topition``, ``watermark`` and ``record``).
    """
    if dialect not in ("postgresql", "sqlite"):
        raise ValueError(f"dump dialect must be postgresql or sqlite, not {dialect!r}")

    def hexed(column: str) -> str:
        return f"encode({column}, 'hex')" if dialect == "postgresql" else f"hex({column})"

    def is_null(column: str) -> str:
        return (
            f"{column} is null"
            if dialect == "postgresql"
            else f"case when {column} is null then 't' else 'f' end"
        )

    return (
        "select 'partition', t.name, tp.partition, coalesce(w.low, 0), coalesce(w.high, 0), '', '', '' "
        + _FROM.replace("where", "left join watermark w on w.topition = tp.id where", 1)
        + " order by t.name, tp.partition;"
        f" select 'record', t.name, tp.partition, r.offset_id, {hexed('r.k')}, {hexed('r.v')},"
        f" {is_null('r.k')}, {is_null('r.v')} "
        + _FROM.replace("where", "join record r on r.topition = tp.id where", 1)
        + " order by t.name, tp.partition, r.offset_id;"
    )


DUMP_SQL = dump_sql()
"""The dump of tansu's (and nisshi's) PostgreSQL tables (:func:`dump_sql`)."""


class DumpFormatError(ValueError):
    """``psql`` printed a row :data:`DUMP_SQL` cannot have produced (the line is in the message)."""


def dump_lines(rows: Iterable[str]) -> Iterator[str]:
    """The replica-dump JSON lines (with newlines) for the ``psql`` output of :data:`DUMP_SQL`.

    Partition rows are ``partition, topic, partition, low, high`` and record rows ``record,
    topic, partition, offset, key hex, value hex, key is null, value is null`` (``t``/``f``).
    """
    for number, row in enumerate(rows, start=1):
        row = row.rstrip("\n")
        if not row:
            continue
        fields = row.split("\t")
        if len(fields) != 8 or fields[0] not in ("partition", "record"):
            raise DumpFormatError(f"psql output line {number}: unexpected row {row[:200]!r}")
        try:
            line = _partition_line(fields) if fields[0] == "partition" else _record_line(fields)
        except ValueError as error:
            raise DumpFormatError(f"psql output line {number}: {error}: {row[:200]!r}") from None
        yield json.dumps(line, sort_keys=True) + "\n"


def _partition_line(fields: list[str]) -> dict[str, object]:
    low, high = int(fields[3]), int(fields[4])
    return {
        "type": "partition",
        "topic": fields[1],
        "partition": int(fields[2]),
        "high_watermark": high,
        "log_end_offset": high,
        "log_start_offset": low,
        "epochs": [],
    }


def _record_line(fields: list[str]) -> dict[str, object]:
    return {
        "type": "record",
        "topic": fields[1],
        "partition": int(fields[2]),
        "offset": int(fields[3]),
        "leader_epoch": -1,
        "key": None if fields[6] == "t" else dump_text(bytes.fromhex(fields[4])),
        "value": None if fields[7] == "t" else dump_text(bytes.fromhex(fields[5])),
    }
