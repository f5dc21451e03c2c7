"""The PostgreSQL pieces of the tansu target: settings, command lines, the dump -- and the dump SQL
against a real local PostgreSQL holding rows shaped as tansu writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.cluster import postgres
from testbed.record.replicas import DumpPartition, DumpRecord, parse_dump_line
from tests.testbed.cluster.shared_store_processes import LocalSharedStore


def test_effective_settings_are_postgresql_defaults_with_set_applied_and_booleans_normalized() -> None:
    assert postgres.effective_settings({}) == {
        "postgresql.fsync": "on",
        "postgresql.synchronous_commit": "on",
    }
    assert postgres.effective_settings(
        {"postgresql.fsync": "False", "postgresql.synchronous_commit": "0"}
    ) == {
        "postgresql.fsync": "off",
        "postgresql.synchronous_commit": "off",
    }
    assert (
        postgres.effective_settings({"postgresql.synchronous_commit": "local"})[
            "postgresql.synchronous_commit"
        ]
        == "local"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fsync": "off"}, r"--set fsync: not a setting of the tansu target \(known: postgresql.fsync"),
        ({"postgresql.shared_buffers": "1GB"}, "--set postgresql.shared_buffers: not a setting"),
        ({"postgresql.fsync": "sometimes"}, r"--set postgresql.fsync=sometimes: expected one of on, off"),
    ],
)
def test_bad_settings_name_the_flag(settings: dict[str, str], message: str) -> None:
    with pytest.raises(postgres.SettingsError, match=message):
        postgres.effective_settings(settings)


def test_server_argv_runs_as_postgres_and_carries_every_setting_as_an_option() -> None:
    argv = postgres.server_argv(
        "/bin", "/data", settings={"postgresql.fsync": "off"}, hba_file="/etc/hba", socket_dir="/run/s"
    )
    assert argv[:5] == ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
    assert argv[5:8] == ["/bin/postgres", "-D", "/data"]
    options = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "-c")
    assert options["fsync"] == "off"
    assert options["synchronous_commit"] == "on"
    assert options["hba_file"] == "/etc/hba"
    assert (
        postgres.server_argv("/b", "/d", settings={}, hba_file="h", socket_dir="s", user=None)[0]
        == "/b/postgres"
    )


def test_dump_lines_turn_psql_rows_into_the_replica_dump_format() -> None:
    rows = [
        "partition\tqueue\t0\t0\t2\t\t\t",
        f"record\tqueue\t0\t0\t{b'k'.hex()}\t{b'17'.hex()}\tf\tf",
        f"record\tqueue\t0\t1\t\t{bytes([0xFF, 0x00]).hex()}\tt\tf",
        "",
    ]
    parsed = [parse_dump_line(json.loads(line)) for line in postgres.dump_lines(rows)]
    assert parsed == [
        DumpPartition("queue", 0, 2, 2, 0, ()),
        DumpRecord("queue", 0, 0, -1, "k", "17"),
        DumpRecord("queue", 0, 1, -1, None, "base64:/wA="),
    ]


@pytest.mark.parametrize("row", ["oops", "record\tq\t0\tx\t\t\tf\tf", "record\tq\t0\t1\tzz\t\tf\tf"])
def test_a_row_the_dump_sql_cannot_produce_is_an_error_naming_the_line(row: str) -> None:
    with pytest.raises(postgres.DumpFormatError, match="psql output line 1"):
        list(postgres.dump_lines([row]))


@pytest.mark.third_party
def test_dump_sql_reads_committed_records_from_a_real_postgresql(postgres_bin_dir: Path) -> None:
    """The schema applies to PostgreSQL 15, and the dump reads rows shaped as tansu writes them."""
    with LocalSharedStore(Path("/nonexistent"), postgres_bin_dir, brokers=0) as local:
        cluster = postgres.CLUSTER_ID
        local.psql(
            command=(
                f"insert into cluster (name) values ('{cluster}'), ('another');"
                "insert into topic (cluster, name, partitions, replication_factor)"
                " select id, 'queue', 2, 1 from cluster;"
                "insert into topition (topic, partition) select t.id, p from topic t, generate_series(0, 1) p;"
                "insert into watermark (topition, low, high) select id, 0, 2 from topition;"
                "insert into record (topition, offset_id, k, v)"
                " select tp.id, o, null, convert_to(t.cluster::text || '-' || tp.partition || '-' || o, 'UTF8')"
                " from topition tp join topic t on t.id = tp.topic, generate_series(0, 1) o;"
            )
        )
        lines = [json.loads(line) for line in local.dump()]
    partitions = [line for line in lines if line["type"] == "partition"]
    records = [line for line in lines if line["type"] == "record"]
    assert [(p["partition"], p["high_watermark"], p["log_end_offset"]) for p in partitions] == [
        (0, 2, 2),
        (1, 2, 2),
    ]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == [
        (p, o, None, f"1-{p}-{o}")
        for p in (0, 1)
        for o in (0, 1)  # cluster 1: ours, not 'another'
    ]
