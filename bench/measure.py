"""What the checker benches share: each measurement in its own worker process, its memory sampled.

``bench/checker.py`` (the plain checks) and ``bench/txn_checker.py`` (the transactional family)
run every engine of a round in a subprocess of their own script (``--worker ENGINE ...``), which
prints one JSON line; :func:`run_worker` starts it and reads that line.  Inside the worker a
:class:`PeakSampler` samples, every 0.25 s, the RSS of the worker and every descendant (the Spark
JVM included: ``peak_rss``) and the kernel's high-water mark (``VmHWM``) of every java descendant
(``jvm_peak_rss``); ``driver_peak_rss`` is the Python process's own ``ru_maxrss``.
:func:`print_ranges` prints each engine's min-max over the rounds, wall time and ratio to the
round's reference row.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


def descendants(root: int) -> list[int]:
    """``root`` and every process descended from it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def tree_rss(root: int) -> int:
    """RSS in bytes of ``root`` and all its descendants, from /proc."""
    total = 0
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return total


def java_peaks(root: int, peaks: dict[int, int]) -> None:
    """Record in ``peaks`` (pid -> bytes) the peak RSS so far (``VmHWM``) of every java process
    descended from ``root`` -- the Spark JVM.  The kernel keeps the high-water mark, so sampling
    while the JVM lives (and once more before it is stopped) misses no peak but a last moment's."""
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                if handle.read().strip() != "java":
                    continue
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]) * 1024)
        except (OSError, IndexError, ValueError):
            continue


class PeakSampler:
    """Samples this process tree's RSS and its JVMs' peaks in a thread, from :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self.peak = 0
        self.java: dict[int, int] = {}
        self._done = threading.Event()

    def start(self) -> None:
        def sample() -> None:
            while not self._done.wait(0.25):
                self.peak = max(self.peak, tree_rss(os.getpid()))
                self.sample_java()

        threading.Thread(target=sample, daemon=True).start()

    def sample_java(self) -> None:
        """Sample the JVMs now: call it before a Spark session stops, or its last peak is missed."""
        java_peaks(os.getpid(), self.java)

    def stop(self) -> dict[str, int]:
        """``peak_rss``, ``driver_peak_rss`` and ``jvm_peak_rss``, in bytes."""
        self._done.set()
        self.peak = max(self.peak, tree_rss(os.getpid()))
        return {
            "peak_rss": self.peak,
            # ru_maxrss: the driver's (this Python process's) own peak, in KiB on Linux.
            "driver_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "jvm_peak_rss": max(self.java.values(), default=0),
        }


def local_session() -> Any:
    """The Spark session every Spark row of the benches starts: ``local[2]``, a 3 GB driver."""
    from checker.spark.session import build_session

    return build_session("local[2]", driver_memory="3g")


@contextlib.contextmanager
def checker_engine(name: str, sampler: PeakSampler) -> Iterator[tuple[Any, float]]:
    """The checker's engine ``name`` (``spark``: a :func:`local_session`; else the pandas engine)
    and the seconds starting it took; at the end a Spark session's JVM peak is sampled, then it stops."""
    started = time.perf_counter()
    session = None
    if name == "spark":
        from checker.spark.engine import SparkEngine

        session = local_session()
        engine: Any = SparkEngine(session)
    else:
        from checker.pandas.engine import PandasEngine

        engine = PandasEngine()
    try:
        yield engine, time.perf_counter() - started
    finally:
        if session is not None:
            sampler.sample_java()  # the JVM's last high-water mark before it stops
            engine.close()
            session.stop()


def timed_pass(
    engine: Any, load: Callable[[], list[Any]], checks: Iterable[str]
) -> tuple[list[Any], list[dict[str, Any]], float, dict[str, float]]:
    """One pass of the real checker (``checker.driver.check_pass``), loading the runs included:
    the runs, their results, the wall seconds and each question's (:func:`question_seconds`)."""
    from checker.definitions import DEFAULT_EXAMPLE_LIMIT
    from checker.driver import check_pass

    answered: list[tuple[str, float]] = []
    started = time.perf_counter()
    runs = load()
    results = check_pass(
        engine,
        runs,
        checks,
        DEFAULT_EXAMPLE_LIMIT,
        on_answer=lambda question: answered.append((question, time.perf_counter())),
    )
    return runs, results, time.perf_counter() - started, question_seconds(answered, started)


def run_worker(script: str, engine: str, sources: list[Path]) -> dict[str, Any]:
    """Run ``script --worker ENGINE SOURCES...`` in a fresh interpreter; its last stdout line, parsed."""
    command = [sys.executable, script, "--worker", engine, *map(str, sources)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"the {engine} worker failed (exit {done.returncode}); its stderr is above")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def question_seconds(answered: list[tuple[str, float]], started: float) -> dict[str, float]:
    """Each question's wall time (``checker.driver.QUESTIONS``): from the previous answer of its
    chain (the driver answers the history questions in one thread, the rest in another) or the
    pass's start."""
    from checker.driver import HISTORY_QUESTIONS

    seconds: dict[str, float] = {}
    last = {True: started, False: started}
    for question, at in answered:
        chain = question in HISTORY_QUESTIONS
        seconds[question] = at - last[chain]
        last[chain] = at
    return seconds


def print_ranges(
    measured: dict[tuple[str, str], list[tuple[float, float]]], rounds: int, reference: str
) -> None:
    """Min-max over the rounds of each size and engine: the figures an issue note quotes."""
    print(f"# ranges over {rounds} round(s)")
    for (size_text, engine), figures in measured.items():
        walls = [wall for wall, _ in figures]
        ratios = [ratio for _, ratio in figures]
        print(
            f"{size_text:>8} {engine:>16} {min(walls):6.1f}-{max(walls):.1f} s"
            f"   {min(ratios):.2f}-{max(ratios):.2f}x {reference}"
        )
