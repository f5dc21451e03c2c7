"""A node's clock model (:class:`~testbed.cluster.fake_clock.NodeClock`) on real processes under
Debian's libfaketime, as the node image preloads it: the spec :func:`set_clock_script` writes makes
a process that has run for a while drift from the moment the fault acts (no jump), a process
started after it (a restarted broker) go on where the node's clock was, and a heal bring it back
to real time at real speed.  No container: the host's set-up installs the same package.

The probe prints its wall clock beside the kernel's, read in the same instant through the raw
system call libfaketime does not intercept (:mod:`broker_impl.real_clock`, what the brokers' events
use).  Not through the monotonic clock and a difference taken here: a host whose wall clock was
stepped (NTP, the hypervisor) between that difference and the reading made a real clock read 20.5 s
ahead (CI, 2026-12-01).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.cluster import fake_clock
from testbed.cluster.fake_clock import REAL_CLOCK, NodeClock

LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
PROBE = """
import json, sys, time
from broker_impl.real_clock import real_time_ns
for _ in sys.stdin:
    print(json.dumps([time.time(), real_time_ns() / 1e9]), flush=True)
"""
ANCHOR_ERROR_S = 0.1
"""How well a spec's anchor knows the process' start: /proc's start (the fork, in 10 ms ticks) is
earlier than libfaketime's own (after the exec and the loader) by tens of milliseconds on a loaded
machine (33 ms seen with two pytest workers beside a Docker run, 2026-12-01).  A rate R multiplies
it by R - 1: 0.9 s at ten times, nothing at real speed."""


def tolerance_s(clock: NodeClock) -> float:
    """How far a reading may lie off ``clock``'s model: the reading's own 0.1 s, and the anchor's."""
    return 0.1 + abs(clock.rate_pct / 100 - 1) * ANCHOR_ERROR_S


class Probe:
    """A process under libfaketime that answers each line with its wall and monotonic clocks."""

    def __init__(self, tmp_path: Path, pid_file: Path) -> None:
        env = {
            **os.environ,
            **fake_clock.DAEMON_ENV,
            "LD_PRELOAD": str(LIBRARY),
            "FAKETIME_TIMESTAMP_FILE": str(tmp_path / "clock"),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROBE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        pid_file.write_text(f"{self.process.pid} {fields[19]}\n")  # as testbed.nodes.remote records a daemon

    def offset(self) -> tuple[float, float]:
        """(real time of the reading, how far the process' wall clock read off it)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("?\n")
        self.process.stdin.flush()
        wall, real = json.loads(self.process.stdout.readline())
        return real, wall - real

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def probes(tmp_path: Path) -> Iterator[list[Probe]]:
    if not LIBRARY.exists():
        message = f"{LIBRARY} missing: apt-get install libfaketime (scripts/setup.sh does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    started: list[Probe] = []
    yield started
    for probe in started:
        probe.close()


def set_clock(tmp_path: Path, clock: NodeClock) -> None:
    script = fake_clock.set_clock_script(
        clock, pid_file=str(tmp_path / "broker.pid"), offset_file=str(tmp_path / "clock")
    )
    subprocess.run(["sh", "-c", script], check=True, timeout=10)


def until(condition_met: object, what: str, timeout_s: float = 5.0) -> None:
    """Poll ``condition_met()`` (a callable) until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition_met():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.05)


def expect(probe: Probe, clock: NodeClock) -> tuple[float, float]:
    """One reading of ``probe`` checked against the model; returns (real time, offset)."""
    real, offset = probe.offset()
    assert offset == pytest.approx(clock.offset_at(real), abs=tolerance_s(clock)), (clock, real, offset)
    return real, offset


def test_a_drift_starts_from_the_reading_a_running_broker_has_and_outlives_its_restart(
    tmp_path: Path, probes: list[Probe]
) -> None:
    set_clock(tmp_path, REAL_CLOCK)
    probes.append(Probe(tmp_path, tmp_path / "broker.pid"))
    born = time.monotonic()
    until(
        lambda: time.monotonic() - born > 2, "the probe to have run 2 s (an anchor at its start would show)"
    )
    expect(probes[0], REAL_CLOCK)

    # Ten times real speed from now: anchored at the process' start, the clock would jump 18 s.
    fast = REAL_CLOCK.drifting(1000, time.time())
    set_clock(tmp_path, fast)
    until(lambda: probes[0].offset()[1] > 0.5, "libfaketime to read the new spec (within a second)")
    first, _ = expect(probes[0], fast)
    until(lambda: time.time() - first > 1, "a second of drift")
    expect(probes[0], fast)

    # The broker restarts: the cluster writes the spec again before the new process starts.
    probes[0].close()
    set_clock(tmp_path, fast)
    probes.append(Probe(tmp_path, tmp_path / "broker.pid"))
    _, after_restart = expect(probes[1], fast)
    assert after_restart > 9, "the restarted process goes on where the node's clock was, not at real time"

    # A jump keeps the drift; a slow clock starts from where the fast one got to.
    jumped = fast.jumped(-300, time.time())
    set_clock(tmp_path, jumped)
    until(lambda: probes[1].offset()[1] < -200, "the jump back")
    expect(probes[1], jumped)
    slow = jumped.drifting(50, time.time())
    set_clock(tmp_path, slow)
    # Until libfaketime reads the spec the clock gains 9 s a second; only at half speed can it lose.
    until(lambda: probes[1].offset()[1] < slow.offset_s - 0.5, "the slow clock to lose half a second")
    expect(probes[1], slow)

    # The heal: real time at real speed (a spec without "x1" would keep the half speed).
    set_clock(tmp_path, REAL_CLOCK)
    until(lambda: abs(probes[1].offset()[1]) < tolerance_s(REAL_CLOCK), "real time again")
    healed = time.time()
    until(lambda: time.time() - healed > 1, "a second at real time")
    expect(probes[1], REAL_CLOCK)


def test_the_spec_is_written_whole_with_the_rate_always_named(tmp_path: Path) -> None:
    set_clock(tmp_path, NodeClock(-30, 100, time.time()))
    assert (tmp_path / "clock").read_text() == "-30.000 x1\n" and not (tmp_path / "clock.new").exists()
    set_clock(tmp_path, NodeClock(120, 25, time.time() + 1000))  # anchored in 1000 s: it reads 750 s more now
    offset, rate = (tmp_path / "clock").read_text().split()
    assert float(offset) == pytest.approx(120 + 750, abs=1) and rate == "x0.25"
    assert fake_clock.DAEMON_ENV["DONT_FAKE_MONOTONIC"] == "1", "timeouts keep the real monotonic clock"
    assert fake_clock.DAEMON_ENV["FAKETIME_TIMESTAMP_FILE"] == fake_clock.OFFSET_FILE


@pytest.mark.parametrize(
    ("rate", "message"),
    [(100, "not 100"), (-5, "from 0"), (10_001, "to 10000"), (1.5, "whole"), (True, "whole")],
)
def test_a_rate_that_is_no_drift_is_refused(rate: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fake_clock.checked_rate(rate)


def test_the_model_keeps_the_reading_across_changes() -> None:
    fast = REAL_CLOCK.drifting(300, 1000.0)
    assert fast.offset_at(1010.0) == 20.0 and not fast.is_real
    slow = fast.drifting(50, 1010.0)
    assert slow.offset_at(1010.0) == 20.0 and slow.offset_at(1030.0) == 10.0
    assert slow.jumped(-5, 1030.0).offset_at(1040.0) == -10.0, "a jump keeps the rate"
    assert REAL_CLOCK.is_real and REAL_CLOCK.offset_at(1e9) == 0
