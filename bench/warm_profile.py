"""Where a warm pass's time goes: the pass of ``bench/checker.py --warm``, profiled on both sides.

    .venv/bin/python bench/warm_profile.py --size 10M/1k [--checks core|all] [--out /tmp/warm-profile]

Starts a Spark Connect server as the warm row does (``local[2]``, a 3 GB driver), with Spark's event
log on, runs one untimed warm-up pass through it and then the profiled pass -- a fresh client
session and engine, the runs loaded as the bench's rows load them -- and prints:

* the client's phases: the session, loading the runs, each question (``checker.driver.QUESTIONS``,
  each from the previous answer of its chain, as ``bench/measure.py`` counts them), closing;
* where the client's threads were, by a stack sampler (``sys._current_frames`` every few ms, so
  both of the driver's threads, waiting on the server included): functions by inclusive time;
* CPU seconds of the client process and of the server's JVM by thread kind (``/proc``: the JIT
  compilers, GC, task threads, the Connect handlers) and of its Python workers, over the pass;
* each Spark Connect operation of the pass from the server's event log (:mod:`bench.event_log`):
  phases, jobs, stages and their tasks (shuffle reads marked), task and CPU time, scheduler delay;
  the SQL executions' physical plans (AQE's final ones too) go to ``OUT/plans.txt``.

The sampler and the reading of ``/proc`` cost the client a little CPU; the profiled pass's wall time
is therefore a little above the bench's warm row, whose figures are the ones to quote.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.event_log import operations, plans, read_events, report
from bench.measure import descendants, question_seconds

_TICK = os.sysconf("SC_CLK_TCK")
_SESSION_CLOSED = "org.apache.spark.sql.connect.service.SparkListenerConnectSessionClosed"


class StackSampler:
    """Counts, every ``period`` seconds, each function on the stack of every other thread of this process."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.leaf: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self.seconds = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.seconds = time.perf_counter() - self._started

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._done.wait(self.period):
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self._count(frame)

    def _count(self, frame: FrameType | None) -> None:
        seen: set[str] = set()
        leaf = True
        while frame is not None:
            code = frame.f_code
            parts = Path(code.co_filename).parts
            key = f"{'/'.join(parts[-2:])}:{code.co_name}"
            if leaf:
                self.leaf[key] += 1
                leaf = False
            if key not in seen:
                seen.add(key)
                self.inclusive[key] += 1
            frame = frame.f_back

    def lines(self, top: int) -> list[str]:
        per_sample = self.seconds / max(1, self.samples)
        out = [
            f"# client stacks: {self.samples} samples over {self.seconds:.1f} s (thread-seconds, all threads)"
        ]
        for key, count in self.inclusive.most_common(top):
            out.append(f"{count * per_sample:8.2f} s incl {self.leaf[key] * per_sample:7.2f} s leaf  {key}")
        return out


def _stat(path: str) -> tuple[str, float, float]:
    """A /proc stat file's command name, own CPU seconds and waited-for children's CPU seconds."""
    with open(path) as handle:
        text = handle.read()
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK


def _kind(name: str) -> str:
    return re.sub(r"\d+", "N", name).rstrip(" #-_.N") or name


def threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its kind (name, digits folded) and CPU seconds."""
    found = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            name, cpu, _ = _stat(f"/proc/{pid}/task/{task}/stat")
        except (OSError, ValueError):
            continue
        found[int(task)] = (_kind(name), cpu)
    return found


def workers_cpu(jvm: int) -> float:
    """CPU seconds of the live processes below the JVM (its Python workers) and of those they waited for."""
    total = 0.0
    for pid in descendants(jvm)[1:]:
        try:
            _, own, children = _stat(f"/proc/{pid}/stat")
        except (OSError, ValueError):
            continue
        total += own + children
    return total


def jvm_of(pid: int) -> int:
    for candidate in descendants(pid):
        try:
            with open(f"/proc/{candidate}/comm") as handle:
                if handle.read().strip() == "java":
                    return candidate
        except OSError:
            continue
    raise RuntimeError(f"no java process below {pid}")


def cpu_lines(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> list[str]:
    spent: collections.Counter[str] = collections.Counter()
    for tid, (kind, cpu) in after.items():
        spent[kind] += cpu - before.get(tid, (kind, 0.0))[1]
    gone = [tid for tid in before if tid not in after]
    lines = [
        f"# server JVM CPU over the pass: {sum(spent.values()):.2f} s ({len(gone)} thread(s) ended meanwhile, not counted)"
    ]
    lines += [f"{seconds:8.2f} s  {kind}" for kind, seconds in spent.most_common(14) if seconds >= 0.01]
    return lines


def profiled_pass(runs: list[Path], remote: str, checks: frozenset[str]) -> list[tuple[str, float]]:
    """One pass as the warm row's timed one (a fresh session and engine, runs loaded one by one),
    with each phase's end: ``session``, ``load``, every question answered, ``close``."""
    from checker.api import open_engine
    from checker.definitions import DEFAULT_EXAMPLE_LIMIT
    from checker.driver import check_pass
    from checker.evidence import load_run

    marks = [("start", time.perf_counter())]
    with open_engine("spark", remote=remote) as engine:
        marks.append(("session", time.perf_counter()))
        loaded = [load_run(run) for run in runs]
        marks.append(("load", time.perf_counter()))
        check_pass(
            engine,
            loaded,
            checks,
            DEFAULT_EXAMPLE_LIMIT,
            on_answer=lambda question: marks.append((question, time.perf_counter())),
        )
        marks.append(("checked", time.perf_counter()))
    marks.append(("close", time.perf_counter()))
    return marks


