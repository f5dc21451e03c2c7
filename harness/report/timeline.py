"""A run's history as the time series a report plots: throughput, latency and fault windows.

Input is the run's history (:mod:`testbed.record.history`): ``history.parquet`` when it is at least
as new as ``history.jsonl`` (columnar, the fast path), else the JSON lines (a run killed
before conversion has only those).  Bad JSON lines are skipped and counted -- a torn last
line is what a killed run leaves -- and never stop the report.

Everything per op is vectorised with pandas, so a 100k-op history is analysed in well
under a second (``bench/report.py`` measures it):

* **latency** -- each client completion is paired with its process's invoke: a process
  has at most one op pending (the op model), so after a stable sort by process, the row
  before a completion is its invoke.  Invokes never completed are counted as ``pending``.
* **throughput** -- ``send`` completions per second, per outcome, in bins whose width
  grows with the run's length (1 s up to ~200 bins).
* **fault windows** -- each nemesis fault paired with the heal that undid it, by the rule
  :mod:`testbed.record.faults` owns (the checker's liveness figures use the same windows).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.report.rebalances import GROUP_OPS, Assignment, assignments
from testbed.record.faults import FaultWindow, NemesisEvent, NemesisRow, fault_windows
from testbed.record.faults import nemesis_events as paired_events
from testbed.record.history import (
    NEMESIS_PROCESS_CODE,
    HistoryFormatError,
    SkippedLine,
    iter_history,
    read_op_heads,
)
from testbed.record.ops import NEMESIS_PROCESS
from testbed.record.rundir import RunDir

_NICE_BIN_SECONDS: Final[tuple[float, ...]] = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
MAX_BINS: Final = 200


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The plotted series of one run (all times in seconds since the test started)."""

    source: str
    op_count: int
    duration_s: float
    latencies: pd.DataFrame
    """One row per completed ``send``: ``invoked_s``, ``latency_ms``, ``type``."""
    throughput: pd.DataFrame
    """Index ``bin_start_s``; columns ``ok``, ``fail``, ``info``: send completions per second."""
    bin_seconds: float
    pending: int
    """Client invokes that never completed (a killed run, or a process that hung)."""
    events: tuple[NemesisEvent, ...]
    windows: tuple[FaultWindow, ...]
    skipped: tuple[SkippedLine, ...]
    assignments: tuple[Assignment, ...] = ()
    """A consumer group's assignments (:mod:`harness.report.rebalances`); none without a group."""


class HistoryUnavailable(Exception):
    """No readable history at all; the message says why (missing, unreadable, wrong version)."""


# ----------------------------------------------------------------------------- loading


def _is_send(micro_op: Any) -> bool:
    return isinstance(micro_op, dict) and micro_op.get("f") == "send"


def _frame_from_jsonl(path: Path, skipped: list[SkippedLine]) -> tuple[pd.DataFrame, dict[int, Any]]:
    index, time, process, kind, f, error, node, writes = [], [], [], [], [], [], [], []
    nemesis_values: dict[int, Any] = {}
    for _, op in iter_history(path, skipped):
        index.append(op.index)
        time.append(op.time)
        process.append(NEMESIS_PROCESS_CODE if op.process == NEMESIS_PROCESS else op.process)
        kind.append(op.type)
        f.append(op.f)
        error.append(op.error)
        node.append(op.node)
        writes.append(op.f == "txn" and isinstance(op.value, list) and any(_is_send(m) for m in op.value))
        if op.process == NEMESIS_PROCESS or op.f in GROUP_OPS:
            nemesis_values[op.index] = op.value
    frame = pd.DataFrame(
        {
            "index": np.asarray(index, dtype=np.int64),
            "time": np.asarray(time, dtype=np.int64),
            "process": np.asarray(process, dtype=np.int64),
            "type": kind,
            "f": f,
            "error": error,
            "node": node,
            "writes": np.asarray(writes, dtype=bool),
        }
    )
    return frame, nemesis_values


def _frame_from_parquet(path: Path) -> tuple[pd.DataFrame, dict[int, Any]]:
    table = read_op_heads(path)
    writing = pc.and_(pc.equal(table["f"], "txn"), pc.match_substring(table["payload"], SEND_MICRO_OP))
    frame = table.drop(["payload"]).append_column("writes", pc.fill_null(writing, False)).to_pandas()
    frame = frame.astype({"index": "int64", "time": "int64", "process": "int64"})
    kept = pc.or_(
        pc.equal(table["process"], NEMESIS_PROCESS_CODE), pc.is_in(table["f"], pa.array(sorted(GROUP_OPS)))
    )
    nemesis = table.filter(kept).select(["index", "payload"]).to_pylist()
    values = {
        row["index"]: json.loads(row["payload"]) if row["payload"] is not None else None for row in nemesis
    }
    return frame.sort_values("index", kind="stable").reset_index(drop=True), values


