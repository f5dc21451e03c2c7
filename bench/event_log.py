"""Reading a Spark event log (``spark.eventLog.enabled``) for ``bench/warm_profile.py``: where a pass's
server-side time went, per Spark Connect operation.

A Spark Connect server logs, for each operation a client sends (a ``collect``, ``toArrow``, a
``CREATE TABLE``), its phases as events -- started, analyzed, ready for execution, finished, closed
-- and tags every Spark job the operation runs with the operation's job tag (``spark.job.tags``).
So each operation gets: its wall time and phases, its jobs, stages and tasks, their durations,
the tasks' run and CPU time and each task's scheduler delay (as Spark's UI computes it: the task's
span less its run, deserialisation, result serialisation and result fetching), and the shuffle
partitions its stages ran (the task counts of the stages that read a shuffle, after AQE).
Everything is from the log alone; the times are the server's clock (the same machine as the client's
here, so the client's pass start and end compare with them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CONNECT = "org.apache.spark.sql.connect.service.SparkListenerConnectOperation"
_SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"


def read_events(path: Path, offset: int) -> list[dict[str, Any]]:
    """The whole events written at or after byte ``offset`` of the log (a torn last line is left);
    of a zstd-compressed log (Spark 4's default), every event: :func:`report` keeps a pass's by time."""
    if ".zstd" in path.name:
        import pyarrow as pa

        data = pa.CompressedInputStream(pa.OSFile(str(path)), "zstd").read()
    else:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    events = []
    for line in data.split(b"\n"):
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


@dataclasses.dataclass
class Operation:
    """One Spark Connect operation and what it ran."""

    tag: str
    statement: str = ""
    phases: dict[str, int] = dataclasses.field(default_factory=dict)
    """Phase name (Started, Analyzed, ReadyForExecution, Finished, Closed, Failed) -> epoch ms."""
    jobs: list[int] = dataclasses.field(default_factory=list)
    job_ms: int = 0
    stages: list[tuple[int, int, bool]] = dataclasses.field(default_factory=list)
    """(stage id, tasks, reads a shuffle) per completed stage."""
    stage_ms: int = 0
    tasks: int = 0
    task_ms: int = 0
    run_ms: int = 0
    cpu_ms: float = 0.0
    delay_ms: int = 0
    gc_ms: int = 0

    def span(self) -> tuple[int, int]:
        times = self.phases.values()
        return min(times), max(times)

    def phase(self, first: str, then: str) -> int | None:
        if first in self.phases and then in self.phases:
            return self.phases[then] - self.phases[first]
        return None


def _short(statement: str) -> str:
    """The first words of an operation's statement (a plan's text form is long)."""
    words = " ".join(statement.split())
    return words[:90]


def _tags(properties: dict[str, Any]) -> list[str]:
    return [tag for tag in str(properties.get("spark.job.tags", "")).split(",") if tag]


def operations(events: Iterable[dict[str, Any]]) -> list[Operation]:
    """The operations the events tell of, in start order, with their jobs', stages' and tasks' figures."""
    ops: dict[str, Operation] = {}
    job_op: dict[int, Operation] = {}
    stage_op: dict[int, Operation] = {}
    job_start: dict[int, int] = {}
    for event in events:
        name = str(event.get("Event", ""))
        if name.startswith(_CONNECT) and "jobTag" in event and "eventTime" in event:
            phase = name.removeprefix(_CONNECT)
            op = ops.setdefault(str(event["jobTag"]), Operation(str(event["jobTag"])))
            op.phases[phase] = int(event["eventTime"])
            op.statement = op.statement or str(event.get("statementText", "") or "")
        elif name == "SparkListenerJobStart":
            tags = [ops[tag] for tag in _tags(event.get("Properties") or {}) if tag in ops]
            if tags:
                job_op[event["Job ID"]] = tags[0]
                tags[0].jobs.append(event["Job ID"])
                job_start[event["Job ID"]] = event["Submission Time"]
                for stage in event.get("Stage IDs", []):
                    stage_op[stage] = tags[0]
        elif name == "SparkListenerJobEnd" and event["Job ID"] in job_op:
            job_op[event["Job ID"]].job_ms += event["Completion Time"] - job_start[event["Job ID"]]
        elif name == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            op_of = stage_op.get(info["Stage ID"])
            if op_of is not None and "Completion Time" in info and "Submission Time" in info:
                reads = any(
                    "shuffle read" in str(item.get("Name", "")) for item in info.get("Accumulables", [])
                ) or bool(info.get("Parent IDs"))
                op_of.stages.append((info["Stage ID"], info["Number of Tasks"], reads))
                op_of.stage_ms += info["Completion Time"] - info["Submission Time"]
        elif name == "SparkListenerTaskEnd" and event.get("Stage ID") in stage_op:
            _add_task(stage_op[event["Stage ID"]], event)
    return sorted(ops.values(), key=lambda op: op.span()[0])


