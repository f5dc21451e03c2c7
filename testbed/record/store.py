"""The store: one directory per run (its files are named in :mod:`testbed.record.rundir`).

``store/<test name>/<UTC timestamp>/`` holds ``test.json`` (the whole spec, seed and
versions), ``history.jsonl`` (appended and flushed during the run), ``history.parquet``,
``replicas.parquet``, ``nodes/<node>/`` (logs and dumps), ``results.json`` and
``report.html``.  ``store/latest`` (and ``store/<test name>/latest``) point at the
newest run.  The run directory is created before anything starts, so even a run that
dies in set-up leaves its spec and whatever logs it collected.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def versions() -> dict[str, str]:
    """Versions of everything that shaped the run, for test.json."""
    found = {"python": platform.python_version()}
    for package in ("tidemark", "kafka-python", "confluent-kafka", "pyspark", "docker", "paramiko"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    try:
        import confluent_kafka

        found["librdkafka"] = str(confluent_kafka.libversion()[0])
    except ImportError:
        pass
    return found


def safe_name(name: str) -> str:
    cleaned = _SAFE_NAME.sub("-", name).strip("-.")
    return cleaned or "test"


def new_run_directory(store: Path, test_name: str) -> Path:
    """Create ``store/<name>/<timestamp>`` (unique even within one second)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    directory = store / safe_name(test_name) / stamp
    directory.mkdir(parents=True, exist_ok=False)
    (directory / "nodes").mkdir()
    return directory


def point_latest(store: Path, run_directory: Path) -> None:
    """Atomically repoint ``store/latest`` and ``store/<name>/latest`` at ``run_directory``."""
    for link in (store / "latest", run_directory.parent / "latest"):
        temporary = link.with_name(f".{link.name}.{os.getpid()}")
        if temporary.is_symlink() or temporary.exists():
            temporary.unlink()
        temporary.symlink_to(os.path.relpath(run_directory, link.parent))
        os.replace(temporary, link)


def write_json(path: Path, data: Any) -> None:
    """Write JSON via a temporary file and rename, so readers never see half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)
