"""The report's rebalance timeline: which consumer-group member (process) held which partition when.

A run with ``--consume-via subscribe`` records an ``assign`` when a member gets partitions and
a ``revoke`` when it gives them up, each assignment under a fresh process
(``docs/consumer-groups.md``).  :func:`assignments` turns those ops into one
:class:`Assignment` per process -- its partitions, generation and consumer, when it began and
how it ended -- and :func:`rebalance_section` draws them under the report's main figure: one
lane per partition, one bar per assignment on each of its partitions, coloured by consumer,
on the same time axis as the throughput plot (consumer-churn faults as dotted lines).  The
table under it lists every assignment, empty ones included.

How an assignment ends, in order of evidence:

* its ``revoke`` (``lost`` when the client had already been dropped from the group);
* a ``takeover``: a fresh process continued the assignment after a commit ended ``info``
  (the same partitions, no rebalance) -- the bar continues under the new process;
* an op of its process that ended ``info`` (a failed poll: the client was closed and its
  revoke is never recorded);
* otherwise it was still held when the history ended (hatched to the end).

A stalled consumer's revoke is recorded late, after the next generation's assigns: its bar
then overlaps its successor's, as the stuck application saw it.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from collections.abc import Iterable, Mapping
from typing import Any, Final

import pandas as pd
from matplotlib.figure import Figure

ASSIGN, REVOKE = "assign", "revoke"
GROUP_OPS: Final = frozenset({ASSIGN, REVOKE})
"""The ops whose values the report keeps for this timeline (``harness.report.timeline``)."""
CHURN: Final = "consumer-churn"
CONSUMER_COLOURS: Final = (
    "#1f6fc5",
    "#2a9d3f",
    "#e8890c",
    "#7d4cc2",
    "#c0392b",
    "#17a2b8",
    "#8c564b",
    "#d63384",
)
DPI: Final = 100
WIDTH_INCHES: Final = 12.0
LEFT, RIGHT = 0.085, 0.985
"""The main figure's margins (``harness.report.plots``): the two time axes line up."""


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """One member process's assignment, as its ops recorded it (times in seconds)."""

    process: int
    consumer: int | None
    member: str | None
    generation: int | None
    partitions: tuple[int, ...]
    start_s: float
    end_s: float | None
    """None: still held when the history ended."""
    ended: str
    """How it ended (see the module docstring)."""
    takeover_of: int | None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def assignments(ops: pd.DataFrame, values: Mapping[int, Any]) -> list[Assignment]:
    """One :class:`Assignment` per process with an ``assign`` op, by start time.

    ``ops``: one row per op (``index, time, process, type, f``), ``values``: op index -> value
    for (at least) the ``assign`` and ``revoke`` ops.
    """
    client = ops[ops["process"] >= 0]
    group = client[client["f"].isin(list(GROUP_OPS))]
    if group.empty:
        return []
    done = group[group["type"] != "invoke"]  # the completions (always ok); an invoke alone stands for itself
    first: dict[tuple[str, int], dict[str, Any]] = {}
    for row in pd.concat([done, group[group["type"] == "invoke"]]).to_dict("records"):
        first.setdefault((row["f"], int(row["process"])), row)
    takeovers: dict[int, dict[str, Any]] = {}
    for (f, _process), row in sorted(first.items(), key=lambda item: item[1]["index"]):
        value = values.get(row["index"])
        taken = _int(value.get("takeover")) if isinstance(value, dict) else None
        if f == ASSIGN and taken is not None:
            takeovers.setdefault(taken, row)
    last = client.sort_values("index").groupby("process").tail(1).set_index("process")
    found = []
    for (f, process), row in first.items():
        if f != ASSIGN:
            continue
        value = values.get(row["index"])
        value = value if isinstance(value, dict) else {}
        end_s, ended = _end(process, first.get((REVOKE, process)), values, takeovers, last)
        partitions = value.get("partitions")
        found.append(
            Assignment(
                process=process,
                consumer=_int(value.get("consumer")),
                member=value.get("member_id") if isinstance(value.get("member_id"), str) else None,
                generation=_int(value.get("generation")),
                partitions=tuple(p for p in partitions if type(p) is int)
                if isinstance(partitions, list)
                else (),
                start_s=row["time"] / 1e9,
                end_s=end_s,
                ended=ended,
                takeover_of=_int(value.get("takeover")),
            )
        )
    return sorted(found, key=lambda a: (a.start_s, a.process))


