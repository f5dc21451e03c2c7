"""The event log's clock under libfaketime: a broker whose wall clock is skewed an hour still
stamps its events with the kernel's time (``broker_impl.real_clock``), so the checker's cross-node
order holds under ``clock-skew``.  Runs a real process with Debian's libfaketime preloaded, as the
node image does; the host's set-up installs the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.cluster import fake_clock

LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SKEW_S = 3600
PROGRAM = """
import json, sys, time
from pathlib import Path
from broker_impl.events import EventLog
log = EventLog(Path(sys.argv[1]), 7)
log.emit("start")
log.close()
print(json.dumps({"process_time_ns": time.time_ns()}))
"""


def test_events_keep_the_kernel_s_time_while_the_process_clock_is_an_hour_ahead(tmp_path: Path) -> None:
    if not LIBRARY.exists():
        message = f"{LIBRARY} missing: apt-get install libfaketime (scripts/setup.sh does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    offset_file = tmp_path / "clock"
    script = fake_clock.set_clock_script(
        fake_clock.NodeClock(SKEW_S, 100, time.time()),
        pid_file=str(tmp_path / "none"),
        offset_file=str(offset_file),
    )
    subprocess.run(["sh", "-c", script], check=True, timeout=10)
    env = {
        **os.environ,
        **fake_clock.DAEMON_ENV,
        "LD_PRELOAD": str(LIBRARY),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
    }
    before = time.time_ns()
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "events.jsonl")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    after = time.time_ns()
    process_time = json.loads(done.stdout)["process_time_ns"]
    assert process_time - after > (SKEW_S - 60) * 10**9, "libfaketime moved the process' clock"
    event = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[0])
    assert before <= event["ts"] <= after, "the event's ts is the kernel's time, not the skewed one"
