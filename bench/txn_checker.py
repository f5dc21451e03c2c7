"""Benchmark: the transactional checks -- Spark, the embedded engine and a DuckDB/networkx reference.

    .venv/bin/python bench/txn_checker.py                               # 1000x10k and 1x100kt
    .venv/bin/python bench/txn_checker.py --sizes 20x2k,1x5kt           # a quick check
    .venv/bin/python bench/txn_checker.py --sizes 300x10k --repeats 2 --only spark

A size ``RUNSxN`` is RUNS runs of N micro-ops each (sends and polls of every transaction,
read-only ones included), ``RUNSxNt`` RUNS runs of N transactions; N takes ``k`` and ``M``.  The
runs are generated once, cached under ``--data`` (:mod:`checker.synthetic_txn_runs`: producers
committing, aborting and timing out transactions of 1-4 micro-ops over four partitions, consumers
reading committed values, a final drain), with G1a, G1c and lost commits planted at
``--plant-rate`` of the transactions (each at least once per run).  Then, per round, each in its
own process (``bench/measure.py``: peak RSS of the process tree, of the driver and of the JVM):

* ``reference`` -- :mod:`bench.txn_reference`: DuckDB SQL for the checks and the graphs' edges,
  networkx for the cycles (its two parts' seconds printed apart);
* ``spark`` -- the real checker (``checker.driver.check_pass``, ``SparkEngine``, ``local[2]``):
  the transactional family per run through ``groupBy(run_id).applyInPandas``, the value checks
  (lost-write, G1a) as Spark jobs; session start timed apart;
* ``pandas`` -- the real checker with the embedded engine, the same per-run function called per
  run; its cycle search is timed apart (the wrappers cost a few clock reads per run): ``cycles``
  is :func:`checker.txn.cycles.cycle_findings` (both graphs built, searched, examples made),
  ``search`` :func:`checker.txn.graph.find_cycles` alone (components and shortest cycles).

Each row prints its wall time, its ratio to the same round's reference, and its verdict: every
engine's per-run counts of :data:`bench.txn_reference.CHECKS` must be exactly the planted ones
(G1a, G1c, lost-write and torn-transaction; nothing else), so the three answers agree run by run.
Any disagreement is printed and makes the bench exit 1.  No timing is asserted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import PeakSampler, checker_engine, print_ranges, run_worker, timed_pass
from bench.txn_reference import CHECKS, reference_counts
from checker.synthetic_txn_runs import PLANT_RATE, PLANTED_KINDS, generate_txn_run

REFERENCE: Final = "reference"
ENGINES: Final[tuple[str, ...]] = (REFERENCE, "spark", "pandas")
GENERATION: Final = 1
"""Part of the cached data's directory name: bump it when the generator changes."""
SAMPLER = PeakSampler()

Counts = dict[str, dict[str, int]]
"""Per run id (as text, as JSON keys are), each non-zero count."""


def parse_size(text: str) -> tuple[int, int | None, int | None]:
    """``RUNSxN`` (micro-ops) or ``RUNSxNt`` (transactions): (runs, micro-ops, transactions)."""
    runs, _, per_run = text.strip().lower().partition("x")
    txns = per_run.endswith("t")
    per_run = per_run.removesuffix("t")
    scale = {"k": 1_000, "m": 1_000_000}.get(per_run[-1:], 1)
    number = int(float(per_run.rstrip("km")) * scale)
    return int(runs), None if txns else number, number if txns else None


def dataset(root: Path, size: str, plant_rate: float) -> tuple[list[Path], list[dict[str, Any]]]:
    """The runs of ``size`` (generated unless cached) and their ``planted.json``."""
    runs_n, micro_ops, txns = parse_size(size)
    target = root / f"{size.lower()}-rate{plant_rate:g}-g{GENERATION}"
    runs = [target / f"run-{i:04d}" for i in range(runs_n)]
    missing = [(seed, run) for seed, run in enumerate(runs) if not (run / "planted.json").is_file()]
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        done = [
            pool.submit(generate_txn_run, run, seed, micro_ops, txns, plant_rate) for seed, run in missing
        ]
        for future in done:
            future.result()
    return runs, [json.loads((run / "planted.json").read_text()) for run in runs]