def phase_lines(marks: list[tuple[str, float]]) -> list[str]:
    named = dict(marks)
    questions = question_seconds(
        [m for m in marks if m[0] not in ("start", "session", "load", "checked", "close")], named["load"]
    )
    lines = [
        f"# client phases: session {named['session'] - named['start']:.2f} s, loading {named['load'] - named['session']:.2f} s, "
        f"checking {named['checked'] - named['load']:.2f} s (the bench's figure: loading + checking "
        f"{named['checked'] - named['session']:.2f} s), closing {named['close'] - named['checked']:.2f} s"
    ]
    lines += [f"{seconds:8.2f} s  {question}" for question, seconds in questions.items()]
    return lines


def _log_file(directory: Path) -> Path:
    files = [path for path in directory.iterdir() if path.is_file()]
    if len(files) != 1:
        raise RuntimeError(f"expected one event log in {directory}, found {files}")
    return files[0]


def _events_until_closed(log: Path, offset: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The events after ``offset``, once the profiled session's close is among them (the listener
    bus writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        events = read_events(log, offset)
        if any(event.get("Event") == _SESSION_CLOSED for event in events) or time.monotonic() > deadline:
            return events
        time.sleep(0.2)  # polling the condition above


def main() -> None:
    from bench.checker import _size, dataset
    from checker.definitions import ALL_CHECKS, CORE_CHECKS
    from checker.spark.connect_server import connect_server

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="10M/1k", help="TOTAL/RUN rows, as bench/checker.py --sizes (one)")
    parser.add_argument(
        "--data", default="/tmp/tidemark-bench", help="where bench/checker.py caches its runs"
    )
    parser.add_argument("--checks", choices=("core", "all"), default="core")
    parser.add_argument("--out", default="/tmp/tidemark-warm-profile", help="event log and plans")
    parser.add_argument("--top", type=int, default=40, help="client functions shown")
    args = parser.parse_args()
    total_text, _, run_text = args.size.partition("/")
    runs = dataset(Path(args.data), _size(total_text), _size(run_text or total_text))
    checks = frozenset(ALL_CHECKS if args.checks == "all" else CORE_CHECKS)
    out = Path(args.out)
    events_dir = out / "events"
    shutil.rmtree(events_dir, ignore_errors=True)  # an earlier profile's log
    events_dir.mkdir(parents=True)
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events_dir.as_uri(),
        "spark.eventLog.rolling.enabled": "false",  # one file, read from an offset
        "spark.eventLog.compress": "false",  # Spark 4 writes zstd otherwise: no byte offsets
    }
    with connect_server(master="local[2]", driver_memory="3g", conf=conf) as server:
        jvm = jvm_of(server.process.pid)
        profiled_pass(runs, server.url, checks)  # the warm-up
        log = _log_file(events_dir)
        offset = log.stat().st_size
        before, workers_before, client_before = threads_cpu(jvm), workers_cpu(jvm), os.times()
        sampler = StackSampler()
        sampler.start()
        started = time.time()
        marks = profiled_pass(runs, server.url, checks)
        ended = time.time()
        sampler.stop()
        after, workers_after, client_after = threads_cpu(jvm), workers_cpu(jvm), os.times()
        events = _events_until_closed(log, offset)
    # What the report below reads, kept to be read again (``bench/event_log.py``) without a server.
    (out / "pass.json").write_text(
        json.dumps({"log": str(log), "offset": offset, "started": started, "ended": ended, "marks": marks}),
        encoding="utf-8",
    )
    client = (client_after.user + client_after.system) - (client_before.user + client_before.system)
    lines = [f"# {args.size}: {len(runs)} runs, checks {args.checks}, warm pass through {server.url}"]
    lines += phase_lines(marks)
    lines += [f"# client process CPU over the pass: {client:.2f} s"]
    lines += cpu_lines(before, after)
    lines += [f"# server's Python workers' CPU over the pass: {workers_after - workers_before:.2f} s"]
    lines += report(operations(events), (int(started * 1000), int(ended * 1000)))
    lines += sampler.lines(args.top)
    (out / "plans.txt").write_text("\n\n".join(plans(events)) + "\n", encoding="utf-8")
    (out / "profile.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"# plans: {out / 'plans.txt'}; this report: {out / 'profile.txt'}")


if __name__ == "__main__":
    main()
