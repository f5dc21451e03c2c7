"""Append throughput through lazyfs against the plain disk underneath it.

Usage: ``.venv/bin/python bench/lazyfs.py [--writes N] [--fsync-writes M] [--runs R] [--dir DIR]``

Prints, for the plain directory and for lazyfs: 4 KiB ``O_APPEND`` writes per second and MB/s with no fsync (what a Kafka-style broker with
``flush.messages`` unset does), and 4 KiB writes each followed by ``fsync`` per second. Each figure is
the median of ``--runs`` runs. Unsynced data is dropped through the control file between runs so
memory does not grow. Everything created lives under one temporary directory that is removed, and
every mount is unmounted, also on failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from nemesis.lazyfs.control import is_lazyfs_mounted, send_command, unmount, wait_until_serving  # noqa: E402

BLOCK = b"\xa5" * 4096


def append_rate(directory: Path, writes: int, fsync_each: bool) -> float:
    """Writes per second of ``writes`` 4 KiB appends to a new file in ``directory``."""
    path = directory / f"segment-{time.monotonic_ns()}"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(writes):
            os.write(descriptor, BLOCK)
            if fsync_each:
                os.fsync(descriptor)
        elapsed = time.perf_counter() - start
    finally:
        os.close(descriptor)
    path.unlink()
    return writes / elapsed


@contextmanager
def lazyfs_mount(backing: Path, mountpoint: Path) -> Iterator[Path]:
    """A lazyfs serving ``backing`` at ``mountpoint`` for the duration of the block."""
    backing.mkdir()
    mountpoint.mkdir()
    command = [sys.executable, "-m", "nemesis.lazyfs", "mount", str(backing), str(mountpoint), "--foreground"]
    process = subprocess.Popen(command, cwd=REPO_ROOT)
    try:
        wait_until_serving(str(mountpoint), 30, is_alive=lambda: process.poll() is None)
        yield mountpoint
    finally:
        if is_lazyfs_mounted(str(mountpoint)):
            send_command(str(mountpoint), "drop")
            unmount(str(mountpoint))
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def filesystem_of(path: Path) -> str:
    result = subprocess.run(["df", "--output=fstype", str(path)], capture_output=True, text=True, check=False)
    lines = result.stdout.split()
    return lines[-1] if result.returncode == 0 and lines else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=50_000, help="4 KiB appends per no-fsync run")
    parser.add_argument("--fsync-writes", type=int, default=2_000, help="4 KiB appends per fsync-each run")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the median is printed)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to create the test directories")
    arguments = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lazyfs-bench-", dir=arguments.dir))
    results: dict[tuple[str, bool], list[float]] = {}
    try:
        plain = root / "plain"
        plain.mkdir()
        with lazyfs_mount(root / "backing", root / "mountpoint") as mounted:
            # Interleaved, so drift in the shared disk's fsync latency hits both targets alike.
            for _ in range(arguments.runs):
                for fsync_each, writes in ((False, arguments.writes), (True, arguments.fsync_writes)):
                    for target, directory in (("plain", plain), ("lazyfs", mounted)):
                        rate = append_rate(directory, writes, fsync_each)
                        results.setdefault((target, fsync_each), []).append(rate)
                        if target == "lazyfs":
                            send_command(str(mounted), "drop")
        filesystem = filesystem_of(plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"4 KiB appends: {arguments.writes} per run without fsync, {arguments.fsync_writes} per run with "
        f"fsync after each; median of {arguments.runs} runs; {os.cpu_count()} CPUs; disk: {filesystem}"
    )
    print(f"{'target':<10} {'writes/s':>12} {'MB/s':>9} {'fsync writes/s':>16}")
    for target in ("plain", "lazyfs"):
        rate = statistics.median(results[(target, False)])
        fsync_rate = statistics.median(results[(target, True)])
        print(f"{target:<10} {rate:>12,.0f} {rate * len(BLOCK) / 1e6:>9,.1f} {fsync_rate:>16,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