def load_ops(run_dir: Path) -> tuple[pd.DataFrame, dict[int, Any], str, list[SkippedLine], list[str]]:
    """The run's ops (one row each) and the values of nemesis ops and of the group's ``assign``
    and ``revoke`` ops; also the source used and notes.

    Raises :class:`HistoryUnavailable` when neither file gives a history.
    """
    jsonl, parquet = RunDir(run_dir).history_jsonl, RunDir(run_dir).history_parquet
    notes: list[str] = []
    skipped: list[SkippedLine] = []
    parquet_fresh = parquet.is_file() and (
        not jsonl.is_file() or parquet.stat().st_mtime >= jsonl.stat().st_mtime
    )
    if parquet_fresh:
        try:
            frame, values = _frame_from_parquet(parquet)
            return frame, values, parquet.name, skipped, notes
        except (HistoryFormatError, OSError, pa.ArrowException, ValueError, KeyError) as error:
            notes.append(f"{parquet.name} unusable ({error}); read {jsonl.name} instead")
    if not jsonl.is_file():
        raise HistoryUnavailable("no history.jsonl or history.parquet in the run directory")
    try:
        frame, values = _frame_from_jsonl(jsonl, skipped)
    except HistoryFormatError as error:
        raise HistoryUnavailable(str(error)) from None
    except OSError as error:
        raise HistoryUnavailable(f"{jsonl}: unreadable ({error.strerror or error})") from None
    return frame, values, jsonl.name, skipped, notes


# ----------------------------------------------------------------------------- series


def bin_width(duration_s: float) -> float:
    """The smallest "nice" bin width that keeps the run within :data:`MAX_BINS` bins."""
    for width in _NICE_BIN_SECONDS:
        if duration_s / width <= MAX_BINS:
            return width
    return float(np.ceil(duration_s / MAX_BINS))


SEND_MICRO_OP = '"f":"send"'
"""How a ``txn`` op's value (compact JSON) names a send micro-op: an op with one writes."""


def _writing_txn(client: pd.DataFrame) -> pd.Series:
    """The ``txn`` ops that send something (a transaction; not a consumer's read-only op)."""
    return (client["f"] == "txn") & client["writes"].astype(bool)


def _latencies(ops: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    client = ops[ops["process"] != NEMESIS_PROCESS_CODE].sort_values(["process", "index"], kind="stable")
    grouped = client.groupby("process", sort=False)
    previous_type = grouped["type"].shift()
    previous_f = grouped["f"].shift()
    previous_time = grouped["time"].shift()
    next_type = grouped["type"].shift(-1)
    is_completion = (client["type"] != "invoke") & (previous_type == "invoke") & (previous_f == client["f"])
    pending = int(((client["type"] == "invoke") & (next_type.isna() | (next_type == "invoke"))).sum())
    # Sends, or transactions (whose type is their outcome); a read-only txn op is a consumer's read,
    # recorded after it returned: no latency of its own (its invoke value has no send).
    sends = client[is_completion & ((client["f"] == "send") | _writing_txn(client))]
    invoked = previous_time[sends.index]
    frame = pd.DataFrame(
        {
            "invoked_s": invoked.to_numpy(dtype=np.float64) / 1e9,
            "completed_s": sends["time"].to_numpy(dtype=np.float64) / 1e9,
            "latency_ms": (sends["time"] - invoked).to_numpy(dtype=np.float64) / 1e6,
            "type": sends["type"].to_numpy(),
        }
    )
    return frame.sort_values("invoked_s", kind="stable").reset_index(drop=True), pending


def _throughput(latencies: pd.DataFrame, duration_s: float, width: float) -> pd.DataFrame:
    edges = np.arange(0.0, duration_s + width, width)
    if len(edges) < 2:
        edges = np.array([0.0, width])
    columns = {}
    for outcome in ("ok", "fail", "info"):
        times = latencies.loc[latencies["type"] == outcome, "completed_s"].to_numpy()
        counts, _ = np.histogram(times, bins=edges)
        columns[outcome] = counts / width
    return pd.DataFrame(columns, index=pd.Index(edges[:-1], name="bin_start_s"))


def nemesis_events(ops: pd.DataFrame, values: dict[int, Any]) -> list[NemesisEvent]:
    """The nemesis ops of ``ops`` paired (:func:`testbed.record.faults.nemesis_events`)."""
    nemesis = ops[ops["process"] == NEMESIS_PROCESS_CODE]
    rows = [
        NemesisRow(
            int(row["index"]), int(row["time"]), row["type"], row["f"], values.get(row["index"]), row["error"]
        )
        for row in nemesis.to_dict("records")
    ]
    return paired_events(rows)


def build_timeline(run_dir: Path) -> tuple[Timeline, list[str]]:
    """The run's :class:`Timeline` and notes about how the history was read.

    Raises :class:`HistoryUnavailable` when there is no readable history.
    """
    ops, values, source, skipped, notes = load_ops(run_dir)
    duration = float(ops["time"].max()) / 1e9 if len(ops) else 0.0
    latencies, pending = _latencies(ops)
    width = bin_width(duration)
    events = nemesis_events(ops, values)
    timeline = Timeline(
        source=source,
        op_count=len(ops),
        duration_s=duration,
        latencies=latencies,
        throughput=_throughput(latencies, duration, width),
        bin_seconds=width,
        pending=pending,
        events=tuple(events),
        windows=tuple(fault_windows(events)),
        skipped=tuple(skipped),
        assignments=tuple(assignments(ops, values)),
    )
    return timeline, notes
