"""How the nisshi target's clusters map the Cluster protocol, with recording fake remotes (no
Docker): on PostgreSQL it is the shared-store cluster with nisshi's program (no schema applied:
nisshi creates its tables); on SQLite one broker started in its data directory, whose file the
dump reads with Python's sqlite3 in the replica-dump format."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cluster import postgres
from testbed.cluster.lazyfs_mount import not_mounted
from testbed.cluster.nisshi import (
    NISSHI_NODE_ID,
    NisshiCluster,
    NisshiSqliteCluster,
    SettingsError,
    effective_settings,
    sqlite_dump_script,
)
from testbed.cluster.shared_store import POSTGRES_NODE
from tests.testbed.cluster.test_tansu_cluster import FakeRemote


def test_on_postgresql_nisshi_starts_without_a_schema_and_with_its_own_binary() -> None:
    remotes = {name: FakeRemote(name) for name in ("pg", "n1")}
    cluster = NisshiCluster(remotes, {"pg": "10.9.0.2", "n1": "10.9.0.3"}, ["n1"], POSTGRES_NODE, {})
    cluster.configure()
    assert all(call[0] != "put" or "schema" not in str(call[1]) for call in remotes["pg"].calls)
    with pytest.raises(ValueError, match="no schema to apply"):
        cluster.postgres.apply_schema()
    cluster.start_broker("n1")
    ((_, argv),) = [call for call in remotes["n1"].calls if call[0] == "start_daemon"]
    assert "/usr/local/bin/nisshi" in argv and "nisshi-supervisor" in argv
    assert "--storage-engine=postgres://postgres@10.9.0.2:5432/postgres" in argv
    assert cluster.node_ids == {"n1": NISSHI_NODE_ID} and cluster.leader_of("t", 0) == "pg"


def test_on_sqlite_one_broker_runs_in_its_data_directory_and_is_its_own_replica(tmp_path: Path) -> None:
    remotes = {"n1": FakeRemote("n1")}
    cluster = NisshiSqliteCluster(remotes, {"n1": "10.9.0.3"}, "n1")
    cluster.start_broker("n1")
    ((_, argv),) = [call for call in remotes["n1"].calls if call[0] == "start_daemon"]
    assert argv[:4] == ["sh", "-c", 'cd "$0" && exec "$@"', "/var/lib/tidemark/data"]
    assert "--storage-engine=sqlite://nisshi.db" in argv  # relative: nisshi resolves it in its cwd
    assert cluster.brokers == cluster.replica_nodes == ["n1"] and cluster.controller is None
    assert cluster.leader_of("t", 1) == "n1"
    with pytest.raises(type(not_mounted("n1")), match="n1"):
        cluster.drop_unsynced("n1")  # without the lazy filesystem there is no power to lose


def test_the_settings_name_the_storage_and_keep_postgresql_s_only_on_postgresql() -> None:
    assert effective_settings({})["nisshi.storage"] == "postgresql"
    assert effective_settings({})["postgresql.fsync"] == "on"
    assert effective_settings({"nisshi.storage": "sqlite"}) == {"nisshi.storage": "sqlite"}
    with pytest.raises(SettingsError, match=r"--set nisshi\.storage=s3: must be one of postgresql, sqlite"):
        effective_settings({"nisshi.storage": "s3"})


def test_the_sqlite_dump_reads_nisshi_s_tables_in_the_replica_dump_format(tmp_path: Path) -> None:
    database = tmp_path / "nisshi.db"
    with sqlite3.connect(database) as connection:  # the columns of nisshi-storage-sql 0.8.1 ddl/*.sql
        connection.executescript(
            "create table cluster (id integer primary key, name text);"
            "create table topic (id integer primary key, cluster int, name text);"
            "create table topition (id integer primary key, topic int, partition int);"
            "create table watermark (id integer primary key, topition int, low int, high int);"
            "create table record (topition int, offset_id int, k blob, v blob);"
            f"insert into cluster values (1, '{postgres.CLUSTER_ID}'), (2, 'another');"
            "insert into topic values (1, 1, 'q'), (2, 2, 'q');"
            "insert into topition values (1, 1, 0), (2, 2, 0);"
            "insert into watermark values (1, 1, 0, 2);"
            "insert into record values (1, 0, x'6b30', x'3137'), (1, 1, null, x''), (2, 0, null, x'99');"
        )
    output = subprocess.run(
        [sys.executable, "-c", sqlite_dump_script(str(database))], check=True, capture_output=True, text=True
    ).stdout
    lines = [json.loads(line) for line in postgres.dump_lines(output.splitlines())]
    assert lines[0] == {
        "type": "partition",
        "topic": "q",
        "partition": 0,
        "high_watermark": 2,
        "log_end_offset": 2,
        "log_start_offset": 0,
        "epochs": [],
    }
    records = [(line["offset"], line["key"], line["value"]) for line in lines[1:]]
    assert records == [(0, "k0", "17"), (1, None, "")], (
        "another cluster's rows stay out; null and empty differ"
    )
