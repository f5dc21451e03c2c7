"""A Spark Connect server's whole life, and the checker's parity with pandas through it.

``tidemark spark serve`` runs as users run it, in a subprocess: it must print an address that
answers, and leave no JVM behind -- after Ctrl-C, after SIGTERM, and after a SIGKILL of
``tidemark`` itself (the kernel's parent-death signal), checked in the process table.  The parity
check is ``test_standalone.py``'s, through ``tidemark check --remote`` against one server over a
real standalone master and worker (shared by the module): every plantable anomaly and the
transactional cases (``applyInPandas`` on the executor's Python) must give, run for run, the
``results.json`` the pandas engine writes.  Connect checks run as subprocesses: a process that
made a Connect session stays in Connect mode (``checker.spark.remote``), and this one holds the
suite's embedded session.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas.engine import PandasEngine
from checker.spark.remote import parse_remote, server_version
from checker.spark.small_counts import SMALL_RUN_ROWS
from checker.spark.standalone import standalone_cluster
from checker.synthetic_runs import generate_run
from tests.checker.spark.test_standalone import CLI, _environment, _results_of, _runs
from tests.checker.txn import runs as txn_runs

pytestmark = pytest.mark.spark

GONE_WITHIN_S = 60.0


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, from the process table."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from the process table."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = GONE_WITHIN_S) -> None:
    """Poll ``condition`` (the process table changes on its own time) until true, or fail with ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


class Served:
    """``tidemark spark serve`` in a subprocess: its address once it printed it, and its JVM."""

    def __init__(self, *flags: str) -> None:
        self.process = subprocess.Popen(
            [str(CLI), "spark", "serve", "--port", "0", "--driver-memory", "1g", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        assert self.process.stdout is not None
        try:
            self.url = self.process.stdout.readline().strip()  # the first line, once the server answers
            assert re.fullmatch(r"sc://127\.0\.0\.1:\d+", self.url), (self.url, self._stderr())
            (self.jvm,) = _children(self.process.pid)
        except BaseException:
            self.process.kill()  # no CLI left running by a test that failed here
            raise

    def _stderr(self) -> str:
        self.process.kill()
        return self.process.communicate()[1][-3000:]

    def stop(self, signum: int) -> int:
        """Send ``signum`` to the CLI (not its group: a terminal's Ctrl-C reaches the CLI's group,
        which the server is not in) and return its exit code."""
        self.process.send_signal(signum)
        return self.process.wait(timeout=GONE_WITHIN_S)

    def left_behind(self) -> list[int]:
        return _group(self.jvm)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        """A test that failed half-way still ends the CLI, whose JVM the kernel then ends."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=GONE_WITHIN_S)


def test_serve_prints_an_address_that_answers_and_ctrl_c_leaves_no_jvm() -> None:
    with Served() as served:
        assert server_version(parse_remote(served.url)) == "4.3.0"
        assert served.left_behind()  # the JVM, in a process group of its own
        assert served.stop(signal.SIGINT) == 0
        assert served.left_behind() == []


@pytest.mark.slow
def test_a_sigkilled_serve_takes_its_jvm_with_it() -> None:
    with Served() as served:
        served.stop(signal.SIGKILL)
        _wait_until(lambda: not served.left_behind(), "the JVM outlived a SIGKILLed tidemark")


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server over a standalone master and one worker, stopped with SIGTERM afterwards -- which
    must leave none of its processes."""
    work = tmp_path_factory.mktemp("spark")
    with (
        standalone_cluster(workers=1, cores=1, memory="1g", work_dir=work) as up,
        Served("--master", up.master_url) as served,
    ):
        yield served.url
        assert served.stop(signal.SIGTERM) == 0
        assert served.left_behind() == []


@pytest.mark.slow
def test_tidemark_check_through_spark_connect_on_a_standalone_master_writes_what_pandas_writes(
    tmp_path: Path, remote: str
) -> None:
    dirs, expected = _runs(tmp_path / "plain")
    txn_dirs = [run.run_dir for run in txn_runs.write_cases(tmp_path / "txn")]
    for run_dir in txn_dirs:
        (result,) = check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        expected[str(run_dir)] = result
    done = subprocess.run(
        [str(CLI), "check", "--remote", remote, "--json", *map(str, [*dirs, *txn_dirs])],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # planted anomalies: invalid runs
    printed = {result["run"]: result for result in json.loads(done.stdout)}
    found = _results_of([*dirs, *txn_dirs])
    assert found == expected
    assert printed == expected
    assert any(found[str(run_dir)]["anomalies"] for run_dir in txn_dirs)  # the txn checks found theirs
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


@pytest.mark.slow
def test_a_run_past_the_small_run_size_is_checked_by_spark_jobs_through_spark_connect_as_pandas_checks_it(
    tmp_path: Path, remote: str
) -> None:
    """Past :data:`checker.spark.small_counts.SMALL_RUN_ROWS` a pass's counts, order checks and
    liveness are Spark jobs too (above, with small runs, they are answered on the client): the
    liveness job of a run without faults sends an empty table, which Spark Connect builds only
    with its schema given (:func:`checker.spark.inputs.arrow_frame`)."""
    run_dir = tmp_path / "big"
    generate_run(run_dir, SMALL_RUN_ROWS + 20_000, seed=5)
    (expected,) = check_pass(PandasEngine(), [load_run(run_dir)], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
    done = subprocess.run(
        [str(CLI), "check", "--remote", remote, str(run_dir)],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # the generator plants lost writes
    assert _results_of([run_dir]) == {str(run_dir): expected}
