"""A run's history as the time series a report plots: throughput, latency and fault windows.

Input is the run's history (:mod:`harness.record.history`): ``history.parquet`` when it is at least
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
* **fault windows** -- each nemesis fault paired with the heal that undid it: ``kill`` and
  ``power-loss`` end at the ``start`` of the same node, ``pause`` at its ``resume``,
  ``partition`` at the next ``heal`` touching its nodes.  A window opens at the fault's
  invoke (it may act from then on) and closes at the heal's completion (it acts until
  then).  A fault whose completion is ``fail`` certainly did not happen: it is listed, not
  shaded.  A fault never healed is shaded to the end of the history.
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

from harness.record.history import (
    NEMESIS_PROCESS_CODE,
    HistoryFormatError,
    SkippedLine,
    iter_history,
    read_op_heads,
)
from harness.record.ops import NEMESIS_PROCESS
from harness.record.rundir import RunDir
from harness.report.rebalances import GROUP_OPS, Assignment, assignments
from nemesis.spec import HEALS, PARTITION

PARTITION_FAULT = PARTITION
PARTITION_HEAL = HEALS[PARTITION]
NODE_FAULT_HEALS: Final[dict[str, str]] = {f: heal for f, heal in HEALS.items() if f != PARTITION}
FAULT_KINDS: Final[tuple[str, ...]] = (*NODE_FAULT_HEALS, PARTITION_FAULT)
HEAL_KINDS: Final[frozenset[str]] = frozenset({*NODE_FAULT_HEALS.values(), PARTITION_HEAL})
_NICE_BIN_SECONDS: Final[tuple[float, ...]] = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
MAX_BINS: Final = 200


@dataclasses.dataclass(frozen=True, slots=True)
class NemesisEvent:
    """One nemesis op pair: what was done, to which nodes, when, with which outcome."""

    f: str
    nodes: tuple[str, ...]
    value: Any
    invoked_s: float
    completed_s: float | None
    outcome: str
    """``ok``, ``fail``, ``info``, or ``pending`` (no completion recorded)."""
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    label: str
    nodes: tuple[str, ...]
    start_s: float
    end_s: float | None
    """``None``: never healed (shaded to the end of the history)."""
    healed_by: str | None


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


def _frame_from_jsonl(path: Path, skipped: list[SkippedLine]) -> tuple[pd.DataFrame, dict[int, Any]]:
    index, time, process, kind, f, error, node = [], [], [], [], [], [], []
    nemesis_values: dict[int, Any] = {}
    for _, op in iter_history(path, skipped):
        index.append(op.index)
        time.append(op.time)
        process.append(NEMESIS_PROCESS_CODE if op.process == NEMESIS_PROCESS else op.process)
        kind.append(op.type)
        f.append(op.f)
        error.append(op.error)
        node.append(op.node)
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
        }
    )
    return frame, nemesis_values


def _frame_from_parquet(path: Path) -> tuple[pd.DataFrame, dict[int, Any]]:
    table = read_op_heads(path)
    frame = table.drop(["payload"]).to_pandas()
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


def _latencies(ops: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    client = ops[ops["process"] != NEMESIS_PROCESS_CODE].sort_values(["process", "index"], kind="stable")
    grouped = client.groupby("process", sort=False)
    previous_type = grouped["type"].shift()
    previous_f = grouped["f"].shift()
    previous_time = grouped["time"].shift()
    next_type = grouped["type"].shift(-1)
    is_completion = (client["type"] != "invoke") & (previous_type == "invoke") & (previous_f == client["f"])
    pending = int(((client["type"] == "invoke") & (next_type.isna() | (next_type == "invoke"))).sum())
    sends = client[is_completion & (client["f"] == "send")]
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


def _nodes_of(f: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, dict):
        return ()
    if f == PARTITION_FAULT and isinstance(value.get("grudge"), dict):
        grudge = value["grudge"]
        named = set(grudge) | {n for targets in grudge.values() if isinstance(targets, list) for n in targets}
        return tuple(sorted(str(n) for n in named))
    nodes = value.get("nodes")
    return tuple(str(n) for n in nodes) if isinstance(nodes, list) else ()


def nemesis_events(ops: pd.DataFrame, values: dict[int, Any]) -> list[NemesisEvent]:
    """Pair each nemesis invoke with the next completion of the same ``f`` (in history order)."""
    nemesis = ops[ops["process"] == NEMESIS_PROCESS_CODE]
    open_invokes: dict[str, list[dict[str, Any]]] = {}
    events: list[tuple[int, NemesisEvent]] = []
    for row in nemesis.to_dict("records"):
        seconds = row["time"] / 1e9
        if row["type"] == "invoke":
            open_invokes.setdefault(row["f"], []).append(row)
            continue
        waiting = open_invokes.get(row["f"])
        invoke = waiting.pop(0) if waiting else row  # a lone completion stands for itself
        value = values.get(row["index"], values.get(invoke["index"]))
        event = NemesisEvent(
            row["f"],
            _nodes_of(row["f"], value),
            value,
            invoke["time"] / 1e9,
            seconds,
            row["type"],
            row["error"],
        )
        events.append((invoke["index"], event))
    for waiting in open_invokes.values():
        for invoke in waiting:
            value = values.get(invoke["index"])
            events.append(
                (
                    invoke["index"],
                    NemesisEvent(
                        invoke["f"],
                        _nodes_of(invoke["f"], value),
                        value,
                        invoke["time"] / 1e9,
                        None,
                        "pending",
                        None,
                    ),
                )
            )
    return [event for _, event in sorted(events, key=lambda pair: pair[0])]


def _label(event: NemesisEvent) -> str:
    if event.f == PARTITION_FAULT and isinstance(event.value, dict) and event.value.get("kind"):
        return f"partition {event.value['kind']}"
    return f"{event.f} {','.join(event.nodes)}".strip()


def fault_windows(events: list[NemesisEvent]) -> list[FaultWindow]:
    """Fault windows from paired nemesis events (see the module docstring for the pairing)."""
    open_faults: list[tuple[NemesisEvent, set[str]]] = []
    windows: list[FaultWindow] = []

    def close(event: NemesisEvent, end_s: float | None, healed_by: str | None) -> None:
        windows.append(FaultWindow(event.f, _label(event), event.nodes, event.invoked_s, end_s, healed_by))

    for event in sorted(events, key=lambda e: e.completed_s if e.completed_s is not None else e.invoked_s):
        if event.f in FAULT_KINDS and event.outcome != "fail":
            open_faults.append((event, set(event.nodes)))
        elif event.f in HEAL_KINDS and event.outcome in ("ok", "info") and event.completed_s is not None:
            healed = set(event.nodes)
            still_open = []
            for fault, unhealed in open_faults:
                if (
                    event.f == PARTITION_HEAL
                    and fault.f == PARTITION_FAULT
                    and (not healed or healed & unhealed or not unhealed)
                ):
                    close(fault, event.completed_s, event.f)
                    continue
                if NODE_FAULT_HEALS.get(fault.f) == event.f:
                    unhealed -= healed
                    if not unhealed:
                        close(fault, event.completed_s, event.f)
                        continue
                still_open.append((fault, unhealed))
            open_faults = still_open
    for fault, _ in open_faults:
        close(fault, None, None)
    return sorted(windows, key=lambda w: w.start_s)


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