def _end(
    process: int,
    revoke: dict[str, Any] | None,
    values: Mapping[int, Any],
    takeovers: Mapping[int, dict[str, Any]],
    last: pd.DataFrame,
) -> tuple[float | None, str]:
    if revoke is not None:
        value = values.get(revoke["index"])
        lost = isinstance(value, dict) and value.get("lost") is True
        return revoke["time"] / 1e9, "lost" if lost else "revoked"
    if process in takeovers:
        successor = takeovers[process]
        return successor["time"] / 1e9, f"taken over by process {successor['process']}"
    final = last.loc[process]
    if final["type"] == "info":
        return final["time"] / 1e9, f"its {final['f']} ended info (no revoke recorded)"
    return None, "held when the history ended"


def _colour(consumer: int | None) -> str:
    return "#6e7781" if consumer is None else CONSUMER_COLOURS[consumer % len(CONSUMER_COLOURS)]


def render_rebalance_figure(
    held: list[Assignment], x_range: tuple[float, float], churns: Iterable[float] = ()
) -> bytes:
    """A PNG: one lane per partition, a bar per assignment on each of its partitions."""
    partitions = sorted({p for a in held for p in a.partitions})
    height = 0.32 * max(len(partitions), 1) + 1.0
    figure = Figure(figsize=(WIDTH_INCHES, height), dpi=DPI)
    axis = figure.add_axes((LEFT, 0.55 / height, RIGHT - LEFT, 1 - 0.75 / height))
    lane = {p: number for number, p in enumerate(partitions)}
    span = x_range[1] - x_range[0]
    for assignment in held:
        stop = assignment.end_s if assignment.end_s is not None else x_range[1]
        width = max(stop - assignment.start_s, span * 0.002)
        for p in assignment.partitions:
            axis.barh(
                lane[p],
                width,
                left=assignment.start_s,
                height=0.7,
                color=_colour(assignment.consumer),
                alpha=0.55,
                edgecolor="#1f2328",
                linewidth=0.4,
                hatch="//" if assignment.end_s is None else None,
            )
            if width > span * 0.045:
                axis.text(
                    assignment.start_s + width / 2,
                    lane[p],
                    f"P{assignment.process}"
                    + (f" g{assignment.generation}" if assignment.generation is not None else ""),
                    ha="center",
                    va="center",
                    fontsize=7,
                    clip_on=True,
                )
    for moment in churns:
        axis.axvline(moment, color="#6e7781", linestyle=":", linewidth=1.0)
    axis.set_yticks(range(len(partitions)), [f"p{p}" for p in partitions])
    axis.set_ylim(-0.6, max(len(partitions), 1) - 0.4)
    axis.invert_yaxis()
    axis.set_xlim(*x_range)
    axis.set_xlabel("seconds since the test started (bars: member processes, colour: consumer)")
    axis.grid(True, axis="x", alpha=0.25, linewidth=0.6)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _cell(value: Any) -> str:
    return '<span class="note">-</span>' if value is None else html.escape(str(value), quote=True)


def rebalance_section(
    held: list[Assignment], x_range: tuple[float, float], churns: Iterable[float] = ()
) -> str:
    """The report's HTML for the group's assignments ("" for a run without a consumer group)."""
    if not held:
        return ""
    image = base64.b64encode(render_rebalance_figure(held, x_range, churns)).decode("ascii")
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{cell}</td>"
            for cell in (
                _cell(a.process),
                f'<span class="swatch" style="background:{_colour(a.consumer)}"></span>{_cell(a.consumer)}',
                _cell(a.generation),
                _cell(", ".join(map(str, a.partitions)) or "(none)"),
                f"{a.start_s:.3f}",
                _cell(None if a.end_s is None else f"{a.end_s:.3f}"),
                _cell(a.ended),
                _cell(a.takeover_of),
                _cell(a.member),
            )
        )
        + "</tr>"
        for a in held
    )
    head = "".join(
        f"<th>{name}</th>"
        for name in (
            "process",
            "consumer",
            "generation",
            "partitions",
            "assigned (s)",
            "ended (s)",
            "how it ended",
            "takeover of",
            "member",
        )
    )
    return (
        "<h3>consumer group: who held which partition</h3>"
        f'<img class="plot" alt="partitions held by each group member over time" src="data:image/png;base64,{image}">'
        f"<details><summary>assignments ({len(held)})</summary>"
        f'<table class="assignments"><tr>{head}</tr>{rows}</table></details>'
    )
