"""A ``tidemark`` command run as a child process by a Docker test, and its end within a deadline.

The child gets a session of its own, so a test past its deadline kills the whole process group
(the harness and whatever it started) and removes the containers it left, then fails with the
tail of the output -- a hung run never outlives its test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from testbed.cluster.docker_labels import remove_orphans

REPO = Path(__file__).resolve().parents[2]


def start_cli(*arguments: str) -> subprocess.Popen[bytes]:
    """``python -m harness.cli.main ARGUMENTS`` from the repository, output captured."""
    command = [sys.executable, "-m", "harness.cli.main", *arguments]
    return subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


def finish(child: subprocess.Popen[bytes], what: str, deadline_seconds: float) -> str:
    """The child's output once it ends; past ``deadline_seconds`` it is killed and the test fails."""
    try:
        output, _ = child.communicate(timeout=deadline_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        remove_orphans(docker.from_env())
        tail = output.decode(errors="replace")[-3000:]
        pytest.fail(f"{what} still running after {deadline_seconds:g} s (killed):\n{tail}")
    return output.decode(errors="replace")