def _add_task(op: Operation, event: dict[str, Any]) -> None:
    info, metrics = event["Task Info"], event.get("Task Metrics") or {}
    span = info["Finish Time"] - info["Launch Time"]
    run = int(metrics.get("Executor Run Time", 0))
    fetching = info["Finish Time"] - info["Getting Result Time"] if info.get("Getting Result Time") else 0
    overhead = (
        run
        + int(metrics.get("Executor Deserialize Time", 0))
        + int(metrics.get("Result Serialization Time", 0))
        + fetching
    )
    op.tasks += 1
    op.task_ms += span
    op.run_ms += run
    op.cpu_ms += int(metrics.get("Executor CPU Time", 0)) / 1e6
    op.delay_ms += max(0, span - overhead)
    op.gc_ms += int(metrics.get("JVM GC Time", 0))


def union_ms(spans: Iterable[tuple[int, int]]) -> int:
    """The milliseconds covered by at least one of ``spans`` (start, end)."""
    covered, until = 0, None
    for start, end in sorted(spans):
        if until is None or start > until:
            covered += end - start
            until = end
        elif end > until:
            covered += end - until
            until = end
    return covered


def plans(events: Iterable[dict[str, Any]]) -> list[str]:
    """Each SQL execution's description and physical plan (with AQE's final one where it changed)."""
    found: dict[int, str] = {}
    for event in events:
        name = str(event.get("Event", ""))
        if name == _SQL_START:
            found[event.get("executionId", -1)] = (
                f"== execution {event.get('executionId')}: {_short(str(event.get('description', '')))}\n"
                + str(event.get("physicalPlanDescription", ""))
            )
        elif name.endswith("SparkListenerSQLAdaptiveExecutionUpdate") and event.get("executionId") in found:
            found[event["executionId"]] += "\n-- adaptive update:\n" + str(
                event.get("physicalPlanDescription", "")
            )
    return list(found.values())


def report(ops: list[Operation], pass_ms: tuple[int, int]) -> list[str]:
    """The lines that say where a pass (client epoch ms ``pass_ms``) went on the server."""
    start, end = pass_ms
    mine = [op for op in ops if op.phases and start <= op.span()[0] <= end]
    lines = [
        f"{'operation':<44} {'wall':>6} {'analyze':>7} {'plan':>5} {'exec':>6} {'fetch':>6} "
        f"{'jobs':>4} {'job ms':>6} {'stages (tasks, *shuffle read)':<30} {'task ms':>7} {'cpu ms':>7} {'delay':>6}"
    ]
    for op in mine:
        first, last = op.span()
        stages = " ".join(f"{tasks}{'*' if reads else ''}" for _, tasks, reads in op.stages)
        lines.append(
            f"{_short(op.statement)[:44]:<44} {last - first:6d} {op.phase('Started', 'Analyzed') or 0:7d} "
            f"{op.phase('Analyzed', 'ReadyForExecution') or 0:5d} {op.phase('ReadyForExecution', 'Finished') or 0:6d} "
            f"{op.phase('Finished', 'Closed') or 0:6d} {len(op.jobs):4d} {op.job_ms:6d} {stages[:30]:<30} "
            f"{op.task_ms:7d} {op.cpu_ms:7.0f} {op.delay_ms:6d}"
        )
    in_flight = union_ms(op.span() for op in mine)
    jobs = sum(len(op.jobs) for op in mine)
    stages = sum(len(op.stages) for op in mine)
    tasks = sum(op.tasks for op in mine)
    lines += [
        f"# pass {end - start} ms; some operation in flight on the server {in_flight} ms; none (client side, "
        f"gRPC analyze calls) {end - start - in_flight} ms",
        f"# {len(mine)} operations, {jobs} jobs ({sum(op.job_ms for op in mine)} ms), {stages} stages "
        f"({sum(op.stage_ms for op in mine)} ms), {tasks} tasks: {sum(op.task_ms for op in mine)} ms of task "
        f"spans, {sum(op.run_ms for op in mine)} ms run, {sum(op.cpu_ms for op in mine):.0f} ms CPU, "
        f"{sum(op.gc_ms for op in mine)} ms GC, {sum(op.delay_ms for op in mine)} ms scheduler delay",
        "# phases summed: "
        + ", ".join(
            f"{label} {sum(op.phase(a, b) or 0 for op in mine)} ms"
            for label, a, b in (
                ("analyze", "Started", "Analyzed"),
                ("plan", "Analyzed", "ReadyForExecution"),
                ("execute", "ReadyForExecution", "Finished"),
                ("results", "Finished", "Closed"),
            )
        ),
    ]
    return lines
