"""The Spark class archive: built by a real training check, mapped by later driver JVMs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checker.spark import classes as spark_classes

# Runs in a child process: the test session's own JVM is already running.  ``-Xshare:on``
# makes the JVM refuse to start when it cannot map the archive, instead of ignoring it.
_PROBE = """
import json, sys
from pathlib import Path
from checker.spark.session import build_session
session = build_session("local[1]", archive=Path(sys.argv[1]), java_options=sys.argv[2:])
answer = session.range(10).selectExpr("sum(id)").collect()[0][0]
arguments = list(session._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
session.stop()
print(json.dumps({"answer": answer, "arguments": arguments}))
"""


def _probe(archive: Path, *java_options: str) -> dict[str, object]:
    """A session's answer and JVM arguments, from a fresh interpreter (and JVM) mapping ``archive``."""
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(archive), *java_options],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_no_options_without_an_archive(tmp_path: Path) -> None:
    assert spark_classes.java_options(tmp_path / "missing.jsa") == []


def test_options_map_an_existing_archive(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in spark_classes.java_options(archive)


@pytest.mark.spark
@pytest.mark.slow
def test_a_built_archive_is_mapped_by_a_new_driver(tmp_path: Path) -> None:
    """The archive ``scripts/setup.sh`` built with ``python -m checker.spark.classes`` (CI's set-up
    runs it: building another here took 30 s of the suite), or, on a machine without one, a fresh
    one."""
    if (
        spark_classes.ARCHIVE.exists()
        and not spark_classes.ARCHIVE.with_name(spark_classes.ARCHIVE.name + ".partial").exists()
    ):
        archive = spark_classes.ARCHIVE
    else:
        archive = spark_classes.build(tmp_path / "classes.jsa")
    assert archive.stat().st_size > 10 << 20  # thousands of classes, not an empty shell
    assert not archive.with_name(archive.name + ".partial").exists()
    result = _probe(archive, "-Xshare:on")
    assert result["answer"] == 45
    assert f"-XX:SharedArchiveFile={archive}" in result["arguments"]  # type: ignore[operator]


@pytest.mark.spark
def test_a_damaged_archive_is_ignored_not_fatal(tmp_path: Path) -> None:
    """Without ``-Xshare:on`` (the default) a JVM that cannot map the archive runs without it."""
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"not an archive" * 100)
    assert _probe(archive)["answer"] == 45