def expected_counts(planted: list[dict[str, Any]]) -> Counts:
    """What every engine must answer: the planted kinds per run (run id = seed + 1), nothing else."""
    return {
        str(seed + 1): {kind: int(p[kind]) for kind in PLANTED_KINDS if p[kind]}
        for seed, p in enumerate(planted)
    }


def disagreements(
    found: Mapping[str, Mapping[str, int]], expected: Mapping[str, Mapping[str, int]]
) -> list[str]:
    """Every (run, anomaly) whose count is not the expected one, as text."""
    wrong = []
    for run in sorted(set(found) | set(expected), key=int):
        mine, wanted = found.get(run, {}), expected.get(run, {})
        for kind in sorted(set(mine) | set(wanted)):
            if mine.get(kind, 0) != wanted.get(kind, 0):
                wrong.append(f"run {run} {kind}: {mine.get(kind, 0)}, planted {wanted.get(kind, 0)}")
    return wrong


# ---------------------------------------------------------------- engines (in a worker process)


def _timed(spent: dict[str, float], key: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - started

    return timed


def _time_the_cycles() -> dict[str, float]:
    """Wrap the per-run function, the cycle findings and the search (module globals, looked up at
    each call) to add up their seconds in this process: the embedded engine's only."""
    import checker.txn.cycles as cycles
    import checker.txn.run as txn_run

    spent = {"per-run": 0.0, "cycles": 0.0, "search": 0.0}
    wrapped = ((txn_run, "run_anomalies", "per-run"), (txn_run, "cycle_findings", "cycles"))
    for module, name, key in (*wrapped, (cycles, "find_cycles", "search")):
        setattr(module, name, _timed(spent, key, getattr(module, name)))
    return spent


def _checker(runs: list[Path], engine_name: str) -> tuple[Counts, float, float, dict[str, Any]]:
    """The real checker's counts, wall and session seconds, and details (question and cycle seconds)."""
    from checker.evidence import load_run

    with checker_engine(engine_name, SAMPLER) as (engine, session_seconds):
        spent = _time_the_cycles() if engine_name == "pandas" else {}
        loaded, results, seconds, questions = timed_pass(engine, lambda: [load_run(r) for r in runs], CHECKS)
    counts = {
        str(run.history_run_id): {k: int(a["count"]) for k, a in result["anomalies"].items() if k in CHECKS}
        for run, result in zip(loaded, results, strict=True)
    }
    return counts, seconds, session_seconds, {"questions": questions, **spent}


def worker(engine: str, runs: list[Path]) -> None:
    SAMPLER.start()
    session = 0.0
    started = time.perf_counter()
    if engine == REFERENCE:
        found, sql, graphs = reference_counts(runs)
        counts = {str(run): kinds for run, kinds in found.items()}
        seconds, details = time.perf_counter() - started, {"duckdb": sql, "networkx": graphs}
    else:
        counts, seconds, session, details = _checker(runs, engine)
    memory = SAMPLER.stop()
    record = {"engine": engine, "seconds": seconds, "session_seconds": session, **memory}
    print(json.dumps({**record, "counts": counts, "details": details}))


# ---------------------------------------------------------------- orchestration


def _detail(engine: str, result: dict[str, Any]) -> str:
    """The row's second line: the reference's two parts, an engine's txn question and cycles."""
    details, wall = result["details"], result["seconds"]
    if engine == REFERENCE:
        return f"DuckDB {details['duckdb']:.1f} s, networkx {details['networkx']:.1f} s"
    questions = details["questions"]
    line = f"txn checks question {questions.get('txn checks', 0.0):.1f} s, value checks {questions.get('value checks', 0.0):.1f} s"
    if "cycles" in details:
        line += (
            f"; per-run function {details['per-run']:.1f} s, of it cycles (graphs, search, examples)"
            f" {details['cycles']:.1f} s = {details['cycles'] / wall:.1%} of the wall,"
            f" search alone {details['search']:.2f} s = {details['search'] / wall:.1%}"
        )
    return line


def _round(size: str, runs: list[Path], engines: list[str], expected: Counts, units: int) -> dict[str, Any]:
    """One round of every engine over ``runs``: a row each; the results by engine."""
    results: dict[str, Any] = {}
    for engine in engines:
        result = run_worker(__file__, engine, runs)
        results[engine] = result
        base = results.get(REFERENCE, {}).get("seconds")
        ratio = f"{result['seconds'] / base:8.2f}x" if base else "        -"
        wrong = disagreements(result["counts"], expected)
        if not wrong:
            verdict = "ok: the planted anomalies, exactly"
        else:
            verdict = f"MISMATCH ({len(wrong)}): " + "; ".join(wrong[:3])
        if engine != REFERENCE and REFERENCE in results:
            same = result["counts"] == results[REFERENCE]["counts"]
            verdict += ", as the reference" if same else ", NOT as the reference"
        print(
            f"{size:>10} {engine:>9} {result['seconds']:8.1f} {units / result['seconds']:11,.0f} "
            f"{result['peak_rss'] / 2**30:8.2f}G {result['driver_peak_rss'] / 2**30:6.2f}G "
            f"{result['jvm_peak_rss'] / 2**30:5.2f}G {result['session_seconds']:9.1f} {ratio}  {verdict}",
            flush=True,
        )
        print(f"#{'':>9} {engine}: {_detail(engine, result)}", flush=True)
        result["wrong"] = wrong
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000x10k,1x100kt", help="RUNSxN micro-ops or RUNSxNt transactions"
    )
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument("--data", default="/tmp/tidemark-bench-txn", help="where generated runs are cached")
    parser.add_argument("--plant-rate", type=float, default=PLANT_RATE, help="of transactions, per kind")
    parser.add_argument("--only", help="engines besides the reference (comma-separated: spark,pandas)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("runs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, [Path(r) for r in args.runs])
        return
    engines = [e for e in ENGINES if e == REFERENCE or not args.only or e in args.only.split(",")]
    print(
        f"{'size':>10} {'engine':>9} {'wall s':>8} {'txns/s':>11} {'peak RSS':>9} {'driver':>7} {'JVM':>6} "
        f"{'session s':>9}  vs ref  verdict"
    )
    measured: dict[tuple[str, str], list[tuple[float, float]]] = {}
    failed = False
    for size in args.sizes.split(","):
        began = time.perf_counter()
        runs, planted = dataset(Path(args.data), size, args.plant_rate)
        txns = sum(p["txns"] for p in planted)
        totals = {kind: sum(p[kind] for p in planted) for kind in PLANTED_KINDS}
        print(
            f"# {size}: {len(runs)} run(s), {txns:,} transactions, {sum(p['micro_ops'] for p in planted):,} "
            f"micro-ops, {sum(p['history_rows'] for p in planted):,} history rows (ready in "
            f"{time.perf_counter() - began:.0f} s); planted {totals}",
            flush=True,
        )
        for _ in range(args.repeats):
            results = _round(size, runs, engines, expected_counts(planted), txns)
            base = results[REFERENCE]["seconds"]
            for engine, result in results.items():
                measured.setdefault((size, engine), []).append((result["seconds"], result["seconds"] / base))
                failed = failed or bool(result["wrong"])
    print_ranges(measured, args.repeats, REFERENCE)
    if failed:
        print("# some engine's counts are not the planted ones (MISMATCH above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
