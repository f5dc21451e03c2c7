"""The campaign summary: one row per checked run, as Parquet and as a printed table.

The Parquet file (``check-summary.parquet``) has ``run, name, valid, expected_only,
truncation_mode, acks, min_insync_replicas, unclean_election, flush_messages, faults,
scenario`` and one integer column per anomaly (``lost_write``, ...).  The printed table
groups runs by broker configuration x nemesis and shows how many were valid, invalid and
unknown, and the anomaly counts, causes first (``*`` marks counts that the configuration permits).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from checker.anomalies import WARNING
from checker.anomaly_order import grouped
from checker.definitions import ALL_CHECKS
from testbed.record.history import write_parquet

SUMMARY_FILE = "check-summary.parquet"
"""The batch summary's file name, beside the runs it covers."""


def _column(kind: str) -> str:
    return kind.replace("-", "_")


def summary_rows(results: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for result, name in zip(results, names, strict=True):
        config = result["config"]
        row: dict[str, Any] = {
            "run": result["run"],
            "name": name,
            "valid": str(result["valid"]).lower(),
            "expected_only": result["expected_only"],
            "truncation_mode": config["truncation.mode"],
            "acks": config["acks"],
            "min_insync_replicas": config["min.insync.replicas"],
            "unclean_election": config["unclean.leader.election.enable"],
            "flush_messages": config["flush.messages"],
            "faults": ",".join(config["faults"]),
            "scenario": config["scenario"],
        }
        for kind in ALL_CHECKS:
            row[_column(kind)] = int(result["anomalies"].get(kind, {}).get("count", 0))
        rows.append(row)
    return rows


def write_summary(rows: list[dict[str, Any]], target: Path) -> None:
    write_parquet(pa.Table.from_pylist(rows), target)


def _anomaly_text(results: list[dict[str, Any]]) -> list[str]:
    """The group's anomalies summed over its runs, causes first (:mod:`checker.anomaly_order`):
    ``lost-write x9* (-> lost-read x2*)``, ``*`` when every run's configuration permits it."""
    summed: dict[str, dict[str, Any]] = {}
    for result in results:
        for kind, anomaly in result["anomalies"].items():
            total = summed.setdefault(kind, {"count": 0, "expected": True, "severity": anomaly["severity"]})
            total["count"] += anomaly["count"]
            total["expected"] = total["expected"] and anomaly["expected"]
            if anomaly["severity"] != WARNING:
                total["severity"] = anomaly["severity"]

    def say(kind: str, anomaly: Mapping[str, Any]) -> str:
        return f"{kind} x{anomaly['count']}{'*' if anomaly['expected'] else ''}"

    return grouped(summed, say, "{cause} (-> {consequences})", ", ")


def print_summary(rows: list[dict[str, Any]], results: list[dict[str, Any]], console: Console) -> None:
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for number, row in enumerate(rows):
        config = f"trunc={row['truncation_mode']} acks={row['acks']} minisr={row['min_insync_replicas']} unclean={row['unclean_election']} flush={row['flush_messages']}"
        nemesis = row["scenario"] or row["faults"] or "-"
        groups[(config, nemesis)].append(number)
    table = Table(title=f"Tidemark check: {len(rows)} run(s)")
    for header in (
        "broker config",
        "nemesis",
        "runs",
        "valid",
        "invalid",
        "unknown",
        "anomalies (* = expected under config)",
    ):
        table.add_column(header)
    for (config, nemesis), members in sorted(groups.items()):
        verdicts = [rows[i]["valid"] for i in members]
        text = ", ".join(_anomaly_text([results[i] for i in members]))
        table.add_row(
            config,
            nemesis,
            str(len(members)),
            str(verdicts.count("true")),
            str(verdicts.count("false")),
            str(verdicts.count("unknown")),
            text or "-",
        )
    console.print(table)
