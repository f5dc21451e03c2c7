"""The supervisor loop a tansu broker runs under (:func:`testbed.cluster.tansu.supervised`), on real
local processes: a server that exits on its own is started again; a kill of the process group, the
nemesis's kill, ends the loop and the server together."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from testbed.cluster.tansu import supervised


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def test_a_server_that_exits_on_its_own_is_started_again_and_a_group_kill_ends_both(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts"
    # Exits 3 on its first start (as tansu does without PostgreSQL), then runs.
    server = f'echo started >> {attempts}; [ "$(wc -l < {attempts})" -ge 2 ] && exec sleep 600; exit 3'
    log = (tmp_path / "log").open("wb")
    loop = subprocess.Popen(
        supervised(["sh", "-c", server], "tansu"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: attempts.exists() and attempts.read_text().count("started") == 2, 10, "the second start"
        )
        assert "tansu exited with status 3, starting it again" in (tmp_path / "log").read_text()
        assert loop.poll() is None
        children = subprocess.run(
            ["pgrep", "-g", str(loop.pid)], capture_output=True, text=True
        ).stdout.split()
        assert len(children) >= 2, children  # the loop and the running server
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait(timeout=10)
        log.close()
    wait_for(
        lambda: subprocess.run(["pgrep", "-g", str(loop.pid)], capture_output=True).returncode == 1,
        10,
        "no process of the group left",
    )
    assert attempts.read_text().count("started") == 2, "nothing started after the kill"
