"""Benchmark: run report and index rendering on a large synthetic run.

    .venv/bin/python bench/report.py [--ops 100000] [--runs 50] [--data /tmp/tidemark-bench-report]

Writes one run directory whose ``history.jsonl`` has ``--ops`` ops (producers' send
invoke/completion pairs with ok/fail/info outcomes and a latency spike under each fault,
consumer polls, nemesis kill/start, pause/resume and partition/heal pairs, and a final
drain holding every acknowledged value), a ``results.json`` with examples of several
anomalies, and ``replicas.parquet`` with a divergence.  Then it times, each in a fresh
process so imports are counted as a user sees them:

* the timeline analysis alone, from ``history.jsonl`` and from ``history.parquet``;
* ``render_run_report`` end to end, from each source (``tidemark report RUN_DIR``);
* ``render_index`` over ``--runs`` copies of the run's small files (test.json,
  results.json, a short history tail), as a campaign would have;

and prints the page sizes.  Every time includes the imports (measured alone first).  No
assertion: the numbers are printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.record.history import HistoryWriter, convert_history
from testbed.record.ops import Op

PRODUCERS, CONSUMERS = 8, 2
FRESH_PROCESS_BASE = 1000
FAULTS = [("kill", "start", ["n2"]), ("pause", "resume", ["n1"]), ("partition", "heal", ["n1", "n2", "n3"])]


def generate_history(path: Path, ops_wanted: int, seed: int) -> int:
    """Sends, polls, nemesis pairs and a final drain, in time order; returns the op count."""
    rng = random.Random(seed)
    events: list[tuple[int, int, str, str, object, str | None]] = []  # time, process, type, f, value, error
    sends = ops_wanted // 2 - ops_wanted // 80
    duration_ns = max(60, sends // 500) * 1_000_000_000
    fault_windows = []
    for number, start in enumerate(range(10, duration_ns // 1_000_000_000 - 10, 20)):
        fault, heal, nodes = FAULTS[number % len(FAULTS)]
        begin, end = start * 1_000_000_000, (start + 8) * 1_000_000_000
        fault_windows.append((begin, end))
        fault_value = (
            {"nodes": nodes} if fault != "partition" else {"kind": "halves", "grudge": {"n1": ["n2", "n3"]}}
        )
        events += [
            (begin, -1, "invoke", fault, fault_value, None),
            (begin + 50_000_000, -1, "ok", fault, fault_value, None),
            (end, -1, "invoke", heal, {"nodes": nodes}, None),
            (end + 80_000_000, -1, "ok", heal, {"nodes": nodes}, None),
        ]
    spacing = duration_ns // (sends // PRODUCERS + 1)
    value = 0
    acked = []
    # After an info send a producer goes on under a fresh process id, as the op model requires:
    # ids from FRESH_PROCESS_BASE up, clear of the consumers' and the drain's.
    fresh = itertools.count(FRESH_PROCESS_BASE)
    for producer in range(PRODUCERS):
        process = producer
        clock = rng.randrange(spacing)
        for _ in range(sends // PRODUCERS):
            value += 1
            faulty = any(a <= clock <= b for a, b in fault_windows)
            latency = int(rng.lognormvariate(16 if not faulty else 19, 0.6))
            outcome = rng.choices(["ok", "fail", "info"], [90, 5, 5] if faulty else [998, 1, 1])[0]
            send = {"partition": value % 3, "key": f"k{value % 3}", "value": value}
            events.append((clock, process, "invoke", "send", send, None))
            if outcome == "ok":
                acked.append(value)
                events.append((clock + latency, process, "ok", "send", {**send, "offset": len(acked)}, None))
            else:
                events.append(
                    (
                        clock + latency,
                        process,
                        outcome,
                        "send",
                        None,
                        "timeout" if outcome == "info" else "NOT_LEADER",
                    )
                )
                if outcome == "info":
                    process = next(fresh)
            clock += latency + spacing
    polls = ops_wanted // 40
    for number in range(polls // 2):
        process = PRODUCERS + number % CONSUMERS
        clock = duration_ns * number // (polls // 2)
        records = [{"partition": 0, "offset": number, "key": "k0", "value": number + 1}]
        events += [
            (clock, process, "invoke", "poll", None, None),
            (clock + 1_000_000, process, "ok", "poll", records, None),
        ]
    events.sort(key=lambda event: (event[0], event[2] != "invoke"))
    drain_process = PRODUCERS + CONSUMERS
    with HistoryWriter(path) as writer:
        index = 0
        for clock, process, kind, f, op_value, error in events:
            writer.append(Op(index, clock, "nemesis" if process < 0 else process, kind, f, op_value, error))  # type: ignore[arg-type]
            index += 1
        drained = [{"offset": i, "key": "k0", "value": v} for i, v in enumerate(acked)]
        end = events[-1][0] + 1_000_000_000
        writer.append(Op(index, end, drain_process, "invoke", "drain", {"partition": 0}))
        writer.append(
            Op(
                index + 1,
                end + 300_000_000,
                drain_process,
                "ok",
                "drain",
                {"partition": 0, "records": drained, "end_offset": len(drained), "complete": True},
            )
        )
    return index + 2


def write_run(run_dir: Path, ops: int) -> int:
    run_dir.mkdir(parents=True)
    (run_dir / "nodes" / "n1").mkdir(parents=True)
    (run_dir / "nodes" / "n1" / "broker.log").write_text("broker log\n")
    count = generate_history(run_dir / "history.jsonl", ops, seed=1)
    spec = {
        "schema_version": 1,
        "name": "bench",
        "topic": "tidemark",
        "node_count": 3,
        "settings": {"truncation.mode": "high-watermark"},
        "workload": {"acks": "all", "partitions": 3},
        "nemesis": {"faults": ["kill", "pause", "partition"]},
        "scenario": None,
        "versions": {"python": sys.version.split()[0]},
    }
    (run_dir / "test.json").write_text(json.dumps(spec))
    send = {
        "index": 5,
        "time": 1_000_000,
        "process": 0,
        "type": "ok",
        "f": "send",
        "value": {"partition": 0, "key": "k0", "value": 7, "offset": 3},
    }
    results = {
        "schema_version": 1,
        "valid": False,
        "expected_only": True,
        "incomplete": [],
        "checks": [],
        "anomalies": {
            "lost-write": {
                "count": 12,
                "expected": True,
                "rule": "truncation.mode=high-watermark",
                "severity": "error",
                "examples": [{"partition": 0, "value": 7, "offset": 3, "send": send}] * 5,
            },
            "replica-divergence": {
                "count": 3,
                "expected": True,
                "rule": "truncation.mode=high-watermark",
                "severity": "error",
                "examples": [
                    {
                        "partition": 0,
                        "offset": 3,
                        "positions": 3,
                        "replicas": {
                            "n1": {"offset": 3, "leader_epoch": 0, "key": "k0", "value": "7"},
                            "n2": {"offset": 3, "leader_epoch": 1, "key": "k0", "value": "9"},
                        },
                    }
                ],
            },
        },
        "config": {"rules": ["truncation.mode=high-watermark"]},
        "stats": {},
    }
    (run_dir / "results.json").write_text(json.dumps(results))
    return count


def timed(code: str) -> float:
    """Seconds for ``code`` in a fresh interpreter (imports included), measured inside it."""
    program = f"import time, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r}); t = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    output = subprocess.run(
        [sys.executable, "-c", program], check=True, capture_output=True, text=True
    ).stdout
    return float(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--data", type=Path, default=Path("/tmp/tidemark-bench-report"))
    args = parser.parse_args()
    shutil.rmtree(args.data, ignore_errors=True)
    run_dir = args.data / "campaign" / "run-0000"
    started = time.perf_counter()
    count = write_run(run_dir, args.ops)
    size = (run_dir / "history.jsonl").stat().st_size
    print(
        f"history: {count} ops, {size / 2**20:.1f} MiB JSON lines (written in {time.perf_counter() - started:.1f} s)"
    )
    analyse = f"from harness.report.timeline import build_timeline; from pathlib import Path; build_timeline(Path({str(run_dir)!r}))"
    render = f"from harness.report.run_page import render_run_report; render_run_report({str(run_dir)!r})"
    print(f"imports alone (pandas, pyarrow, matplotlib): {timed('import harness.report.run_page'):6.2f} s")
    print(f"timeline from history.jsonl:     {timed(analyse):6.2f} s")
    print(f"report.html from history.jsonl:  {timed(render):6.2f} s")
    convert_history(run_dir / "history.jsonl", run_dir / "history.parquet")
    print(f"timeline from history.parquet:   {timed(analyse):6.2f} s")
    print(f"report.html from history.parquet:{timed(render):6.2f} s")
    print(f"report.html size: {(run_dir / 'report.html').stat().st_size / 1024:.0f} KiB")
    tail = (run_dir / "history.jsonl").read_bytes()[-100_000:]
    for number in range(1, args.runs):
        copy = run_dir.with_name(f"run-{number:04d}")
        copy.mkdir()
        for name in ("test.json", "results.json"):
            shutil.copy(run_dir / name, copy / name)
        (copy / "history.jsonl").write_bytes(tail)
        os.symlink(run_dir / "report.html", copy / "report.html")
    index = f"from harness.report.index import render_index; render_index({str(args.data / 'campaign')!r})"
    print(
        f"index.html of {args.runs} runs:      {timed(index):6.2f} s, "
        f"{(args.data / 'campaign' / 'index.html').stat().st_size / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    main()
